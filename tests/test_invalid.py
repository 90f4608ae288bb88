"""Bad input gets a clear error naming the field and the valid range, and nothing changes.

Every case feeds one invalid value (or shape, or table) into an otherwise valid input and checks
that the error names *where* the problem is (``experiment``, ``environment (gap-instance)``,
``algorithms[2] (fedlinucb)``), *which* field, and *what* would have been valid.  Where there is
state (a config dict, a ridge state, a policy) it is compared bit for bit before and after.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import fields

import numpy as np
import pytest

from fedbandits import ConfigError, config_from_dict, loads_config
from fedbandits.algorithms.base import LinUCBParams
from fedbandits.algorithms.fedlinucb import FedLinUCBParams
from fedbandits.core.ridge import RidgeState
from fedbandits.protocols.base import Protocol
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS, PolicyContext
from fedbandits.sim.runner import run_experiment

SPHERE = {"name": "gaussian-sphere", "agents": 2, "arms": 3, "dim": 3}
GAP = {"name": "gap-instance", "agents": 2, "arms": 4, "dim": 3, "gap": 0.1}


def valid_config(environment: dict | None = None, second: dict | None = None) -> dict:
    """A small valid config; ``second`` replaces the second [[algorithms]] table."""
    return {
        "experiment": {"seed": 3, "runs": 2, "horizon": 10},
        "environment": dict(environment or SPHERE),
        "algorithms": [
            {"name": "linucb-independent", "label": "baseline"},
            dict(second or {"name": "fedlinucb", "batch": 5}),
        ],
    }


def assert_rejected(data: object, pattern: str) -> None:
    """config_from_dict(data) raises a ConfigError matching ``pattern`` and leaves ``data`` as it was."""
    before = copy.deepcopy(data)
    with pytest.raises(ConfigError, match=pattern):
        config_from_dict(data)  # type: ignore[arg-type]
    assert data == before


def where(prefix: str, message: str) -> str:
    """``prefix: message`` with the prefix taken literally and the message as a regex."""
    return "^" + re.escape(prefix) + ": " + message


# --------------------------------------------------------------------------------------------
# the base configs are valid, so every failure below is due to the one change it makes
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("environment", [SPHERE, GAP], ids=["gaussian-sphere", "gap-instance"])
def test_base_configs_are_valid(environment):
    config = config_from_dict(valid_config(environment))
    assert config.environment.name == environment["name"]
    assert config.experiment.horizon == 10
    assert [a.label for a in config.algorithms] == ["baseline", "fedlinucb"]
    assert config.algorithms[1].params.batch == 5


# --------------------------------------------------------------------------------------------
# [experiment]
# --------------------------------------------------------------------------------------------
INT_GE_1 = "{} must be an integer >= 1"
EXPERIMENT_CASES = [
    # non-positive
    ("horizon", 0, INT_GE_1),
    ("horizon", -5, INT_GE_1),
    ("runs", 0, INT_GE_1),
    ("runs", -1, INT_GE_1),
    ("runs_per_task", 0, INT_GE_1),
    # non-integer where an integer is expected (an integral float is still not an integer)
    ("horizon", 2.5, INT_GE_1),
    ("horizon", 10.0, INT_GE_1),
    ("horizon", "10", INT_GE_1),
    ("runs", 1.5, INT_GE_1),
    ("runs", None, INT_GE_1),
    # booleans are not integers, even though True == 1
    ("horizon", True, INT_GE_1),
    ("runs", True, INT_GE_1),
    ("seed", False, "{} must be an integer >= 0"),
    # negative seeds
    ("seed", -1, "{} must be an integer >= 0"),
    ("seed", 1.0, "{} must be an integer >= 0"),
    ("noise_seed", -1, "{} must be an integer >= 0"),
    ("noise_seed", 0.5, "{} must be an integer >= 0"),
    ("grid_points", 1, "{} must be an integer >= 2"),
    ("grid_points", 2.0, "{} must be an integer >= 2"),
    ("name", "", "{} must be a non-empty string"),
    ("name", 7, "{} must be a non-empty string"),
]


@pytest.mark.parametrize(("key", "value", "message"), EXPERIMENT_CASES)
def test_experiment_values(key, value, message):
    data = valid_config()
    data["experiment"][key] = value
    assert_rejected(data, where("experiment", re.escape(message.format(key))))


# --------------------------------------------------------------------------------------------
# [environment]
# --------------------------------------------------------------------------------------------
GAP_RANGE = r"gap must be (a finite number )?in \(0\.0, 0\.3\]"
NOISE_RANGE = r"noise_sd must be (a finite number )?>= 0\.0"
ENVIRONMENT_CASES = [
    (SPHERE, "agents", 0, r"agents must be an integer >= 1"),
    (SPHERE, "agents", -2, r"agents must be an integer >= 1"),
    (SPHERE, "agents", 2.5, r"agents must be an integer >= 1"),
    (SPHERE, "agents", True, r"agents must be an integer >= 1"),
    (SPHERE, "arms", 0, r"arms must be an integer >= 1"),
    (SPHERE, "arms", "5", r"arms must be an integer >= 1"),
    (SPHERE, "dim", 0, r"dim must be an integer >= 2"),
    (SPHERE, "dim", 1, r"dim must be an integer >= 2"),  # the sphere needs d-1 >= 1 free coordinates
    (SPHERE, "dim", 3.0, r"dim must be an integer >= 2"),
    (SPHERE, "dim", True, r"dim must be an integer >= 2"),
    (SPHERE, "noise_sd", -0.1, NOISE_RANGE),
    (SPHERE, "noise_sd", math.nan, NOISE_RANGE),
    (SPHERE, "noise_sd", math.inf, NOISE_RANGE),
    (SPHERE, "noise_sd", "0.5", NOISE_RANGE),
    (SPHERE, "noise_sd", True, NOISE_RANGE),
    (GAP, "agents", 0, r"agents must be an integer >= 1"),
    (GAP, "dim", 1, r"dim must be an integer >= 2"),
    (GAP, "arms", 1, r"arms must be an integer in \[2, 9\]"),
    (GAP, "arms", 10, r"arms must be an integer in \[2, 9\]"),  # arms > dim^2
    (GAP, "arms", 4.0, r"arms must be an integer in \[2, 9\]"),
    (GAP, "gap", 0.0, GAP_RANGE),
    (GAP, "gap", -0.1, GAP_RANGE),
    (GAP, "gap", 0.30001, GAP_RANGE),
    (GAP, "gap", 1.0, GAP_RANGE),
    (GAP, "gap", math.nan, GAP_RANGE),
    (GAP, "gap", "0.1", GAP_RANGE),
]


@pytest.mark.parametrize(
    ("environment", "key", "value", "message"),
    ENVIRONMENT_CASES,
    ids=[f"{env['name']}-{key}={value!r}" for env, key, value, _ in ENVIRONMENT_CASES],
)
def test_environment_values(environment, key, value, message):
    data = valid_config(environment)
    data["environment"][key] = value
    assert_rejected(data, where(f"environment ({environment['name']})", message))


def test_gap_instance_arms_limit_follows_dim():
    # arms = dim^2 is the largest valid value, dim^2 + 1 the smallest invalid one
    config_from_dict(valid_config({**GAP, "dim": 4, "arms": 16}))
    assert_rejected(
        valid_config({**GAP, "dim": 4, "arms": 17}),
        where("environment (gap-instance)", r"arms must be an integer in \[2, 16\], got 17"),
    )


# --------------------------------------------------------------------------------------------
# [[algorithms]] parameters
# --------------------------------------------------------------------------------------------
REG_RANGE = r"reg must be (a finite number )?> 0\.0"
ALPHA_RANGE = r"alpha must be (a finite number )?in \(0\.0, 1\.0\]"
RADIUS_KINDS = r"radius must be one of 'theory', 'constant', got 'foo'"
PROTOCOL_NAMES = re.escape(", ".join(map(repr, PROTOCOLS)))
ALGORITHM_NAMES = re.escape(", ".join(map(repr, ALGORITHMS)))
ENVIRONMENT_NAMES = re.escape(", ".join(map(repr, ENVIRONMENTS)))
ALGORITHM_CASES = [
    ({"name": "linucb-independent", "reg": 0.0}, REG_RANGE),
    ({"name": "linucb-independent", "reg": 0}, REG_RANGE),
    ({"name": "linucb-independent", "reg": -1.0}, REG_RANGE),
    ({"name": "linucb-independent", "reg": math.inf}, REG_RANGE),
    ({"name": "linucb-independent", "reg": math.nan}, REG_RANGE),
    ({"name": "linucb-independent", "reg": "1"}, REG_RANGE),
    ({"name": "linucb-super", "reg": -0.5}, REG_RANGE),
    ({"name": "fedlinucb", "reg": 0.0}, REG_RANGE),
    ({"name": "linucb-independent", "alpha": 0.0}, ALPHA_RANGE),
    ({"name": "linucb-independent", "alpha": -0.01}, ALPHA_RANGE),
    ({"name": "linucb-independent", "alpha": 1.5}, ALPHA_RANGE),
    ({"name": "linucb-independent", "alpha": math.nan}, ALPHA_RANGE),
    ({"name": "fedlinucb", "alpha": 2}, ALPHA_RANGE),
    ({"name": "linucb-independent", "radius": "foo"}, RADIUS_KINDS),
    ({"name": "fedlinucb", "radius": "foo"}, RADIUS_KINDS),
    ({"name": "linucb-independent", "beta_scale": -1.0}, r"beta_scale must be (a finite number )?>= 0\.0"),
    ({"name": "linucb-independent", "radius": "constant", "beta": -1.0}, r"beta must be (a finite number )?>= 0\.0"),
    ({"name": "linucb-independent", "noise_scale": -1.0}, r"noise_scale must be (a finite number )?>= 0\.0"),
    # a parameter the chosen radius does not use is still a parameter: its help text says ">= 0"
    ({"name": "linucb-independent", "beta": -1.0}, r"beta must be (a finite number )?>= 0\.0"),
    ({"name": "linucb-independent", "beta": "big"}, r"beta must be (a finite number )?>= 0\.0"),
    (
        {"name": "linucb-independent", "radius": "constant", "beta_scale": -1.0},
        r"beta_scale must be (a finite number )?>= 0\.0",
    ),
    ({"name": "fedlinucb", "batch": 0}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "batch": -3}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "batch": 2.5}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "batch": 5.0}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "batch": "5"}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "batch": True}, r"batch must be an integer >= 1"),
    ({"name": "fedlinucb", "protocol": "laplace"}, rf"protocol must be one of {PROTOCOL_NAMES}, got 'laplace'"),
    ({"name": "fedlinucb", "protocol": ""}, rf"protocol must be one of {PROTOCOL_NAMES}, got ''"),
]


@pytest.mark.parametrize(
    ("table", "message"),
    ALGORITHM_CASES,
    ids=["-".join(f"{k}={v!r}" for k, v in table.items()) for table, _ in ALGORITHM_CASES],
)
def test_algorithm_values(table, message):
    # the bad table is the *second* one: the error must point at algorithms[2], 1-based
    assert_rejected(valid_config(second=table), where(f"algorithms[2] ({table['name']})", message))


# --------------------------------------------------------------------------------------------
# structure: tables, keys, names, labels
# --------------------------------------------------------------------------------------------
def _with(mutate):
    data = valid_config()
    mutate(data)
    return data


STRUCTURE_CASES = {
    "unknown top-level table": (
        _with(lambda d: d.update(experiments={"seed": 1})),
        r"^unknown top-level key\(s\) \['experiments'\]; valid: 'experiment', 'environment', 'algorithms'",
    ),
    "unknown experiment key": (
        _with(lambda d: d["experiment"].update(horizn=5)),
        r"^experiment: unknown key\(s\) \['horizn'\]; valid keys: \[.*'horizon'.*\]",
    ),
    "unknown environment key": (
        _with(lambda d: d["environment"].update(agent=5)),
        r"^environment \(gaussian-sphere\): unknown key\(s\) \['agent'\]; valid keys: \[.*'agents'.*\]",
    ),
    "environment takes no label": (
        _with(lambda d: d["environment"].update(label="mine")),
        r"^environment \(gaussian-sphere\): unknown key\(s\) \['label'\]",
    ),
    "unknown algorithm key": (
        _with(lambda d: d["algorithms"][0].update(batch=5)),
        r"^algorithms\[1\] \(linucb-independent\): unknown key\(s\) \['batch'\]; valid keys: \[.*'reg'.*\]",
    ),
    "unknown environment name": (
        _with(lambda d: d["environment"].update(name="gauss")),
        rf"^environment\.name must be one of {ENVIRONMENT_NAMES}, got 'gauss'",
    ),
    "missing environment name": (
        _with(lambda d: d["environment"].pop("name")),
        rf"^environment\.name must be one of {ENVIRONMENT_NAMES}, got None",
    ),
    "unknown algorithm name": (
        _with(lambda d: d["algorithms"][1].update(name="ucb")),
        rf"^algorithms\[2\]\.name must be one of {ALGORITHM_NAMES}, got 'ucb'",
    ),
    "missing algorithm name": (
        _with(lambda d: d["algorithms"][0].pop("name")),
        rf"^algorithms\[1\]\.name must be one of {ALGORITHM_NAMES}, got None",
    ),
    "missing [environment]": (
        _with(lambda d: d.pop("environment")),
        r"^environment: the \[environment\] table is required",
    ),
    "environment is not a table": (
        _with(lambda d: d.update(environment="gaussian-sphere")),
        r"^environment: expected a table, got str",
    ),
    "experiment is not a table": (
        _with(lambda d: d.update(experiment=5)),
        r"^experiment: expected a table, got int",
    ),
    "empty algorithms": (
        _with(lambda d: d.update(algorithms=[])),
        r"^algorithms: at least one \[\[algorithms\]\] table is required",
    ),
    "missing algorithms": (
        _with(lambda d: d.pop("algorithms")),
        r"^algorithms: at least one \[\[algorithms\]\] table is required",
    ),
    "algorithms is one table, not an array": (
        _with(lambda d: d.update(algorithms={"name": "fedlinucb"})),
        r"^algorithms: at least one \[\[algorithms\]\] table is required",
    ),
    "algorithm entry is not a table": (
        _with(lambda d: d["algorithms"].append("fedlinucb")),
        r"^algorithms\[3\]: expected a table, got str",
    ),
    "duplicate default labels": (
        _with(lambda d: d["algorithms"].append({"name": "fedlinucb", "batch": 10})),
        r"^algorithms: labels must be unique, repeated: \['fedlinucb'\]",
    ),
    "duplicate private default labels": (
        _with(
            lambda d: (
                d["environment"].update(agents=12),
                d["algorithms"].extend({"name": "fedlinucb", "protocol": "ldp", "batch": b} for b in (5, 10)),
            )
        ),
        r"^algorithms: labels must be unique, repeated: \['fedlinucb ldp eps=1'\] \(set `label` to tell them apart\)$",
    ),
    "label equal to another's private default": (
        _with(
            lambda d: (
                d["environment"].update(agents=12),
                d["algorithms"][1].update(protocol="ldp", epsilon=2.0),
                d["algorithms"][0].update(label="fedlinucb ldp eps=2"),
            )
        ),
        r"^algorithms: labels must be unique, repeated: \['fedlinucb ldp eps=2'\]",
    ),
    "duplicate explicit labels": (
        _with(lambda d: [a.update(label="same") for a in d["algorithms"]]),
        r"^algorithms: labels must be unique, repeated: \['same'\]",
    ),
    "label equal to another's default": (
        _with(lambda d: (d["algorithms"][0].pop("label"), d["algorithms"][1].update(label="linucb-independent"))),
        r"^algorithms: labels must be unique, repeated: \['linucb-independent'\]",
    ),
    "empty label": (
        _with(lambda d: d["algorithms"][1].update(label="")),
        r"^algorithms\[2\]\.label must be a non-empty string, got ''",
    ),
    "non-string label": (
        _with(lambda d: d["algorithms"][1].update(label=3)),
        r"^algorithms\[2\]\.label must be a non-empty string, got 3",
    ),
}


@pytest.mark.parametrize(("data", "pattern"), STRUCTURE_CASES.values(), ids=STRUCTURE_CASES.keys())
def test_structure(data, pattern):
    assert_rejected(data, pattern)


def test_name_errors_list_every_registered_name():
    with pytest.raises(ConfigError) as info:
        config_from_dict(_with(lambda d: d["algorithms"][1].update(name="nope")))
    assert all(repr(name) in str(info.value) for name in ALGORITHMS)
    with pytest.raises(ConfigError) as info:
        config_from_dict(_with(lambda d: d["environment"].update(name="nope")))
    assert all(repr(name) in str(info.value) for name in ENVIRONMENTS)


# an entry without a label: its name, and for a private one its protocol and epsilon
CLUSTERED = {"name": "clustered-synthetic", "users": 20, "clusters": 4, "agents": 5, "dim": 10, "arms": 10}
DEFAULT_LABELS = {
    "non-private fedlinucb": ({"name": "fedlinucb"}, "fedlinucb"),
    "protocol none, epsilon set": ({"name": "fedlinucb", "protocol": "none", "epsilon": 3.0}, "fedlinucb"),
    "ldp at the default epsilon": ({"name": "fedlinucb", "protocol": "ldp"}, "fedlinucb ldp eps=1"),
    "ldp, tree named nowhere": ({"name": "fedlinucb", "protocol": "ldp", "mechanism": "tree"}, "fedlinucb ldp eps=1"),
    "ldp-prefix": ({"name": "fedlinucb", "protocol": "ldp-prefix", "epsilon": 0.5}, "fedlinucb ldp-prefix eps=0.5"),
    "sdp-amplification": (
        {"name": "fedlinucb", "protocol": "sdp-amplification", "epsilon": 2.0},
        "fedlinucb sdp-amplification eps=2",
    ),
    "sdp-vector-sum": (
        {"name": "fedlinucb", "protocol": "sdp-vector-sum", "epsilon": 5.0, "delta": 0.1},
        "fedlinucb sdp-vector-sum eps=5",
    ),
    "distributed-dp factorized": (
        {"name": "fedlinucb", "protocol": "distributed-dp", "epsilon": 1.0, "mechanism": "factorized"},
        "fedlinucb distributed-dp eps=1 factorized",
    ),
    "small epsilon": ({"name": "fedlinucb", "protocol": "ldp", "epsilon": 1e-5}, "fedlinucb ldp eps=1e-05"),
    "feducb, private by default": ({"name": "feducb"}, "feducb eps=1"),
    "feducb non-private": ({"name": "feducb", "private": False}, "feducb"),
    "feducb-decentralized": ({"name": "feducb-decentralized", "epsilon": 0.25}, "feducb-decentralized eps=0.25"),
    "independent agents": ({"name": "linucb-independent"}, "linucb-independent"),
}


@pytest.mark.parametrize(("entry", "label"), DEFAULT_LABELS.values(), ids=DEFAULT_LABELS.keys())
def test_default_label_names_protocol_and_epsilon(entry, label):
    entry = {"batch": 5, **entry} if entry["name"] == "fedlinucb" else entry  # B <= T = 10
    config = config_from_dict(valid_config({**SPHERE, "agents": 12}, second=entry))
    assert [a.label for a in config.algorithms] == ["baseline", label]
    # the saved config states the label, so it reads back to the same entry
    assert config.to_dict()["algorithms"][1]["label"] == label
    assert config_from_dict(config.to_dict()) == config
    # a stated label wins
    named = config_from_dict(valid_config({**SPHERE, "agents": 12}, second={**entry, "label": "mine"}))
    assert named.algorithms[1].label == "mine"


def test_default_label_of_clustering_algorithms():
    algorithms = [{"name": "cdp-fclub-dc", "epsilon": 300.0}, {"name": "fclub-dc"}, {"name": "club"}]
    config = config_from_dict({"environment": CLUSTERED, "algorithms": algorithms})
    assert [a.label for a in config.algorithms] == ["cdp-fclub-dc eps=300", "fclub-dc", "club"]


def test_default_labels_are_what_a_run_reports(tmp_path):
    """The results, their saved summary and the printed table carry the default label."""
    data = valid_config({**SPHERE, "agents": 12}, second={"name": "fedlinucb", "protocol": "ldp", "batch": 5})
    data["algorithms"].append({"name": "fedlinucb", "protocol": "ldp", "epsilon": 8.0, "batch": 5})
    data["algorithms"].append({"name": "fedlinucb", "batch": 5})
    results = run_experiment(config_from_dict(data))
    labels = ["baseline", "fedlinucb ldp eps=1", "fedlinucb ldp eps=8", "fedlinucb"]
    assert list(results.algorithms) == labels
    assert [s["label"] for s in results.summary()["algorithms"]] == labels
    table = results.table()
    assert all(f"\n{lab} " in table for lab in labels[1:])


def test_config_must_be_a_table():
    with pytest.raises(ConfigError, match=r"a config must be a table"):
        config_from_dict([valid_config()])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# TOML text
# --------------------------------------------------------------------------------------------
VALID_TOML = """
[experiment]
horizon = 30

[environment]
name = "gaussian-sphere"
agents = 2
arms = 3
dim = 3

[[algorithms]]
name = "linucb-independent"

[[algorithms]]
name = "fedlinucb"
"""

MALFORMED_TOML = {
    "unclosed table header": "[experiment\nhorizon = 10\n",
    "missing value": "[experiment]\nhorizon =\n",
    "unterminated string": '[environment]\nname = "gaussian-sphere\n',
    "duplicate key": "[experiment]\nhorizon = 1\nhorizon = 2\n",
    "duplicate table": "[experiment]\n[experiment]\n",
    "bare word": VALID_TOML + "\nthis is not toml\n",
}


def test_valid_toml_loads():
    expected = valid_config(second={"name": "fedlinucb"}) | {"experiment": {"horizon": 30}}
    expected["algorithms"][0].pop("label")
    assert loads_config(VALID_TOML) == config_from_dict(expected)


@pytest.mark.parametrize("text", MALFORMED_TOML.values(), ids=MALFORMED_TOML.keys())
def test_malformed_toml(text):
    with pytest.raises(ConfigError, match=r"^malformed TOML in <string>: .*\(at line \d+, column \d+\)"):
        loads_config(text)


def test_malformed_toml_names_its_source():
    with pytest.raises(ConfigError, match=r"^malformed TOML in my-experiment\.toml: "):
        loads_config("[experiment", source="my-experiment.toml")


FED = "algorithms[2] (fedlinucb)"


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("batch = 0", where(FED, r"batch must be an integer >= 1, got 0")),
        ("batch = 2.5", where(FED, r"batch must be an integer >= 1, got 2\.5")),
        ("batch = true", where(FED, r"batch must be an integer >= 1, got True")),
        ("reg = -1.0", where(FED, r"reg must be > 0\.0, got -1\.0")),
        ("reg = nan", where(FED, r"reg must be a finite number > 0\.0, got nan")),
        ("alpha = 1.01", where(FED, r"alpha must be in \(0\.0, 1\.0\], got 1\.01")),
        ("radius = 'ucb'", where(FED, r"radius must be one of 'theory', 'constant'")),
        ("protocol = 'mix'", where(FED, rf"protocol must be one of {PROTOCOL_NAMES}, got 'mix'")),
    ],
)
def test_bad_values_through_toml(line, pattern):
    # the same messages, with the value as received, when the config comes from TOML text
    with pytest.raises(ConfigError, match=pattern):
        loads_config(VALID_TOML + line + "\n")


# --------------------------------------------------------------------------------------------
# Config.with_experiment and run_experiment(workers=...)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"runs": 0}, r"^experiment: runs must be an integer >= 1, got 0"),
        ({"runs": -1}, r"^experiment: runs must be an integer >= 1, got -1"),
        ({"runs": 2.0}, r"^experiment: runs must be an integer >= 1, got 2\.0"),
        ({"horizon": 0}, r"^experiment: horizon must be an integer >= 1, got 0"),
        ({"seed": -1}, r"^experiment: seed must be an integer >= 0, got -1"),
        ({"seed": True}, r"^experiment: seed must be an integer >= 0, got True"),
        ({"horizn": 5}, r"^experiment: .*horizn"),
    ],
)
def test_with_experiment_rejects(changes, pattern):
    config = config_from_dict(valid_config())
    snapshot = copy.deepcopy(config)
    with pytest.raises(ConfigError, match=pattern):
        config.with_experiment(**changes)
    assert config == snapshot
    assert config.with_experiment(runs=3).experiment.runs == 3  # valid changes still work


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2", None])
def test_run_experiment_rejects_bad_worker_count(workers):
    config = config_from_dict(valid_config())
    with pytest.raises(ValueError, match=rf"^workers must be an integer >= 1, got {re.escape(repr(workers))}$"):
        run_experiment(config, workers=workers)


# --------------------------------------------------------------------------------------------
# RidgeState: rejected input leaves gram, inv and bias bit-for-bit unchanged
# --------------------------------------------------------------------------------------------
BATCH, DIM = (2, 3), 4


@pytest.fixture
def ridge(rng) -> RidgeState:
    """A ridge state with some data in it (so 'unchanged' is not just 'still the identity')."""
    state = RidgeState(BATCH, DIM, 0.5)
    for _ in range(5):
        state.update(rng.standard_normal((*BATCH, DIM)), rng.standard_normal(BATCH))
    a = rng.standard_normal((*BATCH, DIM, DIM))
    state.set(a @ np.swapaxes(a, -1, -2) + np.eye(DIM), rng.standard_normal((*BATCH, DIM)))
    state.update(rng.standard_normal((*BATCH, DIM)), rng.standard_normal(BATCH))
    return state


def ridge_arrays(state: RidgeState) -> dict[str, np.ndarray]:
    return {"gram": state.gram.copy(), "inv": state.inv.copy(), "bias": state.bias.copy()}


def assert_ridge_unchanged(state: RidgeState, before: dict[str, np.ndarray]) -> None:
    for name, array in before.items():
        now = getattr(state, name)
        assert now.shape == array.shape and now.dtype == array.dtype, name
        assert np.array_equal(now, array), f"RidgeState.{name} changed by a rejected call"


def _put(array: np.ndarray, index: tuple, value: float) -> np.ndarray:
    array = array.copy()
    array[index] = value
    return array


X_SHAPE = re.escape(f"x must have shape {(*BATCH, DIM)}")
Y_SHAPE = re.escape(f"y must have shape {BATCH}")
UPDATE_CASES = {
    "x last axis too long": (lambda x, y: (np.concatenate([x, x[..., :1]], -1), y), X_SHAPE + r", got \(2, 3, 5\)"),
    "x last axis too short": (lambda x, y: (x[..., :-1], y), X_SHAPE),
    "x batch axes swapped": (lambda x, y: (np.swapaxes(x, 0, 1), y), X_SHAPE),
    "x missing feature axis": (lambda x, y: (x[..., 0], y), X_SHAPE),
    "x scalar": (lambda x, y: (1.0, y), X_SHAPE + r", got \(\)"),
    "y batch axes swapped": (lambda x, y: (x, y.T), Y_SHAPE),
    "y extra axis": (lambda x, y: (x, y[..., None]), Y_SHAPE),
    "y per learner and feature": (lambda x, y: (x, x), Y_SHAPE),
    "x NaN": (lambda x, y: (_put(x, (1, 2, 3), np.nan), y), r"x must be finite, got 1 NaN or infinite"),
    "x +inf": (lambda x, y: (_put(x, (0, 0, 0), np.inf), y), r"x must be finite"),
    "x -inf": (lambda x, y: (_put(x, (1, 1, 2), -np.inf), y), r"x must be finite"),
    "x all NaN": (lambda x, y: (np.full_like(x, np.nan), y), r"x must be finite, got 24 NaN or infinite"),
    "y NaN": (lambda x, y: (x, _put(y, (0, 1), np.nan)), r"y must be finite, got 1 NaN or infinite"),
    "y +inf": (lambda x, y: (x, _put(y, (1, 2), np.inf)), r"y must be finite"),
    "y -inf": (lambda x, y: (x, _put(y, (0, 0), -np.inf)), r"y must be finite"),
    "x and y NaN": (lambda x, y: (_put(x, (0, 0, 0), np.nan), _put(y, (0, 0), np.nan)), r"(x|y) must be finite"),
    "x not numeric": (lambda x, y: (np.full(x.shape, "a"), y), r"x must be a numeric array of shape"),
    "y not numeric": (lambda x, y: (x, np.full(y.shape, "b")), r"y must be a numeric array of shape"),
}


@pytest.mark.parametrize(("corrupt", "pattern"), UPDATE_CASES.values(), ids=UPDATE_CASES.keys())
def test_ridge_update_rejects_and_changes_nothing(ridge, rng, corrupt, pattern):
    x, y = rng.standard_normal((*BATCH, DIM)), rng.standard_normal(BATCH)
    before = ridge_arrays(ridge)
    with pytest.raises(ValueError) as info:
        ridge.update(*corrupt(x, y))
    assert_ridge_unchanged(ridge, before)
    info.match(pattern)
    ridge.update(x, y)  # the uncorrupted observation is accepted and does change the state
    assert not np.array_equal(ridge.gram, before["gram"])


def _spd(rng, shape=BATCH):
    a = rng.standard_normal((*shape, DIM, DIM))
    return a @ np.swapaxes(a, -1, -2) + np.eye(DIM)


def _one_bad_learner(rng):
    gram = _spd(rng)
    gram[1, 2] = -np.eye(DIM)
    return gram


def _rank_one(rng):
    v = rng.standard_normal(DIM)
    return np.outer(v, v)


def _not_symmetric(rng):
    gram = _spd(rng, ())
    gram[0, DIM - 1] += 0.5  # the upper triangle disagrees with the lower one
    return gram


NOT_PD = r"not positive definite"
SET_CASES = {
    "negative identity": (lambda rng: (-np.eye(DIM), np.zeros(DIM)), NOT_PD),
    "zero matrix": (lambda rng: (np.zeros((DIM, DIM)), np.zeros(DIM)), NOT_PD),
    "singular (rank one)": (lambda rng: (_rank_one(rng), np.zeros(DIM)), NOT_PD),
    "indefinite": (lambda rng: (np.diag([1.0, 1.0, -1e-3, 1.0]), np.zeros(DIM)), NOT_PD),
    "one learner of six indefinite": (lambda rng: (_one_bad_learner(rng), np.zeros((*BATCH, DIM))), NOT_PD),
    "NaN in gram": (lambda rng: (_put(_spd(rng), (0, 0, 1, 1), np.nan), np.zeros(DIM)), r"must be finite"),
    "inf in bias": (lambda rng: (_spd(rng), _put(np.zeros(DIM), (2,), np.inf)), r"must be finite"),
    "gram of the wrong dimension": (lambda rng: (np.eye(DIM + 1), np.zeros(DIM)), r"must broadcast to"),
    # documented: "Raises ValueError (state untouched) if any V is not symmetric positive definite"
    "not symmetric": (lambda rng: (_not_symmetric(rng), np.zeros(DIM)), r"symmetric"),
    # shapes that broadcast *with* the state but not *to* it (an extra leading axis)
    "bias with an extra leading axis": (lambda rng: (_spd(rng), np.zeros((3, *BATCH, DIM))), r"must broadcast to"),
    "gram with an extra leading axis": (lambda rng: (_spd(rng, (3, *BATCH)), np.zeros(DIM)), r"must broadcast to"),
}


@pytest.mark.parametrize(("make", "pattern"), SET_CASES.values(), ids=SET_CASES.keys())
def test_ridge_set_rejects_and_changes_nothing(ridge, rng, make, pattern):
    before = ridge_arrays(ridge)
    gram, bias = make(rng)
    with pytest.raises(ValueError) as info:
        ridge.set(gram, bias)
    assert_ridge_unchanged(ridge, before)
    info.match(pattern)


@pytest.mark.parametrize(
    ("batch_shape", "dim", "reg", "pattern"),
    [
        (BATCH, DIM, 0.0, r"^reg must be > 0\.0, got 0\.0"),
        (BATCH, DIM, -1.0, r"^reg must be > 0\.0, got -1\.0"),
        (BATCH, DIM, math.inf, r"^reg must be a finite number > 0\.0, got inf"),
        (BATCH, DIM, math.nan, r"^reg must be a finite number > 0\.0, got nan"),
        (BATCH, 0, 1.0, r"^dim must be an integer >= 1, got 0"),
        (BATCH, 2.0, 1.0, r"^dim must be an integer >= 1, got 2\.0"),
        ((2, 0), DIM, 1.0, r"^batch_shape entry must be an integer >= 1, got 0"),
        ((2, 1.5), DIM, 1.0, r"^batch_shape entry must be an integer >= 1, got 1\.5"),
    ],
)
def test_ridge_constructor_rejects(batch_shape, dim, reg, pattern):
    with pytest.raises(ValueError, match=pattern):
        RidgeState(batch_shape, dim, reg)


# --------------------------------------------------------------------------------------------
# Policies: rejected features / observations leave every statistic and the clock unchanged
# --------------------------------------------------------------------------------------------
R, M, K, D = 2, 3, 4, 3
POLICIES = {
    "linucb-independent": LinUCBParams(),
    "linucb-super": LinUCBParams(),
    "fedlinucb": FedLinUCBParams(batch=2),
}


def _features(rng) -> np.ndarray:
    return rng.standard_normal((R, M, K, D)).astype(np.float32)


@pytest.fixture(params=list(POLICIES))
def policy(request, rng):
    """A policy built through the registry, after three rounds (FedLinUCB has synced once at t=2)."""
    ctx = PolicyContext(
        n_runs=R, n_agents=M, n_arms=K, dim=D, horizon=20, noise_rngs=[np.random.default_rng(i) for i in range(R)]
    )
    policy = ALGORITHMS[request.param].factory(POLICIES[request.param], ctx)
    for _ in range(3):
        features = _features(rng)
        actions = policy.select(features)
        x = np.take_along_axis(features, actions[..., None, None], axis=-2)[..., 0, :].astype(np.float64)
        policy.observe(x, rng.standard_normal((R, M)))
        policy.end_round()
    return policy


def policy_state(policy) -> dict[str, object]:
    """Copies of everything a policy learns or counts (not the scorer's scratch buffers)."""
    out: dict[str, object] = {}
    for name, value in vars(policy).items():
        if isinstance(value, RidgeState):
            out.update({f"{name}.{k}": v for k, v in ridge_arrays(value).items()})
        elif isinstance(value, Protocol):
            out.update({f"{name}.{k}": copy.deepcopy(v) for k, v in vars(value).items()})
        elif isinstance(value, (np.ndarray, int, float)):
            out[name] = copy.deepcopy(value)
    return out


def assert_policy_unchanged(policy, before: dict[str, object]) -> None:
    after = policy_state(policy)
    assert after.keys() == before.keys()
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(after[key], value), f"{key} changed by a rejected call"
        else:
            assert after[key] == value, f"{key} changed by a rejected call"


def test_policy_state_covers_what_the_policy_learns(policy):
    # guards the tests below against comparing nothing
    state = policy_state(policy)
    assert {"t", "state.gram", "state.inv", "state.bias", "sync_rounds"} <= state.keys()
    assert state["t"] == 3
    if policy.name == "fedlinucb":
        assert {"local_cov", "local_bias", "synced_cov", "synced_bias"} <= state.keys()
        assert state["local_cov"].any() and state["synced_cov"].any()  # mid-batch, after one sync
    if policy.name == "linucb-super":
        assert state["samples"] == 3 * M


FEATURE_SHAPE = re.escape(f"features must have shape {(R, M, K, D)}")
SELECT_CASES = {
    "one feature too many": (lambda f: np.concatenate([f, f[..., :1]], -1), FEATURE_SHAPE + r", got \(2, 3, 4, 4\)"),
    "one arm too many": (lambda f: np.concatenate([f, f[:, :, :1]], 2), FEATURE_SHAPE + r", got \(2, 3, 5, 3\)"),
    "runs and agents swapped": (lambda f: np.swapaxes(f, 0, 1), FEATURE_SHAPE),
    "one agent's features only": (lambda f: f[:, 0], FEATURE_SHAPE),
    "missing run axis": (lambda f: f[0], FEATURE_SHAPE),
    "NaN": (lambda f: _put(f, (1, 2, 3, 0), np.nan), r"features must be finite, got 1 NaN or infinite"),
    "inf": (lambda f: _put(f, (0, 0, 0, 0), np.inf), r"features must be finite"),
    "-inf": (lambda f: _put(f, (1, 1, 1, 2), -np.inf), r"features must be finite"),
    "all NaN": (lambda f: np.full_like(f, np.nan), r"features must be finite, got 72 NaN or infinite"),
    "not numeric": (lambda f: np.full(f.shape, "x"), r"features must be a numeric array of shape"),
}


@pytest.mark.parametrize(("corrupt", "pattern"), SELECT_CASES.values(), ids=SELECT_CASES.keys())
def test_policy_select_rejects_and_changes_nothing(policy, rng, corrupt, pattern):
    features = _features(rng)
    before = policy_state(policy)
    with pytest.raises(ValueError) as info:
        policy.select(corrupt(features))
    assert_policy_unchanged(policy, before)
    info.match(pattern)
    assert policy.select(features).shape == (R, M)  # still usable


OBS_X_SHAPE = re.escape(f"x must have shape {(R, M, D)}")
OBS_Y_SHAPE = re.escape(f"y must have shape {(R, M)}")
OBSERVE_CASES = {
    "y NaN": (lambda x, y: (x, _put(y, (1, 2), np.nan)), r"y must be finite, got 1 NaN or infinite"),
    "y all NaN": (lambda x, y: (x, np.full_like(y, np.nan)), r"y must be finite, got 6 NaN or infinite"),
    "y +inf": (lambda x, y: (x, _put(y, (0, 0), np.inf)), r"y must be finite"),
    "y -inf": (lambda x, y: (x, _put(y, (0, 1), -np.inf)), r"y must be finite"),
    "x NaN": (lambda x, y: (_put(x, (0, 1, 2), np.nan), y), r"x must be finite"),
    "x inf": (lambda x, y: (_put(x, (1, 0, 0), np.inf), y), r"x must be finite"),
    "y one per run": (lambda x, y: (x, y[:, 0]), OBS_Y_SHAPE + r", got \(2,\)"),
    "y transposed": (lambda x, y: (x, y.T), OBS_Y_SHAPE),
    "x one feature short": (lambda x, y: (x[..., :-1], y), OBS_X_SHAPE + r", got \(2, 3, 2\)"),
    "x all arms": (lambda x, y: (np.repeat(x[:, :, None], K, axis=2), y), OBS_X_SHAPE),
    "y not numeric": (lambda x, y: (x, np.full(y.shape, "r")), r"y must be a numeric array of shape"),
}


@pytest.mark.parametrize(("corrupt", "pattern"), OBSERVE_CASES.values(), ids=OBSERVE_CASES.keys())
def test_policy_observe_rejects_and_changes_nothing(policy, rng, corrupt, pattern):
    x, y = rng.standard_normal((R, M, D)), rng.standard_normal((R, M))
    before = policy_state(policy)
    with pytest.raises(ValueError) as info:
        policy.observe(*corrupt(x, y))
    assert_policy_unchanged(policy, before)
    info.match(pattern)
    policy.observe(x, y)  # the valid observation is accepted and is learned from
    assert not np.array_equal(policy.state.gram, before["state.gram"])


def test_policy_params_reject_directly():
    # the parameter dataclasses validate on construction, not only through a config
    with pytest.raises(ValueError, match=r"^reg must be > 0\.0, got 0\.0"):
        LinUCBParams(reg=0.0)
    with pytest.raises(ValueError, match=r"^batch must be an integer >= 1, got 0"):
        FedLinUCBParams(batch=0)
    assert {"batch", "protocol"} <= {f.name for f in fields(FedLinUCBParams)}
