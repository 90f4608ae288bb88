"""``fedbandits frontier``, ``tune`` and ``reproduce``: experiments made of many configured runs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fedbandits.cli.options import (
    backend_kwargs,
    backend_options,
    max_memory,
    nonnegative_int,
    positive_int,
    warn_clipping,
)
from fedbandits.config import load_config
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
from fedbandits.experiments.reproduce import reproduce as reproduce_experiments
from fedbandits.experiments.reproduce import resolve
from fedbandits.experiments.tune import DEFAULT_TUNING_RUNS, RULE, load_grid, run_tuning, tune_plan, write_tuning
from fedbandits.sim.runner import run_experiment


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    _frontier_parser(sub)
    _tune_parser(sub)
    _reproduce_parser(sub)


def _frontier_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
        type=nonnegative_int,
        metavar="S",
        help="with --grid: as for `fedbandits tune` (default 1000, or the next integer that is no report seed)",
    )
    p_front.add_argument(
        "--tuning-runs",
        type=positive_int,
        metavar="N",
        help=f"with --grid: tuning runs (default {DEFAULT_TUNING_RUNS})",
    )
    p_front.add_argument(
        "--tuning-horizon", type=positive_int, metavar="T", help="with --grid: horizon of the tuning runs"
    )
    p_front.add_argument("--out", type=Path, help="results folder (default: results/<experiment name>-frontier)")
    backend_options(p_front)
    p_front.add_argument("--max-memory", metavar="SIZE", help="as for `run`")
    p_front.add_argument("--runs", type=positive_int, help="override [experiment] runs")
    p_front.add_argument("--seed", type=nonnegative_int, help="override [experiment] seed")
    p_front.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _tune_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
        type=nonnegative_int,
        metavar="S",
        help="seed of the tuning runs, environment and noise (default 1000, or the next integer that is no "
        "report seed); refused if it is the config's seed or noise_seed",
    )
    p_tune.add_argument(
        "--tuning-runs", type=positive_int, metavar="N", help=f"tuning runs (default {DEFAULT_TUNING_RUNS})"
    )
    p_tune.add_argument(
        "--tuning-horizon", type=positive_int, metavar="T", help="horizon of the tuning runs (default: the config's)"
    )
    backend_options(p_tune)
    p_tune.add_argument("--max-memory", metavar="SIZE", help="as for `run`")
    p_tune.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _reproduce_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    p_rep.add_argument("--runs", type=positive_int, help="override the number of runs")
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


def reproduce(args: argparse.Namespace) -> int:
    resolve(args.name, args.scale, args.runs)  # unknown name / scale: one-line error before any run
    backend = backend_kwargs(args)
    started = time.perf_counter()
    outcomes = reproduce_experiments(
        args.name,
        args.scale,
        runs=args.runs,
        out=args.out,
        progress=not args.no_progress,
        max_memory=max_memory(args),
        causes=args.causes,
        powered=args.powered,
        **backend,
    )
    wall = time.perf_counter() - started
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
        print(f"page: {write_page(outcomes, args.scale, command, args.page, causes, powered, wall)}")
    return 0


def frontier(args: argparse.Namespace) -> int:
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
    backend = backend_kwargs(args)
    memory = max_memory(args)
    if tune is not None:
        tuning = run_tuning(
            tune,
            checkpoint=out / "tune" / "checkpoint",
            progress=not args.no_progress,
            max_memory=memory,
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
        max_memory=memory,
        **backend,
    )
    results.save(out)
    paths = write_frontier(plan, results, out)
    print(results.table())
    warn_clipping(results, {label: base for label, (base, _) in plan.variants.items()})
    print(tuning_statement(plan))
    for base, point in crossings(plan, frontier_rows(plan, results)).items():
        print(f"{base}: beats independent agents {describe_crossing(point, epsilons)} ({plan.caption()})")
    print(f"frontier: {', '.join(str(p) for p in paths)}")
    return 0


def tune(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    grid = load_grid(args.grid)
    runs = DEFAULT_TUNING_RUNS if args.tuning_runs is None else args.tuning_runs
    plan = tune_plan(config, grid, seed=args.tuning_seed, runs=runs, horizon=args.tuning_horizon)
    out = args.out if args.out is not None else Path("results") / f"{config.experiment.name}-tuning"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    backend = backend_kwargs(args)
    tuning = run_tuning(
        plan,
        checkpoint=out / "checkpoint",
        progress=not args.no_progress,
        max_memory=max_memory(args),
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
