"""The ``fedbandits`` command line's parser: every command, option and type check (the commands
themselves are in :mod:`fedbandits.cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from fedbandits import __version__
from fedbandits.experiments.causes import CAUSE_MODES
from fedbandits.experiments.figures import EXPERIMENTS
from fedbandits.experiments.powered import POWERED_MODES
from fedbandits.experiments.tune import DEFAULT_TUNING_RUNS
from fedbandits.federation.cli import add_deploy_parser
from fedbandits.serve.cli import add_serve_parser

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
    add_serve_parser(sub)
    return parser
