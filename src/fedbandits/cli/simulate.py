"""``fedbandits run``, ``quickstart``, ``plot``, ``list`` and ``data export``: a configured simulation
and what it reads and writes."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedbandits.api import quickstart_config
from fedbandits.cli.options import (
    Parser,
    backend_kwargs,
    max_memory,
    nonnegative_int,
    positive_int,
    run_options,
    warn_clipping,
)
from fedbandits.config import Config, load_config
from fedbandits.plots import plot_results
from fedbandits.plugins import BUILTIN, BrokenPlugin
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS
from fedbandits.sim.backends import usable_cpus
from fedbandits.sim.export import export_partition
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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

    p_plot = sub.add_parser("plot", help="draw the figures of a results folder")
    p_plot.add_argument("folder", type=Path, metavar="DIR", help="a folder written by `fedbandits run`")

    sub.add_parser("list", help="list environments, algorithms and protocols with their parameters")

    p_data = sub.add_parser(
        "data",
        help="data files of the data-files environment",
        description="Data files of the `data-files` environment (one file per silo; docs/data.md).",
    )
    data_sub = p_data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=Parser, required=True)
    p_export = data_sub.add_parser(
        "export",
        help="write each agent's contexts of one simulated run as a data file per silo",
        description="Play ROUNDS rounds of run R of the config's environment (the simulator's seed for that run) "
        "and write agent i's features and expected rewards to DIR/silo-<i>.<format>.",
    )
    p_export.add_argument("--config", type=Path, required=True, metavar="C.toml", help="experiment configuration")
    p_export.add_argument("--rounds", type=positive_int, required=True, metavar="N", help="rounds (users per file)")
    p_export.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    p_export.add_argument("--run", type=nonnegative_int, default=0, metavar="R", help="run index (default 0)")
    p_export.add_argument("--format", choices=["npz", "csv"], default="npz", help="file format (default npz)")
    p_export.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="refuse an export that would hold more than SIZE (512M, 8G; default: the available memory)",
    )


def run(args: argparse.Namespace) -> int:
    return run_config(load_config(args.config), args)


def quickstart(args: argparse.Namespace) -> int:
    return run_config(quickstart_config(), args, local_workers=QUICKSTART_WORKERS)


def plot(args: argparse.Namespace) -> int:
    paths = plot_results(Results.load(args.folder), args.folder)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


#: the quickstart's local workers without --workers: one per task of its 2, as far as the CPUs go
QUICKSTART_WORKERS = 2


def run_config(config: Config, args: argparse.Namespace, local_workers: int = 1) -> int:
    """``run`` and ``quickstart``; ``local_workers``: the local backend's workers without --workers
    (at most the CPUs this process may use)."""
    overrides = {k: v for k, v in (("runs", args.runs), ("seed", args.seed)) if v is not None}
    if overrides:
        config = config.with_experiment(**overrides)
    out = args.out if args.out is not None else Path("results") / config.experiment.name
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    backend = backend_kwargs(args)
    if args.workers is None and args.backend == "local" and local_workers > 1:
        backend["workers"] = min(local_workers, usable_cpus())
    results = run_experiment(
        config,
        progress=not args.no_progress,
        record_transcript=args.transcript,
        checkpoint=out / "checkpoint",
        max_memory=max_memory(args),
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
    warn_clipping(results)
    print(f"results: {out}/ (summary.json, regret_curves.csv, {', '.join(f.name for f in figures)})")
    return 0


def data(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} exists and is not a folder")
    paths = export_partition(config, args.out, args.rounds, run=args.run, fmt=args.format, max_memory=max_memory(args))
    print(
        f"wrote {len(paths)} data file(s) of {args.rounds} users each (run {args.run} of "
        f"{config.environment.name}): {', '.join(str(p) for p in paths)}"
    )
    return 0


def list_names(args: argparse.Namespace) -> int:
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
