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
from collections.abc import Callable

from fedbandits.cli import audit, evaluate, experiments, simulate
from fedbandits.cli.deploy import run_deploy
from fedbandits.cli.options import EXIT_FAILED, EXIT_USAGE
from fedbandits.cli.parser import build_parser
from fedbandits.cli.serve import run_serve
from fedbandits.config import ConfigError
from fedbandits.sim.checkpoint import TaskFailedError

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


#: every command's handler (args -> exit status), by command group
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": simulate.run,
    "quickstart": simulate.quickstart,
    "plot": simulate.plot,
    "list": simulate.list_names,
    "data": simulate.data,
    "frontier": experiments.frontier,
    "tune": experiments.tune,
    "reproduce": experiments.reproduce,
    "audit": audit.audit,
    "evaluate": evaluate.evaluate,
    "deploy": run_deploy,
    "serve": run_serve,
}


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        handler = COMMANDS.get(args.command)
        if handler is not None:
            return handler(args)
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
