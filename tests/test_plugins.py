"""Plugins (#19): third-party entry points, the example plugin of examples/plugin, broken plugins.

A plugin is registered into the running interpreter without the network: a temporary folder holds
a ``*.dist-info`` (METADATA and entry_points.txt) and is put on ``sys.path`` (and PYTHONPATH, for
worker processes) next to the example's sources; :func:`fedbandits.plugins.reload` forgets the tables
before and after each test.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedbandits import plugins
from fedbandits.audit.releases import AuditCase, default_cases, plugin_cases, run_case
from fedbandits.cli import main
from fedbandits.config import ConfigError, config_from_dict
from fedbandits.experiments.frontier import frontier_plan
from fedbandits.registry import ALGORITHMS, PROTOCOLS
from fedbandits.sim.runner import run_experiment

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"
EXAMPLE_SRC = EXAMPLE / "src"


def _entry_points_txt(pyproject: Path) -> str:
    """The ``entry_points.txt`` pip writes for the entry points a ``pyproject.toml`` declares."""
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["entry-points"]
    return "\n".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in names.items())
        for group, names in declared.items()
    )


#: what installing examples/plugin declares (read from its pyproject.toml, so the two cannot drift)
EXAMPLE_ENTRY_POINTS = _entry_points_txt(EXAMPLE / "pyproject.toml")


def _distribution(folder: Path, name: str, entry_points: str) -> None:
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


def _on_path(monkeypatch: pytest.MonkeyPatch, *folders: Path) -> None:
    for folder in folders:
        monkeypatch.syspath_prepend(str(folder))
    previous = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*map(str, folders), *([previous] if previous else [])]))
    plugins.reload()


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The example plugin, registered as an installed distribution would be."""
    _distribution(tmp_path, "fedbandits-example-plugin", EXAMPLE_ENTRY_POINTS)
    _on_path(monkeypatch, tmp_path, EXAMPLE_SRC)
    yield
    monkeypatch.undo()
    plugins.reload()


def _config(*algorithms: dict[str, object], runs: int = 2, horizon: int = 60) -> dict[str, object]:
    return {
        "experiment": {"name": "plugin", "seed": 3, "runs": runs, "horizon": horizon, "runs_per_task": 1},
        "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3},
        "algorithms": list(algorithms),
    }


PRIVATE = {"epsilon": 1.0, "delta": 1e-4, "batch": 10}
MIXED = (
    {"name": "fedlinucb", "label": "ldp", "protocol": "ldp", **PRIVATE},
    {"name": "fedlinucb", "label": "rounded", "protocol": "ldp-rounded", **PRIVATE},
    {"name": "fed-thompson", "label": "thompson rounded", "protocol": "ldp-rounded", **PRIVATE},
    {"name": "fed-thompson", "label": "thompson", "batch": 10},
)


def test_the_builtins_come_from_fedbandits_own_entry_points() -> None:
    plugins.reload()
    assert "fedlinucb" in ALGORITHMS and "ldp" in PROTOCOLS
    assert {PROTOCOLS.origin(name) for name in PROTOCOLS} == {plugins.BUILTIN}
    assert next(iter(PROTOCOLS)) == "none"  # the declaration order, not the backend's sorted file
    assert not ALGORITHMS.broken and not PROTOCOLS.broken


def test_the_example_plugin_is_listed(registered: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fed-thompson" in out and "ldp-rounded" in out
    assert "[plugin: fedbandits-example-plugin 0.1]" in out
    assert "      scale" in out  # the plugin's own parameter, with its help
    assert "fedlinucb" in out and "broken plugins" not in out


def test_the_example_plugin_runs_next_to_the_builtins(registered: None) -> None:
    config = config_from_dict(_config(*MIXED))
    results = run_experiment(config, workers=1)
    summary = {s["label"]: s for s in results.summary()["algorithms"]}
    assert set(summary) == {"ldp", "rounded", "thompson rounded", "thompson"}
    rounded = summary["rounded"]
    assert rounded["protocol"] == "ldp-rounded" and rounded["guarantee"] == "formal"
    # the calibration is ldp's, reused: same noise, same epsilon spent
    assert rounded["noise_std"] == summary["ldp"]["noise_std"]
    assert rounded["epsilon_spent"] == summary["ldp"]["epsilon_spent"]
    assert all(np.isfinite(results.algorithms[label].final_regret).all() for label in summary)


def test_worker_processes_load_the_plugin_too(registered: None) -> None:
    config = config_from_dict(_config(MIXED[1], MIXED[2], runs=2, horizon=30))
    alone = run_experiment(config, workers=1).summary()["algorithms"]
    pooled = run_experiment(config, workers=2).summary()["algorithms"]
    for a, b in zip(alone, pooled, strict=True):
        assert a["final_regret_mean"] == b["final_regret_mean"]


def test_a_frontier_sweeps_the_plugin_like_a_builtin(registered: None) -> None:
    plan = frontier_plan(config_from_dict(_config(MIXED[2], MIXED[3])), epsilons=(0.5, 2.0))
    swept = {(base, eps) for base, eps in plan.variants.values()}
    assert swept == {("thompson rounded", 0.5), ("thompson rounded", 2.0)}  # the non-private entry is not
    assert {a.name for a in plan.config.algorithms} == {"fed-thompson", "fedlinucb", "linucb-independent"}


def test_the_rounded_messages_lie_on_the_grid(registered: None) -> None:
    from fedbandits_example.rounded import GRID

    config = config_from_dict(_config(MIXED[1], runs=1, horizon=30))
    results = run_experiment(config, workers=1, record_transcript=True)
    ((run, arrays),) = results.algorithms["rounded"].transcripts
    messages = np.asarray(arrays["messages"])  # (K, M, P)
    assert run == 0 and messages.shape[:2] == (3, 3)
    steps = messages / (GRID * np.asarray(arrays["sigma"]))
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-6)


def test_the_example_config_runs_and_shows_whether_federating_paid_off(registered: None) -> None:
    """examples/plugin/example.toml (shrunk to one short run) runs the plugin's lines next to the
    built-ins and independent agents, the line without communication they are compared with."""
    data = tomllib.loads((EXAMPLE / "example.toml").read_text(encoding="utf-8"))
    data["experiment"].update(runs=1, horizon=50)
    summary = run_experiment(config_from_dict(data), workers=1).summary()["algorithms"]
    names = {s["algorithm"] for s in summary}
    assert {"fed-thompson", "fedlinucb", "linucb-independent"} <= names
    for line in summary:
        federated = line["algorithm"] != "linucb-independent"
        assert (line["messages"] > 0) == federated, line["label"]
        assert np.isfinite(line["final_regret_mean"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scale": -1.0}, r"^algorithms\[1\] \(fed-thompson\): scale must be >= 0\.0, got -1\.0$"),
        ({"protocol": "ldp-rounded", "mechanism": "factorized"}, r"mechanism 'factorized' needs protocol 'ldp'"),
        ({"protocol": "nope"}, r"protocol must be one of 'none', .*'ldp-rounded', got 'nope'"),
        ({"colour": 1}, r"algorithms\[1\] \(fed-thompson\): unknown key\(s\) \['colour'\]"),
    ],
)
def test_plugin_parameters_give_one_line_errors(registered: None, change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        config_from_dict(_config({"name": "fed-thompson", **change}))
    assert "\n" not in str(info.value)


def test_the_plugin_protocol_gets_an_audit_row(registered: None) -> None:
    (case,) = plugin_cases()
    assert case in default_cases()
    assert case.view == "messages" and case.algorithm["protocol"] == "ldp-rounded" and case.algorithm["lazy"]
    assert "plugin fedbandits-example-plugin 0.1" in case.label
    row = run_case(AuditCase(case.label, case.algorithm, case.view, case.dataset, case.agents, batches=2), 60)
    assert row.protocol == "ldp-rounded" and row.guarantee == "formal"
    assert math.isclose(row.epsilon_spent, 1.0, rel_tol=0.05)
    assert row.verdict == "consistent"


def test_without_the_plugin_its_names_are_unknown() -> None:
    plugins.reload()
    assert "fed-thompson" not in ALGORITHMS and not plugin_cases()
    with pytest.raises(ConfigError, match=r"algorithms\[1\]\.name must be one of .*got 'fed-thompson'"):
        config_from_dict(_config({"name": "fed-thompson"}))


BROKEN_PARAMS = '''
from fedbandits.plugins import Entry


class Loose:
    """Parameters that are no dataclass."""


LOOSE = Entry("loose-params", "its params are no dataclass", Loose, lambda params, ctx: None)
'''
BROKEN_ENTRY_POINTS = """\
[fedbandits.algorithms]
missing-module = fedbandits_no_such_module:ENTRY
wrong-type = json:loads
loose-params = fedbandits_broken_params:LOOSE
fedlinucb = fedbandits.algorithms.fedlinucb:ENTRY
misnamed = fedbandits.algorithms.feducb:ENTRY

[fedbandits.protocols]
ldp = fedbandits.protocols.catalog:LDP
"""


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    (tmp_path / "fedbandits_broken_params.py").write_text(BROKEN_PARAMS, encoding="utf-8")
    _distribution(tmp_path, "broken-example", BROKEN_ENTRY_POINTS)
    _on_path(monkeypatch, tmp_path)
    yield
    monkeypatch.undo()
    sys.modules.pop("fedbandits_broken_params", None)
    plugins.reload()


def test_broken_plugins_are_reported_and_the_builtins_still_work(
    broken: None, capsys: pytest.CaptureFixture[str]
) -> None:
    reasons = {p.name: p.message() for p in ALGORITHMS.broken}
    assert set(reasons) == {"missing-module", "wrong-type", "loose-params", "fedlinucb", "misnamed"}
    for name, reason in reasons.items():
        assert "\n" not in reason and f"plugin algorithm {name!r}" in reason and "broken-example 0.1" in reason
    assert "ModuleNotFoundError: No module named 'fedbandits_no_such_module'" in reasons["missing-module"]
    assert "params must be a frozen dataclass" in reasons["loose-params"]
    assert "clashes with the built-in algorithm 'fedlinucb' (the built-in is kept)" in reasons["fedlinucb"]
    assert "is named 'feducb', not 'misnamed'" in reasons["misnamed"]
    assert "json:loads is a function, not a fedbandits.plugins.Entry" in reasons["wrong-type"]
    (ldp,) = PROTOCOLS.broken
    assert "clashes with the built-in protocol 'ldp'" in ldp.message()
    # the built-ins are kept and usable
    assert ALGORITHMS.origin("fedlinucb") == plugins.BUILTIN and PROTOCOLS.origin("ldp") == plugins.BUILTIN
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "broken plugins (not usable; the built-ins are unaffected):" in out
    assert all(reason in out for reason in reasons.values())
    assert "  fedlinucb " in out.split("broken plugins")[0]
    config = config_from_dict(_config({"name": "fedlinucb", "protocol": "ldp", **PRIVATE}, runs=1, horizon=20))
    assert run_experiment(config, workers=1).summary()["algorithms"][0]["protocol"] == "ldp"


@pytest.mark.parametrize("name", ["missing-module", "loose-params", "wrong-type"])
def test_a_config_naming_a_broken_plugin_gets_its_reason(broken: None, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(_config({"name": name}))
    message = str(info.value)
    assert message.startswith(f"plugin algorithm {name!r} (entry point {name} = ") and "\n" not in message


def test_a_broken_builtin_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in that fails its checks is a bug of fedbandits: it raises, naming the entry."""
    from fedbandits.protocols import catalog

    monkeypatch.setattr(catalog, "LDP", object())
    plugins.reload()
    try:
        with pytest.raises(RuntimeError, match=r"built-in protocol 'ldp' \(fedbandits.protocols.catalog:LDP\)"):
            plugins.load("protocol")
    finally:
        monkeypatch.undo()
        plugins.reload()


#: the tests that read the entry-point registry (the names it lists, the tables, the audit's rows)
REGISTRY_TESTS = (
    "tests/test_plugins.py",
    "tests/test_reports.py::test_every_registered_algorithm_is_covered",
    "tests/test_cli.py::test_list_prints_every_name_and_parameter",
)


def test_the_registry_tests_pass_with_the_example_plugin_installed(tmp_path: Path) -> None:
    """docs/extending.md has the user `pip install ./examples/plugin` next to fedbandits: the suite
    must still pass (issue #29).  The plugin is installed as pip would (its dist-info, its sources)
    on the PYTHONPATH of a fresh pytest that runs the tests reading the registry."""
    root = EXAMPLE.parents[1]
    site = tmp_path / "site"
    _distribution(site, "fedbandits-example-plugin", EXAMPLE_ENTRY_POINTS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE_SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.pop("PYTEST_ADDOPTS", None)
    run = functools.partial(subprocess.run, env=env, cwd=root, capture_output=True, text=True, timeout=300)
    # the environment really has the plugin: a fresh interpreter lists it
    listed = run([sys.executable, "-m", "fedbandits.cli", "list"])
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "fed-thompson" in listed.stdout and "[plugin: fedbandits-example-plugin 0.1]" in listed.stdout
    this = f"tests/test_plugins.py::{test_the_registry_tests_pass_with_the_example_plugin_installed.__name__}"
    pytest_args = ["-q", "-p", "no:cacheprovider", "-m", "not slow and not ray", "--deselect", this]
    tested = run([sys.executable, "-m", "pytest", *pytest_args, *REGISTRY_TESTS])
    assert tested.returncode == 0, tested.stdout[-4000:]
    assert " passed" in tested.stdout and " failed" not in tested.stdout


@pytest.mark.slow
def test_pip_installs_the_example_plugin(tmp_path: Path) -> None:
    """The real thing: pip builds and installs examples/plugin (no dependencies, no network) into a
    folder; `fedbandits list` in a fresh interpreter with that folder on PYTHONPATH shows it."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("the example's build backend (hatchling) is not installed")
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(EXAMPLE)], check=True, cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-m", "fedbandits.cli", "list"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert "fed-thompson" in out and "[plugin: fedbandits-example-plugin 0.1]" in out
    assert "broken plugins" not in out


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict, "params must be a frozen dataclass"),
        (dataclass(type("Thawed", (), {"__annotations__": {"x": "int"}, "x": 1})), "must be a frozen dataclass"),
        (
            dataclass(frozen=True)(type("Required", (), {"__annotations__": {"x": "int"}})),
            "every field needs a default",
        ),
    ],
)
def test_entries_check_their_params_class(params: type, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plugins.Entry("x", "", params, lambda params, ctx: None)


def test_private_protocol_entries_need_a_calibration_and_an_audit_view() -> None:
    build = lambda cal, ctx: None  # noqa: E731
    with pytest.raises(ValueError, match="needs a callable calibrate"):
        plugins.ProtocolEntry("p", "", plugins.NoParams, build, private=True, audit_view="messages")
    with pytest.raises(ValueError, match="audit_view of private protocol 'p' must be one of 'messages'"):
        plugins.ProtocolEntry("p", "", plugins.NoParams, build, private=True, calibrate=build, audit_view="all")
    with pytest.raises(ValueError, match="takes no calibrate or audit_view"):
        plugins.ProtocolEntry("p", "", plugins.NoParams, build, audit_view="messages")
    with pytest.raises(ValueError, match="carried of 'p' must be one of 'direct', 'masked', 'shuffled' or None"):
        plugins.ProtocolEntry("p", "", plugins.NoParams, build, carried="mail")


RELAY_PROTOCOL = """
from fedbandits import plugins
from fedbandits.protocols.passthrough import NonPrivate

RELAY = plugins.ProtocolEntry(
    "relay", "exact statistics, carried straight to the server", plugins.NoParams,
    lambda cal, ctx: NonPrivate(ctx.n_runs, ctx.n_agents, ctx.dim), carried="direct",
)
LOCAL = plugins.ProtocolEntry(
    "local", "exact statistics, the simulator only", plugins.NoParams,
    lambda cal, ctx: NonPrivate(ctx.n_runs, ctx.n_agents, ctx.dim),
)
"""


def test_a_protocols_abilities_are_its_catalog_entry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A new protocol is its module plus its entry (issue #45): a plugin entry ``carried = "direct"``
    deploys and serves like ``none``; one that names no carrier is refused by both, in one line."""
    from fedbandits.federation.spec import make_spec
    from fedbandits.online import AgentSetup

    (tmp_path / "fedbandits_relay.py").write_text(RELAY_PROTOCOL, encoding="utf-8")
    points = "[fedbandits.protocols]\nrelay = fedbandits_relay:RELAY\nlocal = fedbandits_relay:LOCAL\n"
    _distribution(tmp_path, "fedbandits-relay", points)
    _on_path(monkeypatch, tmp_path)
    try:
        relay = config_from_dict(_config({"name": "fedlinucb", "protocol": "relay"}))
        spec = make_spec(relay)
        assert not spec.masked and not spec.shuffled and spec.params.protocol == "relay"
        assert AgentSetup.from_config(relay).federated
        local = config_from_dict(_config({"name": "fedlinucb", "protocol": "local"}))
        with pytest.raises(ConfigError, match="protocol 'local' does not deploy; deployable protocols: none, ldp, "):
            make_spec(local)
        with pytest.raises(ConfigError, match="an agent synchronises through 'none', 'ldp', 'distributed-dp', 'relay'"):
            AgentSetup.from_config(local)
    finally:
        plugins.reload()


@pytest.mark.ray
def test_the_example_plugin_runs_on_the_ray_backend_bit_for_bit(tmp_path: Path) -> None:
    """The Ray backend's workers find an installed plugin the way local workers do (they inherit the
    environment of the driver that starts the local Ray instance), and give the local results."""
    pytest.importorskip("ray")
    import secrets

    import tomli_w

    site = tmp_path / "site"
    _distribution(site, "fedbandits-example-plugin", EXAMPLE_ENTRY_POINTS)
    config = tmp_path / "plugin.toml"
    config.write_text(tomli_w.dumps(_config(*MIXED, runs=4)), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE_SRC), os.environ.get("PYTHONPATH", "")]),
        "RAY_AUTH_TOKEN": secrets.token_hex(32),  # a throw-away token (tests/test_ray.py)
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    outputs = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        cmd = [sys.executable, "-m", "fedbandits.cli", "run", str(config), "--out", str(out), "--no-progress"]
        proc = subprocess.run(
            [*cmd, "--backend", backend, "--workers", "2"], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs[backend] = (out / "regret_curves.csv").read_text(encoding="utf-8")
    assert outputs["ray"] == outputs["local"] and "thompson rounded" in outputs["local"]


OPAQUE_PROTOCOL = """
from dataclasses import dataclass
from fedbandits import plugins


@dataclass(frozen=True)
class OpaqueCalibration:
    epsilon_spent: float = 1.0


def calibrate(params, *, horizon, agents, dim):
    return OpaqueCalibration()


ENTRY = plugins.ProtocolEntry(
    "opaque", "a private protocol whose calibration states no noise level", plugins.NoParams,
    lambda cal, ctx: None, private=True, calibrate=calibrate, audit_view="messages",
)
"""


def test_the_noise_aware_default_needs_a_calibration_that_states_its_noise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The default regularizer ('auto' -> 'noise' for a private protocol) follows the calibration's
    noise; a plugin calibration without sigma_cov / prefix_factor is a one-line config error naming
    the protocol, and 'fixed' is accepted."""
    (tmp_path / "fedbandits_opaque.py").write_text(OPAQUE_PROTOCOL, encoding="utf-8")
    _distribution(tmp_path, "fedbandits-opaque", "[fedbandits.protocols]\nopaque = fedbandits_opaque:ENTRY\n")
    _on_path(monkeypatch, tmp_path)
    try:
        alg = {"name": "fedlinucb", "protocol": "opaque", **PRIVATE}
        with pytest.raises(ConfigError, match=r"protocol 'opaque'.s calibration .OpaqueCalibration. states no") as err:
            config_from_dict(_config(alg))
        assert "\n" not in str(err.value) and "regularizer = 'fixed'" in str(err.value)
        config = config_from_dict(_config({**alg, "regularizer": "fixed"}))
        assert config.algorithms[0].params.regularizer == "fixed"
    finally:
        plugins.reload()


def test_pyproject_declares_the_builtins_in_the_order_fedbandits_list_shows() -> None:
    """``BUILTIN_ORDER`` is the order of ``fedbandits list`` (entry points are written sorted by name);
    pyproject.toml declares the same names in the same order, so neither can drift."""
    declared = tomllib.loads((EXAMPLE.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    groups = declared["project"]["entry-points"]
    for kind, group in plugins.GROUPS.items():
        assert tuple(groups[group]) == plugins.BUILTIN_ORDER[kind], kind
    plugins.reload()
    assert tuple(PROTOCOLS) == plugins.BUILTIN_ORDER["protocol"]
    assert tuple(ALGORITHMS) == plugins.BUILTIN_ORDER["algorithm"]


#: in a fresh interpreter: the modules a config naming fedlinucb on gaussian-sphere imports, before and
#: after the tables are listed
ONE_NAME = """
import json, sys
from fedbandits.config import config_from_dict
config_from_dict({"experiment": {"horizon": 100}, "environment": {"name": "gaussian-sphere"},
                  "algorithms": [{"name": "fedlinucb"}]})
print(json.dumps(sorted(m for m in sys.modules if m.startswith("fedbandits."))))
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS
list(ALGORITHMS), list(ENVIRONMENTS)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("fedbandits."))))
"""
#: modules of algorithms and environments the config above does not name
OTHERS = {
    "fedbandits.algorithms.cluster_catalog",
    "fedbandits.algorithms.fclub",
    "fedbandits.algorithms.club",
    "fedbandits.algorithms.feducb",
    "fedbandits.algorithms.feducb_decentralized",
    "fedbandits.algorithms.hetofedbandit",
    "fedbandits.algorithms.async_fedlinucb",
    "fedbandits.envs.movielens",
    "fedbandits.envs.ltr",
    "fedbandits.envs.clustered",
    "fedbandits.envs.heterogeneous",
}


def test_naming_one_builtin_imports_its_own_module_and_no_other() -> None:
    """A Flower ClientApp process starts for every message and validates its config: it must pay for
    the algorithm and environment it runs only (issue #45, "light where it runs per message")."""
    run = subprocess.run([sys.executable, "-c", ONE_NAME], capture_output=True, text=True, timeout=120, check=True)
    named, listed = (set(json.loads(line)) for line in run.stdout.splitlines())
    assert {"fedbandits.algorithms.fedlinucb", "fedbandits.envs.synthetic"} <= named
    assert not named & OTHERS, sorted(named & OTHERS)
    assert OTHERS <= listed, sorted(OTHERS - listed)
