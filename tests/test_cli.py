"""The ``fedbandits`` command line, driven in-process (``cli.main(argv)``) and as a subprocess.

One tiny experiment (3 agents, 30 rounds, 2 runs) is run once per module and shared by the
tests that only read its output; tests that need their own run make another tiny one.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest

import fedbandits
from fedbandits.cli import main
from fedbandits.config import load_config
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS
from fedbandits.sim.task import task_chunks

HORIZON, RUNS, AGENTS, BATCH, SEED = 30, 2, 3, 5, 11
LABELS = ("independent", "fed B=5")
TINY = f"""
[experiment]
name = "tiny"
seed = {SEED}
runs = {RUNS}
horizon = {HORIZON}

[environment]
name = "gaussian-sphere"
agents = {AGENTS}
arms = 5
dim = 3

[[algorithms]]
name = "linucb-independent"
label = "{LABELS[0]}"

[[algorithms]]
name = "fedlinucb"
label = "{LABELS[1]}"
batch = {BATCH}
"""
RESULT_FILES = ("config.toml", "summary.json", "regret_curves.csv", "per_agent_regret.csv", "runs.csv", "regret.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_KEYS = {"label", "final_regret_mean", "final_regret_std", "sync_rounds", "bytes_sent", "wall_seconds"}


def invoke(argv: list[str]) -> int:
    """``main(argv)``'s exit status, whether it returns it or raises SystemExit (argparse does)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code  # type: ignore[return-value]


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def invoke_captured(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = invoke(argv)
    return Outcome(code, out.getvalue(), err.getvalue())


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def final_regrets(folder: Path) -> dict[str, list[float]]:
    """Per label, the final regret of every run, in run order, from runs.csv."""
    out: dict[str, list[float]] = {}
    for row in read_csv(folder / "runs.csv"):
        runs = out.setdefault(row["algorithm"], [])
        assert int(row["run"]) == len(runs)
        runs.append(float(row["final_regret"]))
    return out


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "tiny.toml"
    path.write_text(TINY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_config) -> tuple[Outcome, Path]:
    out = tmp_path_factory.mktemp("run") / "out"
    return invoke_captured(["run", str(tiny_config), "--out", str(out), "--no-progress"]), out


# --------------------------------------------------------------------------------------------
# help and list
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["run", "--help"], ["plot", "--help"], ["list", "--help"]])
def test_help_exits_zero(capsys, argv):
    assert invoke(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: fedbandits")
    assert captured.err == ""


def test_top_level_help_lists_the_commands(capsys):
    assert invoke(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("run", "quickstart", "plot", "list"):
        assert command in out


def test_list_prints_every_name_and_parameter(capsys):
    assert invoke(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    # parse "section:" / "  name  description" / "      parameter = default  help"
    listed: dict[str, dict[str, list[str]]] = {}
    section = entry = None
    for line in captured.out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            section = line.rstrip(":")
            listed[section] = {}
        elif line.startswith("      "):
            listed[section][entry].append(line.split()[0])
        else:
            entry = line.split()[0]
            listed[section][entry] = []
    expected = {
        title: {name: [f.name for f in fields(e.params)] for name, e in table.items()}
        for title, table in (("environments", ENVIRONMENTS), ("algorithms", ALGORITHMS), ("protocols", PROTOCOLS))
    }
    assert listed == expected
    # and the lists are not trivially empty
    assert {"gaussian-sphere", "gap-instance"} <= listed["environments"].keys()
    assert {"linucb-independent", "linucb-super", "fedlinucb"} <= listed["algorithms"].keys()
    assert "batch" in listed["algorithms"]["fedlinucb"]
    assert "none" in listed["protocols"]


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------
def test_run_succeeds_and_prints_a_table(tiny_run):
    outcome, _ = tiny_run
    assert outcome.code == 0, outcome.err
    assert outcome.err == ""  # --no-progress: nothing on stderr
    lines = outcome.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("algorithm"))
    assert set(lines[header + 1]) <= {"-", " "}  # the rule under the header
    rows = lines[header + 2 : header + 2 + len(LABELS)]
    assert [row[: len(label)] for row, label in zip(rows, LABELS, strict=True)] == list(LABELS)
    assert lines[0].startswith(f"tiny: gaussian-sphere, M={AGENTS}, T={HORIZON}, {RUNS} run(s)")


def test_run_writes_every_result_file(tiny_run):
    _, out = tiny_run
    for name in RESULT_FILES:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (out / "regret.png").read_bytes().startswith(PNG_MAGIC)


def test_summary_json(tiny_run):
    _, out = tiny_run
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert (summary["runs"], summary["horizon"], summary["agents"]) == (RUNS, HORIZON, AGENTS)
    entries = {s["label"]: s for s in summary["algorithms"]}
    assert list(entries) == list(LABELS)
    finals = final_regrets(out)
    for label, s in entries.items():
        assert SUMMARY_KEYS <= s.keys()
        # pseudo-regret over 30 rounds x 3 agents: positive, finite, at most 2 per agent-round
        assert 0 < s["final_regret_mean"] <= 2 * AGENTS * HORIZON
        assert s["final_regret_mean"] == pytest.approx(sum(finals[label]) / RUNS, rel=1e-12)
        mean = s["final_regret_mean"]
        sample_std = math.sqrt(sum((v - mean) ** 2 for v in finals[label]) / (RUNS - 1))
        assert s["final_regret_std"] == pytest.approx(sample_std, rel=1e-9, abs=1e-12)
        assert math.isfinite(s["wall_seconds"]) and 0 <= s["wall_seconds"] <= summary["wall_seconds"]
    fed, independent = entries[LABELS[1]], entries[LABELS[0]]
    assert fed["sync_rounds"] == HORIZON // BATCH
    assert fed["bytes_sent"] > 0 and fed["bytes_sent"] % fed["sync_rounds"] == 0  # every sync costs the same
    assert independent["sync_rounds"] == 0 and independent["bytes_sent"] == 0


def test_csv_files_are_consistent(tiny_run):
    _, out = tiny_run
    finals = final_regrets(out)
    assert {label: len(v) for label, v in finals.items()} == dict.fromkeys(LABELS, RUNS)
    curves = read_csv(out / "regret_curves.csv")
    per_agent = read_csv(out / "per_agent_regret.csv")
    assert len(per_agent) == len(LABELS) * RUNS * AGENTS
    for label in LABELS:
        for run in range(RUNS):
            curve = [r for r in curves if r["algorithm"] == label and int(r["run"]) == run]
            ts = [int(r["t"]) for r in curve]
            values = [float(r["cumulative_regret"]) for r in curve]
            assert ts[-1] == HORIZON and ts == sorted(set(ts))
            assert all(b >= a for a, b in itertools.pairwise(values))  # cumulative regret never decreases
            assert values[-1] == finals[label][run]
            agents = [
                float(r["cumulative_regret"]) for r in per_agent if r["algorithm"] == label and int(r["run"]) == run
            ]
            assert len(agents) == AGENTS
            assert sum(agents) == pytest.approx(values[-1], rel=1e-12)
    for row in read_csv(out / "runs.csv"):
        expected_syncs = HORIZON // BATCH if row["algorithm"] == LABELS[1] else 0
        assert int(row["sync_rounds"]) == expected_syncs


def test_saved_config_round_trips(tiny_run, tiny_config):
    _, out = tiny_run
    original = load_config(tiny_config)
    assert load_config(out / "config.toml") == original
    assert [a.label for a in original.algorithms] == list(LABELS)


def test_cli_matches_python_api(tiny_run, tiny_config):
    _, out = tiny_run
    results = fedbandits.run(tiny_config)
    expected = {label: res.final_regret.tolist() for label, res in results.algorithms.items()}
    assert final_regrets(out) == expected  # exactly: runs.csv stores repr(float)


def test_overrides_are_reflected_everywhere(tmp_path, tiny_config, tiny_run):
    out = tmp_path / "out"
    argv = ["run", str(tiny_config), "--out", str(out), "--runs", "3", "--seed", "5", "--no-progress"]
    outcome = invoke_captured(argv)
    assert outcome.code == 0, outcome.err
    assert f"T={HORIZON}, 3 run(s)" in outcome.out
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["runs"] == 3
    assert all(s["runs"] == 3 for s in summary["algorithms"])
    saved = load_config(out / "config.toml")
    assert (saved.experiment.runs, saved.experiment.seed) == (3, 5)
    assert saved == load_config(tiny_config).with_experiment(runs=3, seed=5)  # nothing else changed
    finals = final_regrets(out)
    assert {label: len(v) for label, v in finals.items()} == dict.fromkeys(LABELS, 3)
    # the seed really was used: same numbers as the Python API with the same overrides, and
    # other numbers than the config's own seed
    results = fedbandits.run(tiny_config, runs=3, seed=5)
    assert finals == {label: res.final_regret.tolist() for label, res in results.algorithms.items()}
    assert finals[LABELS[0]][:RUNS] != final_regrets(tiny_run[1])[LABELS[0]]


#: private entries whose clipping is known in advance on gaussian-sphere (features of norm 1 up to
#: float32 rounding, 7e-8 at most; rewards <x, theta*> + N(0, 0.25) with <x, theta*> in [0, 1]):
#: L = 0.5 clips every feature (100%); L = 1.1 none.  B = 100 clips no reward (200 noise sd away);
#: B = 0.01 keeps a reward only if it falls in [-0.01, 0.01], probability <= 0.02 / (0.5 sqrt(2 pi))
#: = 1.6% whatever its mean: more than 18 of the 180 rewards kept (< 90% clipped) has probability
#: < 1e-8 (Chernoff bound on a binomial of mean 2.9).  L = 1 scales the features whose float32
#: rounding lands above 1 (22-23% of them on 20,000+ measured), but that is float rounding, not
#: clipping (fedbandits.core.clipping.ROUNDING): none counted, no warning.
CLIPPING = {
    "clips features": {"feature_bound": 0.5, "reward_bound": 100.0},
    "clips rewards": {"feature_bound": 1.1, "reward_bound": 0.01},
    "clips nothing": {"feature_bound": 1.1, "reward_bound": 100.0},
    "rounds features": {"feature_bound": 1.0, "reward_bound": 100.0},
}
QUIET = ("clips nothing", "rounds features")
CLIPPING_RUNS = 2


def clipping_config(entries: dict[str, dict[str, float]]) -> dict[str, object]:
    private = {"name": "fedlinucb", "batch": BATCH, "protocol": "ldp", "epsilon": 5.0}
    return {
        "experiment": {"name": "clipping", "seed": SEED, "runs": CLIPPING_RUNS, "horizon": HORIZON},
        "environment": {"name": "gaussian-sphere", "agents": AGENTS, "arms": 5, "dim": 3},
        "algorithms": [
            {"name": "linucb-independent", "label": "independent"},
            *({**private, **bounds, "label": label} for label, bounds in entries.items()),
        ],
    }


def test_a_run_that_clips_shows_the_shares_and_warns_once_per_algorithm(tmp_path):
    import tomli_w

    config = tmp_path / "clipping.toml"
    config.write_text(tomli_w.dumps(clipping_config(CLIPPING)), encoding="utf-8")
    outcome = invoke_captured(["run", str(config), "--out", str(tmp_path / "out"), "--no-progress"])
    assert outcome.code == 0, outcome.err
    header = next(line for line in outcome.out.splitlines() if line.startswith("algorithm"))
    assert "clipped x / r" in header
    rows = {line.split("  ")[0]: line for line in outcome.out.splitlines()}
    observations = CLIPPING_RUNS * AGENTS * HORIZON
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    entries = {s["label"]: s for s in summary["algorithms"]}
    assert "observations" not in entries["independent"] and rows["independent"].split()[-2] == "-"
    assert entries["clips features"]["observations"] == observations
    assert entries["clips features"]["clipped_features"] == observations
    assert " 100.0% / 0% " in rows["clips features"]
    assert " 0% / 0% " in rows["clips nothing"]
    assert entries["rounds features"]["clipped_features"] == 0
    assert 1.0 < entries["rounds features"]["feature_norm_max"] <= 1.0 + 1e-6  # some were above 1: rounding
    assert " 0% / 0% " in rows["rounds features"]
    rewards = entries["clips rewards"]["clipped_rewards"]
    assert 0.9 * observations <= rewards <= observations
    assert f" 0% / {100 * rewards / observations:.1f}% " in rows["clips rewards"]
    warnings = outcome.err.splitlines()
    assert len(warnings) == 2 and all(w.startswith("fedbandits: warning: [[algorithms]] entry '") for w in warnings)
    features, rewards_line = warnings
    assert "'clips features'" in features and "raise its feature_bound " in features
    assert "feature_bound = 0.5, the largest norm 1)" in features and "reward_bound" not in features
    assert "'clips rewards'" in rewards_line and "raise its reward_bound " in rewards_line
    assert "reward_bound = 0.01" in rewards_line and "feature_bound" not in rewards_line
    assert f"of {observations:,} observations" in features


def test_the_api_warns_about_clipping_and_stays_silent_without_it():
    import warnings

    from fedbandits.sim.results import ClippingWarning

    with pytest.warns(ClippingWarning) as caught:
        results = fedbandits.run(clipping_config(CLIPPING))
    messages = [str(w.message) for w in caught if issubclass(w.category, ClippingWarning)]
    assert len(messages) == 2
    assert "'clips features'" in messages[0] and "'clips rewards'" in messages[1]
    assert messages == results.clipping_warnings()
    # the threshold is strict: every feature clipped is a share of exactly 1, not above it
    assert results.clipping_warnings(threshold=1.0) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingWarning)  # any clipping warning fails the test
        quiet = fedbandits.run(clipping_config({label: CLIPPING[label] for label in QUIET}))
    assert quiet.algorithms["clips nothing"].report["clipped"] == 0
    rounded = quiet.algorithms["rounds features"].report
    assert rounded["clipped_features"] == 0 and rounded["feature_norm_max"] > 1.0  # scaled, not counted


def test_variants_of_one_entry_warn_once_on_their_summed_counts():
    import warnings

    from fedbandits.sim.results import ClippingWarning

    variants = {"x @ eps=1": CLIPPING["clips features"], "x @ eps=4": CLIPPING["clips features"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        results = fedbandits.run(clipping_config(variants))
    assert len(results.clipping_warnings()) == 2
    (line,) = results.clipping_warnings(entries=dict.fromkeys(variants, "x"))
    observations = len(variants) * CLIPPING_RUNS * AGENTS * HORIZON
    assert line.startswith("[[algorithms]] entry 'x' clipped 100.0% of its features")
    assert f"of {observations:,} observations (its 2 variants together): raise its feature_bound " in line


def test_plot_regenerates_the_figure(tmp_path, tiny_run):
    folder = tmp_path / "results"
    shutil.copytree(tiny_run[1], folder)
    (folder / "regret.png").unlink()
    outcome = invoke_captured(["plot", str(folder)])
    assert outcome.code == 0, outcome.err
    assert outcome.err == ""
    assert outcome.out.startswith("wrote ") and str(folder / "regret.png") in outcome.out
    assert (folder / "regret.png").read_bytes().startswith(PNG_MAGIC)


# --------------------------------------------------------------------------------------------
# bad input: status 2, one line on stderr naming the problem, nothing written
# --------------------------------------------------------------------------------------------
def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    return path


BAD_RUNS = {
    # name: (config text or None for a missing file, extra argv, words the message must contain)
    "missing config file": (None, [], ["cannot read config", "missing.toml"]),
    "malformed TOML": ("[experiment\nseed = 1\n", [], ["malformed TOML", "bad.toml", "line 1"]),
    "unknown algorithm": (TINY.replace('"fedlinucb"', '"fedlinucbb"'), [], ["algorithms[2].name", "'fedlinucbb'"]),
    "invalid parameter": (TINY.replace("batch = 5", "batch = 0"), [], ["algorithms[2] (fedlinucb)", "batch", ">= 1"]),
    "--workers 0": (TINY, ["--workers", "0"], ["--workers", ">= 1", "got 0"]),
    "--runs -1": (TINY, ["--runs", "-1"], ["--runs", ">= 1", "got -1"]),
    "--runs 0": (TINY, ["--runs", "0"], ["--runs", ">= 1", "got 0"]),
    "--runs abc": (TINY, ["--runs", "abc"], ["--runs", "'abc'"]),
    "--seed -1": (TINY, ["--seed", "-1"], ["--seed", ">= 0", "got -1"]),
}


def assert_usage_error(outcome: Outcome, words: list[str]) -> None:
    assert outcome.code == 2
    assert outcome.out == ""
    lines = outcome.err.splitlines()
    assert len(lines) == 1, outcome.err
    assert lines[0].startswith("fedbandits: error: ")
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(("text", "extra", "words"), BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_bad_run_input(tmp_path, text, extra, words):
    config = tmp_path / "missing.toml" if text is None else _write(tmp_path, text)
    out = tmp_path / "out"
    outcome = invoke_captured(["run", str(config), "--out", str(out), "--no-progress", *extra])
    assert_usage_error(outcome, words)
    assert not out.exists()


def _not_results(tmp_path: Path, results: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a results folder\n", encoding="utf-8")
    return folder


def _empty(tmp_path: Path, results: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def _only_config(tmp_path: Path, results: Path) -> Path:
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "config.toml").write_text(TINY, encoding="utf-8")
    return folder


def _damaged(name: str, text: str):
    """A copy of a real results folder with one file replaced by ``text``."""

    def make(tmp_path: Path, results: Path) -> Path:
        folder = tmp_path / "damaged"
        shutil.copytree(results, folder)
        (folder / "regret.png").unlink()
        (folder / name).write_text(text, encoding="utf-8")
        return folder

    return make


BAD_PLOTS = {
    # name: (makes the folder, words the message must contain besides the folder)
    "unrelated folder": (_not_results, ["is not a results folder", "config.toml is missing"]),
    "empty folder": (_empty, ["is not a results folder", "config.toml is missing"]),
    "only a config": (_only_config, ["is not a results folder", "summary.json is missing"]),
    "no such folder": (lambda tmp, _: tmp / "nowhere", ["is not a results folder", "config.toml is missing"]),
    "a file": (lambda tmp, _: _write(tmp, TINY), ["is not a results folder", "config.toml is missing"]),
    # every file present but one of them is not what `run` writes
    "runs.csv with only its header": (
        _damaged("runs.csv", "algorithm,run,final_regret,sync_rounds,messages,bytes_sent\n"),
        ["runs.csv"],
    ),
    "summary.json not JSON": (_damaged("summary.json", "{not json"), ["summary.json"]),
    "config.toml empty": (_damaged("config.toml", ""), ["config.toml"]),
}


@pytest.mark.parametrize(("make", "words"), BAD_PLOTS.values(), ids=BAD_PLOTS.keys())
def test_plot_rejects_a_folder_that_is_not_results(tmp_path, tiny_run, make, words):
    folder = make(tmp_path, tiny_run[1])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    outcome = invoke_captured(["plot", str(folder)])
    assert_usage_error(outcome, [str(folder), *words])
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


# --------------------------------------------------------------------------------------------
# as a subprocess: the real interpreter, exit status and streams
# --------------------------------------------------------------------------------------------
def _subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedbandits.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_subprocess_run_matches_in_process_run(tmp_path, tiny_config, tiny_run):
    out = tmp_path / "out"
    proc = _subprocess(["run", str(tiny_config), "--out", str(out), "--no-progress"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert all(label in proc.stdout for label in LABELS)
    assert all((out / name).is_file() for name in RESULT_FILES)
    assert final_regrets(out) == final_regrets(tiny_run[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing written outside --out


def test_subprocess_bad_input(tmp_path, tiny_config):
    out = tmp_path / "out"
    proc = _subprocess(["run", str(tiny_config), "--out", str(out), "--workers", "0"], cwd=tmp_path)
    assert_usage_error(Outcome(proc.returncode, proc.stdout, proc.stderr), ["--workers", ">= 1", "got 0"])
    assert not out.exists()


# --------------------------------------------------------------------------------------------
# quickstart: both cores of a 2-core machine (#29)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cpus", "argv", "workers"),
    [
        (2, [], 2),  # one worker per task of its 2
        (8, [], 2),  # no more workers than tasks
        (1, [], 1),  # a 1-CPU machine: in this process
        (1, ["--workers", "3"], 3),  # --workers overrides
        (2, ["--workers", "1"], 1),
        (2, ["--backend", "ray"], "auto"),  # Ray's own default: twice the cluster's CPUs in flight
    ],
)
def test_quickstart_asks_for_two_workers_where_there_are_two_cpus(monkeypatch, tmp_path, cpus, argv, workers):
    import fedbandits.cli.simulate as cli

    seen = {}

    def fake_run(config, **kwargs):  # records what quickstart asks for, runs nothing
        seen.update(kwargs, tasks=len(task_chunks(config)))
        raise ValueError("stop")

    monkeypatch.setattr(cli, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(cli, "run_experiment", fake_run)
    with redirect_stderr(io.StringIO()):
        assert main(["quickstart", "--out", str(tmp_path / "q"), *argv]) == 2
    assert seen["workers"] == workers and seen["tasks"] == 2


def test_run_keeps_one_worker_by_default(monkeypatch, tmp_path, tiny_config):
    import fedbandits.cli.simulate as cli

    seen = {}

    def fake_run(config, **kwargs):
        seen.update(kwargs)
        raise ValueError("stop")

    monkeypatch.setattr(cli, "usable_cpus", lambda: 2)
    monkeypatch.setattr(cli, "run_experiment", fake_run)
    with redirect_stderr(io.StringIO()):
        assert main(["run", str(tiny_config), "--out", str(tmp_path / "r")]) == 2
    assert seen["workers"] == "auto"  # the local backend's "auto": 1 process


def test_the_quickstart_tasks_change_no_number():
    """The quickstart's 4 runs in 2 tasks of 2 (its runs_per_task) give the numbers of one task of
    4 runs bit for bit: run r's numbers depend only on (seed, r).  T cut to 400 to stay quick."""
    from fedbandits.sim.runner import run_experiment

    config = fedbandits.quickstart_config().with_experiment(horizon=400)
    assert task_chunks(config) == [[0, 1], [2, 3]]
    split = run_experiment(config)
    whole = run_experiment(config.with_experiment(runs_per_task=4))
    assert split.tasks == 2 and whole.tasks == 1
    for label, result in whole.algorithms.items():
        for name in ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent"):
            assert np.array_equal(getattr(split.algorithms[label], name), getattr(result, name)), (label, name)
        assert split.algorithms[label].report == result.report, label


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "CONFIG", "--worker", "2"], "unrecognized arguments: --worker 2"),  # was --workers 2 (#47)
        (["tune", "CONFIG", "--gri", "grid.toml"], "the following arguments are required: --grid"),
        (["deploy", "local", "--conf", "CONFIG"], "unrecognized arguments: --conf"),
        (["serve", "demo", "--sec", "1"], "unrecognized arguments: --sec 1"),
    ],
)
def test_abbreviated_options_are_refused_in_one_line(argv, message, tiny_config):  # type: ignore[no-untyped-def]
    """No command takes a prefix of an option for the option: every parser, subcommands' included."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main([str(tiny_config) if a == "CONFIG" else a for a in argv])
    lines = err.getvalue().strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and message in lines[0], lines
