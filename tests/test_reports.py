"""Policy reports merged over tasks: the same whatever the grouping of runs into tasks."""

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import pytest

from fedbandits import config_from_dict
from fedbandits.algorithms.base import MergeRule, Policy
from fedbandits.algorithms.fclub_params import privacy_guarantee
from fedbandits.algorithms.fedlinucb import calibrate_protocol
from fedbandits.registry import ALGORITHMS
from fedbandits.sim.reports import ReportMergeError, default_rule, merge_reports
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.task import simulate_runs

RUNS = 3
SPHERE = {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3}
CLUSTERED = {"name": "clustered-synthetic", "users": 8, "clusters": 2, "agents": 2, "dim": 3, "arms": 4, "gap": 1.0}
#: aggressive edge deletion: detections (ARI, clusters, uploads) differ between runs even on tiny instances
DETECT = {"alpha1": 0.3, "alpha2": 0.5}

#: (environment, horizon, algorithms): together every registered algorithm, private variants included
CASES = {
    "linear": (
        SPHERE,
        40,
        [
            {"name": "linucb-independent"},
            {"name": "linucb-super"},
            {"name": "fedlinucb", "label": "fed", "batch": 5},
            {"name": "fedlinucb", "label": "fed-ldp", "batch": 5, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-3},
            {"name": "fedlinucb", "label": "fed-ldp-prefix", "batch": 5, "protocol": "ldp-prefix", "lazy": True},
            {"name": "fedlinucb-async", "label": "async"},
            {"name": "fedlinucb-async", "label": "async-naive", "protocol": "ldp-prefix", "threshold": 0.1},
            {
                "name": "fedlinucb-async",
                "label": "async-period",
                "protocol": "ldp-prefix",
                "trigger": "period",
                "batch": 3,
            },
            {"name": "hetofedbandit", "label": "heto", "explore": 10, "threshold": 0.5},
            {"name": "feducb", "label": "feducb", "private": False},
            {"name": "feducb", "label": "feducb-private", "feature_bound": 0.5},
            {"name": "feducb", "label": "feducb-private-schedule", "schedule": "private", "calibration": "tight"},
            {"name": "feducb-decentralized", "label": "dec", "private": False, "graph": "line"},
            {"name": "feducb-decentralized", "label": "dec-private", "graph": "line", "feature_bound": 0.5},
        ],
    ),
    "clustered": (
        CLUSTERED,
        100,
        [
            {"name": "fclub", **DETECT},
            {"name": "fclub-dc", **DETECT},
            {"name": "cdp-fclub-dc", "epsilon": 20.0, "rho_scale": 0.05, "feature_bound": 0.5, **DETECT},
            {"name": "homo"},
            {"name": "homo-dc"},
            {"name": "club", "alpha1": 0.3},
            {"name": "sclub", "alpha1": 0.3},
            {"name": "linucb-per-user"},
        ],
    ),
}


def _config(case: str, runs_per_task: int):
    env, horizon, algorithms = CASES[case]
    return config_from_dict(
        {
            "experiment": {"seed": 7, "runs": RUNS, "horizon": horizon, "runs_per_task": runs_per_task},
            "environment": env,
            "algorithms": algorithms,
        }
    )


def test_every_registered_algorithm_is_covered():
    names = {alg["name"] for _, _, algs in CASES.values() for alg in algs}
    assert names == set(ALGORITHMS)
    assert all(isinstance(e.policy, type) and issubclass(e.policy, Policy) for e in ALGORITHMS.values())


def _assert_reports_equal(label, rules, a, b):
    assert a.keys() == b.keys(), label
    assert list(a) == list(b), label  # the key order of the summary is kept
    for key in a:
        rule = rules.get(key) or default_rule(key)
        if rule in ("mean", "mean-series"):
            np.testing.assert_allclose(
                np.asarray(a[key], dtype=float), np.asarray(b[key], dtype=float), rtol=1e-12, err_msg=f"{label}.{key}"
            )
        else:  # config constants, counts, maxima and what derives from them: exact
            assert a[key] == b[key] or (a[key] != a[key] and b[key] != b[key]), (label, key, a[key], b[key])
            assert type(a[key]) is type(b[key]), (label, key)


@pytest.mark.parametrize("case", sorted(CASES))
def test_reports_do_not_depend_on_task_grouping(case):
    """R tasks of one run and one task of R runs give the same merged report for every algorithm."""
    per_run = run_experiment(_config(case, 1))
    together = run_experiment(_config(case, RUNS))
    for alg in _config(case, 1).algorithms:
        rules = ALGORITHMS[alg.name].policy.report_merge
        a, b = per_run.algorithms[alg.label].report, together.algorithms[alg.label].report
        _assert_reports_equal(alg.label, rules, a, b)
        # every key has a rule, or is a protocol's privacy report (a function of the config alone)
        unruled = {k for k in a if k not in rules and default_rule(k) is None}
        if alg.name in ("fedlinucb", "fedlinucb-async") and alg.params.private:
            env, horizon = per_run.config.environment.params, per_run.config.experiment.horizon
            params = alg.params
            if alg.name == "fedlinucb-async":
                params, horizon = params.release_params(horizon)
            cal = calibrate_protocol(params, horizon=horizon, agents=3, dim=env.dim)
            unruled -= set(cal.report()) | {"guarantee_reason"}
        assert not unruled, (alg.label, unruled)


def test_merged_report_is_not_the_first_tasks():
    """The merge has teeth: the first run's own report differs from the merged one (the old bug)."""
    config = _config("clustered", 1)
    first = simulate_runs(config, [0]).reports
    merged = run_experiment(config).algorithms
    for key in ("uploads", "ari_final", "ari_by_phase", "clusters_detected"):
        assert first["fclub"][key] != merged["fclub"].report[key], key
    assert first["sclub"]["ari_final"] != merged["sclub"].report["ari_final"]
    eps = "epsilon_spent_per_server_cluster"
    private = "cdp-fclub-dc eps=20"  # the default label names the privacy level
    assert first[private][eps] != merged[private].report[eps]
    assert merged[private].report["guarantee"] == "no formal guarantee"


class _Toy(Policy):
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "avg": "mean",
        "worst": "max",
        "best": "min",
        "count": "sum",
        "eps": "max",
        "k": "same",
        "matrix": "max-elementwise",
        "by_phase": "mean-series",
        "verdict": "derived",
    }

    @classmethod
    def finish_merged_report(cls, report):
        report["verdict"] = "ok" if report["eps"] <= 1.0 else "too much"
        return report

    def _select(self, features):  # pragma: no cover - never played
        raise NotImplementedError

    def _observe(self, x, y):  # pragma: no cover
        raise NotImplementedError


def _toy(avg, worst, count, eps, by_phase, matrix, **extra):
    return {
        "avg": avg,
        "worst": worst,
        "best": worst,
        "count": count,
        "eps": eps,
        "k": 4,
        "matrix": matrix,
        "by_phase": by_phase,
        "verdict": "ok" if eps <= 1.0 else "too much",
        "clipped_features": count,
        "psd_repairs": 1,
        **extra,
    }


def test_merge_rules_known_answer():
    a = _toy(1.0, 5, 2, 0.5, [[1, 0.0], [3, 1.0]], [[1.0, 4.0]], note="same")
    b = _toy(2.0, 7, 3, 1.5, [[1, 1.0], [3, 0.5]], [[2.0, 3.0]], note="same")
    merged = merge_reports([a, b], [1, 3], _Toy, "toy")
    assert list(merged) == list(a)
    assert merged["avg"] == 1.75  # (1 x 1.0 + 3 x 2.0) / 4
    assert merged["worst"] == 7 and merged["best"] == 5 and isinstance(merged["worst"], int)
    assert merged["count"] == 5 and merged["clipped_features"] == 5 and merged["psd_repairs"] == 2
    assert merged["eps"] == 1.5 and merged["verdict"] == "too much"  # recomputed, not the first task's "ok"
    assert merged["k"] == 4 and merged["note"] == "same"
    assert merged["matrix"] == [[2.0, 4.0]]
    assert merged["by_phase"] == [[1, 0.75], [3, 0.625]]
    assert merge_reports([a], [5], _Toy, "toy") == a  # one task: unchanged
    nan = merge_reports([{**a, "avg": math.nan}, b], [1, 3], _Toy, "toy")
    assert math.isnan(nan["avg"])


def test_merge_rejects_inconsistent_reports():
    a = _toy(1.0, 5, 2, 0.5, [[1, 0.0]], [[1.0]], extra_key=1)
    b = _toy(2.0, 7, 3, 0.5, [[1, 1.0]], [[2.0]], extra_key=2)
    with pytest.raises(ReportMergeError, match=r"'toy'.*'extra_key'.*no merge rule.*_Toy\.report_merge"):
        merge_reports([a, b], [1, 3], _Toy, "toy")
    with pytest.raises(ReportMergeError, match=r"'k'.*declared the same"):
        merge_reports([a, {**b, "extra_key": 1, "k": 5}], [1, 3], _Toy, "toy")
    with pytest.raises(ReportMergeError, match="times differ"):
        merge_reports([a, {**b, "extra_key": 1, "by_phase": [[2, 1.0]]}], [1, 3], _Toy, "toy")
    with pytest.raises(ReportMergeError, match="shapes differ"):
        merge_reports([a, {**b, "extra_key": 1, "matrix": [[1.0, 2.0]]}], [1, 3], _Toy, "toy")
    with pytest.raises(ReportMergeError, match="other keys"):
        merge_reports([a, {k: v for k, v in b.items() if k != "extra_key"}], [1, 3], _Toy, "toy")
    # without any rule (the base class) a differing key is an error too, an agreeing one is kept
    with pytest.raises(ReportMergeError, match=r"'avg'.*no merge rule"):
        merge_reports([{"avg": 1.0}, {"avg": 2.0}], [1, 1], Policy, "base")
    assert merge_reports([{"avg": 1.0}, {"avg": 1.0}], [1, 1], Policy, "base") == {"avg": 1.0}


def test_fclub_guarantee_is_recomputed_after_the_merge():
    cls = ALGORITHMS["cdp-fclub-dc"].policy
    reports = [
        dict(zip(("guarantee", "guarantee_reason"), privacy_guarantee(eps, 1.0), strict=True))
        | {"epsilon": 1.0, "epsilon_spent": eps}
        for eps in (0.5, 2.0)
    ]
    merged = merge_reports(reports, [2, 1], cls, "cdp")
    assert merged["epsilon_spent"] == 2.0
    assert (merged["guarantee"], merged["guarantee_reason"]) == privacy_guarantee(2.0, 1.0)
    assert merged["guarantee"] == "no formal guarantee" and "exceed the target" in merged["guarantee_reason"]
    assert "meet the target" in reports[0]["guarantee_reason"]
