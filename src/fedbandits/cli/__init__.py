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
    fedbandits serve silo|server|demo ...  live decisions over HTTP, durable, synced privately (docs/serving.md)

Any invalid input prints one line ``fedbandits: error: ...`` and exits with status 2; a task
that fails for good (e.g. its Ray worker lost more often than ``--retries``) exits with status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from fedbandits.api import quickstart_config
from fedbandits.audit.releases import AuditPlan, audit_all
from fedbandits.audit.schedule import AttackSetup, format_table, run_attack
from fedbandits.audit.upload_timing import TimingSetup, run_timing_attack
from fedbandits.cli.parser import EXIT_FAILED, EXIT_USAGE, build_parser
from fedbandits.config import Config, ConfigError, load_config
from fedbandits.experiments.causes import causes_mode
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
from fedbandits.experiments.powered import powered_mode
from fedbandits.experiments.reproduce import reproduce, resolve
from fedbandits.experiments.tune import DEFAULT_TUNING_RUNS, RULE, load_grid, run_tuning, tune_plan, write_tuning
from fedbandits.federation.cli import run_deploy
from fedbandits.plots import plot_results
from fedbandits.plugins import BUILTIN, BrokenPlugin
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS
from fedbandits.serve.cli import run_serve
from fedbandits.sim.backends import usable_cpus
from fedbandits.sim.checkpoint import TaskFailedError
from fedbandits.sim.export import export_partition
from fedbandits.sim.memory import parse_bytes
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment

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
    for line in results.privacy_unit_warnings():
        _log(f"warning: {line}")


def _reproduce(args: argparse.Namespace) -> int:
    resolve(args.name, args.scale, args.runs)  # unknown name / scale: one-line error before any run
    backend = _backend_kwargs(args)
    started = time.perf_counter()
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
        if args.command == "serve":
            return run_serve(args)
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
