"""The ``fedbandits`` command line.

    fedbandits quickstart                 run the embedded default experiment (2 workers where there are 2 CPUs)
    fedbandits run CONFIG.toml [--out DIR] [--workers N] [--runs N] [--seed S]
                   [--backend local|ray] [--address HOST:PORT] [--resume]
    fedbandits tune CONFIG.toml --grid GRID.toml [--out DIR] [--tuning-seed S] [--tuning-runs N]
                   [--tuning-horizon T] [--workers N] [--backend local|ray] [--address HOST:PORT] [--resume]
                                          choose each entry's hyperparameters on seeds no report uses
    fedbandits plot DIR                   (re)draw the figures of a results folder
    fedbandits frontier CONFIG.toml [--epsilons E1,E2,...] [--grid GRID.toml] [--out DIR] [--workers N] ...
                                          regret against epsilon, with the crossing point (--grid: every
                                          line tuned first, as by `tune`)
    fedbandits list                       every environment, algorithm and protocol name
    fedbandits reproduce NAME|all [--scale quick|paper|published] [--runs N] [--out DIR] [--workers N]
                   [--causes unsettled|all|none] [--powered affordable|none] [--page docs/reproduction.md]
                   [--backend local|ray] [--address HOST:PORT] [--resume] [--max-memory SIZE]
    fedbandits audit privacy [--quick] [--trials N] [--seed S] [--json F]
    fedbandits audit schedule [--algorithm feducb|cdp-fclub-dc] [--trials N] [--agents M] [--epsilon E]
                   [--delta D] [--json FILE]
    fedbandits data export --config C.toml --rounds N --out DIR [--run R] [--format npz|csv] [--max-memory SIZE]
                                          one data file per silo from a run's contexts (docs/data.md)
    fedbandits deploy local|certs|server|silo|shuffler ...  real deployment on Flower (docs/deployment.md)

Any invalid input prints one line ``fedbandits: error: ...`` and exits with status 2; a task
that fails for good (e.g. its Ray worker lost more often than ``--retries``) exits with status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypedDict

from fedbandits import __version__
from fedbandits.api import quickstart_config
from fedbandits.audit.releases import AuditPlan, audit_all
from fedbandits.audit.schedule import AttackSetup, format_table, run_attack
from fedbandits.audit.upload_timing import TimingSetup, run_timing_attack
from fedbandits.config import Config, ConfigError, load_config
from fedbandits.experiments.causes import CAUSE_MODES, causes_mode
from fedbandits.experiments.figures import EXPERIMENTS
from fedbandits.experiments.frontier import (
    DEFAULT_EPSILONS,
    crossings,
    describe_crossing,
    frontier_plan,
    frontier_rows,
    frontier_tune_plan,
    parse_epsilons,
    tuned_frontier,
    tuning_statement,
    write_frontier,
)
from fedbandits.experiments.page import write_page
from fedbandits.experiments.powered import POWERED_MODES, powered_mode
from fedbandits.experiments.reproduce import reproduce, resolve
from fedbandits.experiments.tune import DEFAULT_TUNING_RUNS, RULE, load_grid, run_tuning, tune_plan, write_tuning
from fedbandits.federation.cli import add_deploy_parser, run_deploy
from fedbandits.plots import plot_results
from fedbandits.plugins import BUILTIN, BrokenPlugin
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS
from fedbandits.sim.backends import usable_cpus
from fedbandits.sim.checkpoint import TaskFailedError
from fedbandits.sim.export import export_partition
from fedbandits.sim.memory import parse_bytes
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment

EXIT_USAGE = 2
EXIT_FAILED = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line, like every other error of the CLI (argparse would also print the usage)
        self.exit(EXIT_USAGE, f"fedbandits: error: {message} (see `{self.prog} --help`)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fedbandits",
        description="Differentially private federated linear contextual bandits: simulate, compare, plot.",
        epilog="Start with `fedbandits quickstart`; then copy src/fedbandits/quickstart.toml or an example "
        "from examples/ and edit it (`fedbandits list` shows every name and parameter).",
    )
    parser.add_argument("--version", action="version", version=f"fedbandits {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def backend_options(p: argparse.ArgumentParser, local_workers: str = "1") -> None:
        p.add_argument(
            "--workers",
            type=_positive_int,
            help=f"local: worker processes (default {local_workers}); ray: tasks in flight (default: twice the "
            "cluster's CPUs)",
        )
        p.add_argument(
            "--backend",
            choices=["local", "ray"],
            default="local",
            help="run tasks in local processes (default) or on a Ray cluster (pip install 'fedbandits[ray]')",
        )
        p.add_argument(
            "--address",
            help="with --backend ray: address HOST:PORT of a running Ray cluster (default: start Ray locally)",
        )
        p.add_argument(
            "--retries",
            type=_nonnegative_int,
            help="with --backend ray: times a task whose worker or node was lost is retried (default 3)",
        )
        p.add_argument(
            "--resume",
            action="store_true",
            help="skip the runs already finished in OUT/checkpoint/ (every run writes it as tasks finish)",
        )

    def run_options(p: argparse.ArgumentParser, local_workers: str = "1") -> None:
        p.add_argument("--out", type=Path, help="results folder (default: results/<experiment name>)")
        backend_options(p, local_workers)
        p.add_argument(
            "--max-memory",
            metavar="SIZE",
            help="refuse a config whose tasks would hold more than SIZE (512M, 8G; default: the available memory)",
        )
        p.add_argument("--runs", type=_positive_int, help="override [experiment] runs")
        p.add_argument("--seed", type=_nonnegative_int, help="override [experiment] seed")
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        p.add_argument(
            "--transcript",
            action="store_true",
            help="save every message each silo released (private protocols) under DIR/transcript/",
        )

    p_run = sub.add_parser(
        "run",
        help="run an experiment from a TOML config",
        description="Run an experiment, print a summary table and save results and plots.",
    )
    p_run.add_argument("config", type=Path, metavar="CONFIG.toml", help="experiment configuration")
    run_options(p_run)

    p_quick = sub.add_parser(
        "quickstart",
        help="run the embedded default experiment (under a minute on 2 cores)",
        description="Run the embedded default experiment (GaussianSphere, 20 agents, 4 runs in 2 tasks), on 2 "
        "local worker processes where this machine has 2 CPUs.",
    )
    run_options(p_quick, local_workers="2, or 1 on a 1-CPU machine")

    p_front = sub.add_parser(
        "frontier",
        help="regret against epsilon for every private algorithm of a config, with the reference lines",
        description="Run every private algorithm of CONFIG at every epsilon of a grid, next to independent agents "
        "and the non-private federation (one experiment: common random numbers), and write frontier.csv, "
        "frontier.md and frontier.png with the epsilon from which federation beats going alone. Without --grid the "
        "lines are untuned (the config's values, the library's defaults) and every output says so; with --grid every "
        "line is first tuned by `fedbandits tune`'s rule on a tuning seed, then run on the config's seeds.",
    )
    p_front.add_argument("config", type=Path, metavar="CONFIG.toml", help="experiment configuration")
    p_front.add_argument(
        "--epsilons",
        metavar="E1,E2,...",
        help="the epsilon grid, comma-separated (default: 7 log-spaced values 0.1 ... 10)",
    )
    p_front.add_argument(
        "--grid",
        type=Path,
        metavar="GRID.toml",
        help='tune every line first: [grid."LABEL"] tables as for `fedbandits tune`, one per private entry of CONFIG '
        '(applied at every epsilon) and one each for "independent agents" and "non-private federation" '
        "(docs/tuning.md)",
    )
    p_front.add_argument(
        "--tuning-seed",
        type=_nonnegative_int,
        metavar="S",
        help="with --grid: as for `fedbandits tune` (default 1000, or the next integer that is no report seed)",
    )
    p_front.add_argument(
        "--tuning-runs",
        type=_positive_int,
        metavar="N",
        help=f"with --grid: tuning runs (default {DEFAULT_TUNING_RUNS})",
    )
    p_front.add_argument(
        "--tuning-horizon", type=_positive_int, metavar="T", help="with --grid: horizon of the tuning runs"
    )
    p_front.add_argument("--out", type=Path, help="results folder (default: results/<experiment name>-frontier)")
    backend_options(p_front)
    p_front.add_argument("--max-memory", metavar="SIZE", help="as for `run`")
    p_front.add_argument("--runs", type=_positive_int, help="override [experiment] runs")
    p_front.add_argument("--seed", type=_nonnegative_int, help="override [experiment] seed")
    p_front.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p_tune = sub.add_parser(
        "tune",
        help="choose each algorithm entry's hyperparameters from a grid, on seeds no report uses",
        description="Run every candidate of GRID (per algorithm entry of CONFIG, named by its label: the Cartesian "
        "product of each parameter's list) as one experiment on a tuning seed that is neither the config's seed nor "
        "its noise_seed, pick per entry the smallest mean final pseudo-regret (ties: the first in grid order) and "
        "write OUT/tuned.toml (runnable by `fedbandits run`) and OUT/tune.json (the grid, seed, runs, horizon, rule "
        "and every candidate's scores).",
    )
    p_tune.add_argument("config", type=Path, metavar="CONFIG.toml", help="experiment configuration")
    p_tune.add_argument(
        "--grid",
        type=Path,
        required=True,
        metavar="GRID.toml",
        help='[grid."LABEL"] tables of parameter = [candidate values] (docs/tuning.md)',
    )
    p_tune.add_argument("--out", type=Path, help="output folder (default: results/<experiment name>-tuning)")
    p_tune.add_argument(
        "--tuning-seed",
        type=_nonnegative_int,
        metavar="S",
        help="seed of the tuning runs, environment and noise (default 1000, or the next integer that is no "
        "report seed); refused if it is the config's seed or noise_seed",
    )
    p_tune.add_argument(
        "--tuning-runs", type=_positive_int, metavar="N", help=f"tuning runs (default {DEFAULT_TUNING_RUNS})"
    )
    p_tune.add_argument(
        "--tuning-horizon", type=_positive_int, metavar="T", help="horizon of the tuning runs (default: the config's)"
    )
    backend_options(p_tune)
    p_tune.add_argument("--max-memory", metavar="SIZE", help="as for `run`")
    p_tune.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p_plot = sub.add_parser("plot", help="draw the figures of a results folder")
    p_plot.add_argument("folder", type=Path, metavar="DIR", help="a folder written by `fedbandits run`")

    sub.add_parser("list", help="list environments, algorithms and protocols with their parameters")

    p_rep = sub.add_parser(
        "reproduce",
        help="reproduce a published figure (or all) and write a report",
        description="Run a registered reproduction, draw its figure, check the paper's claims and write DIR/report.md.",
    )

    p_rep.add_argument("name", metavar="NAME|all", help=f"one of {', '.join(EXPERIMENTS)}, or `all`")
    p_rep.add_argument(
        "--scale",
        default="quick",
        help="quick (shrunk; about 3 min with --workers 2 on 2 cores: 5 min of compute, without cause runs, its "
        "default), paper (published settings where one machine holds them, else the "
        "largest scale the report states), published (published settings everywhere: Dubey & Pentland's T = 10^7 "
        "needs a cluster, --backend ray) or tiny",
    )
    p_rep.add_argument("--runs", type=_positive_int, help="override the number of runs")
    p_rep.add_argument("--out", type=Path, default=Path("results/reproduce"), help="output folder")
    p_rep.add_argument(
        "--causes",
        choices=CAUSE_MODES,
        help="when to run a figure's one-change cause runs: when a claim is not reproduced or inconclusive "
        "(they play only those claims' algorithms), always (every claim's algorithms), or never; default: "
        "unsettled at the paper and published scales, none at quick and tiny",
    )
    p_rep.add_argument(
        "--powered",
        choices=POWERED_MODES,
        help="rerun an inconclusive claim with the runs its power statement asks for when that is affordable "
        "(its curves alone, at most an hour of compute each) or never; default: affordable at the paper and "
        "published scales, none at quick and tiny",
    )
    p_rep.add_argument(
        "--page",
        type=Path,
        metavar="FILE",
        help="also write the docs page (e.g. docs/reproduction.md, PNGs in docs/reproduction/)",
    )
    backend_options(p_rep)
    p_rep.add_argument("--max-memory", metavar="SIZE", help="as for `run`, for every figure")
    p_rep.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p_audit = sub.add_parser(
        "audit",
        help="run a privacy attack and report what it certifies",
        description="Empirical privacy audits. `privacy`: every private mode (FedLinUCB ldp / ldp-prefix / "
        "sdp-amplification, lazy and not; FedUCB's Privatizer with both schedules; decentralized FedUCB; "
        "CDP-FCLUB-DC) on neighbouring datasets built to be worst cases, one table with a Clopper-Pearson lower "
        "bound on epsilon and a verdict per mode; exits 1 if a mode labelled 'formal' is violated "
        "(docs/privacy.md). `schedule`: the sync-schedule side channel of FedUCB "
        "(Zhou & Chowdhury 2023, Example 3.1) against FedUCB and Private-FedLinUCB, side by side; with "
        "`--algorithm cdp-fclub-dc`: the upload-timing side channel of CDP-FCLUB-DC (Liu et al. 2022, Eq. 5) "
        "seen by the global server, with a control (docs/clustering.md).",
    )
    p_audit.add_argument("attack", choices=["privacy", "schedule"], help="the audit to run")
    p_audit.add_argument(
        "--quick",
        action="store_true",
        help="privacy: 500 counted trials per mode (about a minute) instead of the full audit's 5000",
    )
    p_audit.add_argument(
        "--algorithm",
        choices=["feducb", "cdp-fclub-dc"],
        help="schedule: feducb (default: FedUCB vs Private-FedLinUCB) or cdp-fclub-dc (upload timing)",
    )
    p_audit.add_argument(
        "--trials",
        type=_positive_int,
        help="schedule: paired trials (default 2000); privacy: counted trials per dataset of each mode (>= 10)",
    )
    p_audit.add_argument(
        "--agents",
        type=_positive_int,
        help="silos M >= 2 (default 2); with cdp-fclub-dc: local servers L >= 1 (default 1)",
    )
    p_audit.add_argument(
        "--dim", type=_positive_int, help="feature dimension (default 5; with cdp-fclub-dc: d >= 2, default 2)"
    )
    p_audit.add_argument("--seed", type=_nonnegative_int, default=0, help="seed (default 0)")
    p_audit.add_argument("--epsilon", type=float, help="schedule: claimed epsilon (default 1)")
    p_audit.add_argument("--delta", type=float, help="schedule: claimed delta (default 0.1)")
    p_audit.add_argument(
        "--threshold-c",
        type=float,
        help="C / L^2 in (0, 1) (default 0.5); with cdp-fclub-dc: c, one user of norm^2 > c L^2 triggers",
    )
    p_audit.add_argument("--json", type=Path, help="also write the results as JSON to this file")

    p_data = sub.add_parser(
        "data",
        help="data files of the data-files environment",
        description="Data files of the `data-files` environment (one file per silo; docs/data.md).",
    )
    data_sub = p_data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=_Parser, required=True)
    p_export = data_sub.add_parser(
        "export",
        help="write each agent's contexts of one simulated run as a data file per silo",
        description="Play ROUNDS rounds of run R of the config's environment (the simulator's seed for that run) "
        "and write agent i's features and expected rewards to DIR/silo-<i>.<format>.",
    )
    p_export.add_argument("--config", type=Path, required=True, metavar="C.toml", help="experiment configuration")
    p_export.add_argument("--rounds", type=_positive_int, required=True, metavar="N", help="rounds (users per file)")
    p_export.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    p_export.add_argument("--run", type=_nonnegative_int, default=0, metavar="R", help="run index (default 0)")
    p_export.add_argument("--format", choices=["npz", "csv"], default="npz", help="file format (default npz)")
    p_export.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="refuse an export that would hold more than SIZE (512M, 8G; default: the available memory)",
    )

    add_deploy_parser(sub)
    return parser


#: options of `audit schedule` only, with their defaults
SCHEDULE_OPTIONS = {
    "algorithm": "feducb",
    "agents": None,
    "dim": None,
    "epsilon": 1.0,
    "delta": 0.1,
    "threshold_c": 0.5,
}


def _audit(args: argparse.Namespace) -> int:
    if args.attack == "privacy":
        given = [name for name in SCHEDULE_OPTIONS if getattr(args, name) is not None]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(f"{flags}: only for `audit schedule` (`audit privacy` takes --quick, --trials, --seed)")
        return _audit_privacy(args)
    if args.quick:
        raise ValueError("--quick is only for `audit privacy`")
    for name, default in SCHEDULE_OPTIONS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.trials is None:
        args.trials = 2000
    if args.algorithm == "cdp-fclub-dc":
        return _audit_upload_timing(args)
    import json
    from dataclasses import asdict

    setup = AttackSetup(
        trials=args.trials,
        agents=2 if args.agents is None else args.agents,
        dim=5 if args.dim is None else args.dim,
        seed=args.seed,
        epsilon=args.epsilon,
        delta=args.delta,
        threshold_c=args.threshold_c,
    )
    results = run_attack(setup)
    print(
        f"schedule side channel: silo 1 sees only whether a sync followed round 1 and its own user; "
        f"{setup.trials} paired trials, M={setup.agents}, C={setup.threshold_c} L^2"
    )
    print(format_table(results))
    refuted = [r.target for r in results if r.epsilon_lower_bound > r.claimed_epsilon]
    print(
        "claims refuted (eps lower bound > claimed eps, 95% confidence): " + (", ".join(refuted) if refuted else "none")
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"setup": asdict(setup), "results": [asdict(r) for r in results]}, indent=2))
    return 0


def _audit_privacy(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict, replace

    plan = AuditPlan.quick() if args.quick else AuditPlan.full()
    if args.trials is not None:
        if args.trials < 10:
            raise ValueError(f"--trials must be >= 10 for the privacy audit, got {args.trials}")
        plan = replace(plan, trials=args.trials)
    plan = replace(plan, seed=args.seed)
    rows = audit_all(plan)
    print(
        f"privacy audit: each mode's real code on neighbouring datasets, {plan.trials} counted trials per dataset "
        f"(as many fit the test), lower bounds at {1 - plan.alpha:.0%} confidence"
    )
    print(format_table(rows))
    broken = [r.mode for r in rows if r.guarantee == "formal" and r.verdict == "violated"]
    print("'formal' modes violated: " + (", ".join(broken) if broken else "none"))
    if args.json is not None:
        payload = {"plan": asdict(plan), "rows": [asdict(r) | {"verdict": r.verdict} for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 1 if broken else 0


def _audit_upload_timing(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    setup = TimingSetup(
        trials=args.trials,
        servers=1 if args.agents is None else args.agents,
        dim=2 if args.dim is None else args.dim,
        seed=args.seed,
        epsilon=args.epsilon,
        delta=args.delta,
        threshold_c=args.threshold_c,
    )
    results = run_timing_attack(setup)
    print(
        f"upload-timing side channel of cdp-fclub-dc: the global server sees only when the victim's local cluster "
        f"uploads; {setup.trials} paired trials, L={setup.servers}, d={setup.dim}, U: one user of norm^2 > "
        f"{setup.threshold_c} L^2 triggers after 3 uploads (noise-free)"
    )
    print(format_table(results))
    confidence = f"{1 - setup.alpha:.0%} confidence"
    for claim, value in (("claimed eps", "claimed_epsilon"), ("reported eps spent", "reported_epsilon")):
        refuted = [r.target for r in results if r.epsilon_lower_bound > getattr(r, value)]
        print(f"{claim} refuted (eps lower bound > it, {confidence}): " + (", ".join(refuted) if refuted else "none"))
    if args.json is not None:
        args.json.write_text(json.dumps({"setup": asdict(setup), "results": [asdict(r) for r in results]}, indent=2))
    return 0


class _BackendOptions(TypedDict):
    """Keyword arguments of ``run_experiment`` and ``reproduce`` that choose where tasks run."""

    workers: int | str
    backend: str
    address: str | None
    max_retries: int
    resume: bool
    log: Callable[[str], None]


def _backend_kwargs(args: argparse.Namespace) -> _BackendOptions:
    """The --backend/--address/--retries/--workers/--resume options, checked together."""
    if args.backend != "ray":
        for option, value in (("--address", args.address), ("--retries", args.retries)):
            if value is not None:
                raise ValueError(f"{option} is only for --backend ray")
    return {
        "workers": "auto" if args.workers is None else args.workers,
        "backend": args.backend,
        "address": args.address,
        "max_retries": 3 if args.retries is None else args.retries,
        "resume": args.resume,
        "log": _log,
    }


def _max_memory(args: argparse.Namespace) -> int | None:
    """The --max-memory bound in bytes, or None: the available memory."""
    return None if args.max_memory is None else parse_bytes(args.max_memory)


def _log(message: str) -> None:
    print(f"fedbandits: {message}", file=sys.stderr)


def _warn_clipping(results: Results, entries: dict[str, str] | None = None) -> None:
    """One stderr line per algorithm that clipped more than a few percent of its data (the table
    shows every algorithm's share; this says which bound to raise); ``entries``: run label -> the
    config entry it was made from (the frontier's variants), which then warns once."""
    for line in results.clipping_warnings(entries=entries):
        _log(f"warning: {line}")


def _reproduce(args: argparse.Namespace) -> int:
    resolve(args.name, args.scale, args.runs)  # unknown name / scale: one-line error before any run
    backend = _backend_kwargs(args)
    outcomes = reproduce(
        args.name,
        args.scale,
        runs=args.runs,
        out=args.out,
        progress=not args.no_progress,
        max_memory=_max_memory(args),
        causes=args.causes,
        powered=args.powered,
        **backend,
    )
    for o in outcomes:
        statuses = ", ".join(
            r.status if (p := o.powered_result(i)) is None else f"{r.status} ({p.runs} fresh runs: {p.result.status})"
            for i, r in enumerate(o.claims)
        )
        print(f"{o.experiment.name} ({o.experiment.figure}): {o.total_seconds:.1f} s; claims: {statuses}")
    print(f"report: {args.out / 'report.md'}")
    if args.page is not None:
        powered = powered_mode(args.powered, args.scale)
        causes = causes_mode(args.causes, args.scale)
        command = " ".join(["fedbandits reproduce", args.name, "--scale", args.scale, "--causes", causes])
        options = (("--powered", powered), ("--runs", args.runs), ("--page", args.page))
        command += "".join(f" {flag} {value}" for flag, value in options if value)
        print(f"page: {write_page(outcomes, args.scale, command, args.page, causes, powered)}")
    return 0


#: the quickstart's local workers without --workers: one per task of its 2, as far as the CPUs go
QUICKSTART_WORKERS = 2


def _run(config: Config, args: argparse.Namespace, local_workers: int = 1) -> int:
    """``run`` and ``quickstart``; ``local_workers``: the local backend's workers without --workers
    (at most the CPUs this process may use)."""
    overrides = {k: v for k, v in (("runs", args.runs), ("seed", args.seed)) if v is not None}
    if overrides:
        config = config.with_experiment(**overrides)
    out = args.out if args.out is not None else Path("results") / config.experiment.name
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    backend = _backend_kwargs(args)
    if args.workers is None and args.backend == "local" and local_workers > 1:
        backend["workers"] = min(local_workers, usable_cpus())
    results = run_experiment(
        config,
        progress=not args.no_progress,
        record_transcript=args.transcript,
        checkpoint=out / "checkpoint",
        max_memory=_max_memory(args),
        **backend,
    )
    results.save(out)
    figures = plot_results(results, out)
    exp = config.experiment
    print(
        f"{exp.name}: {config.environment.name}, M={config.environment.params.agents}, "
        f"T={exp.horizon}, {exp.runs} run(s), {results.wall_seconds:.1f} s"
    )
    print(results.table())
    _warn_clipping(results)
    print(f"results: {out}/ (summary.json, regret_curves.csv, {', '.join(f.name for f in figures)})")
    return 0


def _frontier(args: argparse.Namespace) -> int:
    epsilons = DEFAULT_EPSILONS if args.epsilons is None else parse_epsilons(args.epsilons)
    if args.grid is None:
        for option, value in (
            ("--tuning-seed", args.tuning_seed),
            ("--tuning-runs", args.tuning_runs),
            ("--tuning-horizon", args.tuning_horizon),
        ):
            if value is not None:
                raise ValueError(f"{option} is only for --grid (a frontier without a grid tunes nothing)")
    config = load_config(args.config)
    overrides = {k: v for k, v in (("runs", args.runs), ("seed", args.seed)) if v is not None}
    if overrides:
        config = config.with_experiment(**overrides)
    plan = frontier_plan(config, epsilons)
    # every check before anything runs: the grid against the frontier's lines, the seeds, the options
    tune = None
    if args.grid is not None:
        runs = DEFAULT_TUNING_RUNS if args.tuning_runs is None else args.tuning_runs
        grid = load_grid(args.grid)
        tune = frontier_tune_plan(plan, grid, seed=args.tuning_seed, runs=runs, horizon=args.tuning_horizon)
    out = args.out if args.out is not None else Path("results") / plan.config.experiment.name
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    backend = _backend_kwargs(args)
    max_memory = _max_memory(args)
    if tune is not None:
        tuning = run_tuning(
            tune,
            checkpoint=out / "tune" / "checkpoint",
            progress=not args.no_progress,
            max_memory=max_memory,
            **backend,
        )
        write_tuning(tuning, out / "tune", str(args.config), str(args.grid))
        print(f"rule: {RULE}")
        print(tuning.table())
        plan = tuned_frontier(plan, tuning)
    results = run_experiment(
        plan.config,
        progress=not args.no_progress,
        checkpoint=out / "checkpoint",
        max_memory=max_memory,
        **backend,
    )
    results.save(out)
    paths = write_frontier(plan, results, out)
    print(results.table())
    _warn_clipping(results, {label: base for label, (base, _) in plan.variants.items()})
    print(tuning_statement(plan))
    for base, point in crossings(plan, frontier_rows(plan, results)).items():
        print(f"{base}: beats independent agents {describe_crossing(point, epsilons)} ({plan.caption()})")
    print(f"frontier: {', '.join(str(p) for p in paths)}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    grid = load_grid(args.grid)
    runs = DEFAULT_TUNING_RUNS if args.tuning_runs is None else args.tuning_runs
    plan = tune_plan(config, grid, seed=args.tuning_seed, runs=runs, horizon=args.tuning_horizon)
    out = args.out if args.out is not None else Path("results") / f"{config.experiment.name}-tuning"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    backend = _backend_kwargs(args)
    tuning = run_tuning(
        plan,
        checkpoint=out / "checkpoint",
        progress=not args.no_progress,
        max_memory=_max_memory(args),
        **backend,
    )
    toml_path, json_path = write_tuning(tuning, out, str(args.config), str(args.grid))
    exp = plan.tuning.experiment
    print(
        f"tuned {len(grid)} entr{'y' if len(grid) == 1 else 'ies'} of {args.config}: {len(plan.candidates)} "
        f"candidate(s), {exp.runs} run(s) of T = {exp.horizon} on tuning seed {plan.seed}, "
        f"{tuning.results.wall_seconds:.1f} s"
    )
    print(f"rule: {RULE}")
    print(tuning.table())
    print(f"tuned config: {toml_path} (record: {json_path})")
    return 0


def _data_export(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} exists and is not a folder")
    paths = export_partition(config, args.out, args.rounds, run=args.run, fmt=args.format, max_memory=_max_memory(args))
    print(
        f"wrote {len(paths)} data file(s) of {args.rounds} users each (run {args.run} of "
        f"{config.environment.name}): {', '.join(str(p) for p in paths)}"
    )
    return 0


def _list() -> int:
    broken: list[BrokenPlugin] = []
    for title, table in (("environments", ENVIRONMENTS), ("algorithms", ALGORITHMS), ("protocols", PROTOCOLS)):
        print(f"{title}:")
        for entry in table.values():
            origin = table.origin(entry.name)
            tag = "" if origin == BUILTIN else f" [plugin: {origin}]"
            print(f"  {entry.name:<20} {entry.description}{tag}")
            for name, default, help_text in entry.parameters():
                shown = "auto" if default is None else repr(default)  # None: resolved from the other fields
                print(f"      {name:<14} = {shown:<12} {help_text}")
        print()
        broken += table.broken
    if broken:
        print("broken plugins (not usable; the built-ins are unaffected):")
        for plugin in broken:
            print(f"  {plugin.message()}")
        print()
    return 0


#: commands whose driver starts worker processes
WORK_COMMANDS = ("run", "quickstart", "reproduce", "frontier", "tune", "audit")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM takes the SIGINT path: worker pools are stopped, not orphaned


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the commands that start worker processes: SIGTERM stops them like SIGINT (the deployment
    # commands supervise their own processes and signals)
    previous = None
    if args.command in WORK_COMMANDS and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(parser, args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        if args.command == "run":
            return _run(load_config(args.config), args)
        if args.command == "quickstart":
            return _run(quickstart_config(), args, local_workers=QUICKSTART_WORKERS)
        if args.command == "frontier":
            return _frontier(args)
        if args.command == "tune":
            return _tune(args)
        if args.command == "plot":
            paths = plot_results(Results.load(args.folder), args.folder)
            print("wrote " + ", ".join(str(p) for p in paths))
            return 0
        if args.command == "list":
            return _list()
        if args.command == "reproduce":
            return _reproduce(args)
        if args.command == "audit":
            return _audit(args)
        if args.command == "data":
            return _data_export(args)
        if args.command == "deploy":
            return run_deploy(args)
        parser.print_help()
        return EXIT_USAGE
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"fedbandits: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TaskFailedError as exc:
        print(f"fedbandits: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        resumable = args.command in ("run", "quickstart", "reproduce", "frontier", "tune")
        hint = "; rerun with --resume to skip the finished runs" if resumable else ""
        print(f"fedbandits: interrupted{hint}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
