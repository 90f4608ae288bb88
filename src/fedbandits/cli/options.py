"""What several commands share: the parser whose errors are one line, the integer types, the run
and backend options (declared once here, read once here) and the driver's log lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypedDict

from fedbandits.sim.memory import parse_bytes
from fedbandits.sim.results import Results

EXIT_USAGE = 2
EXIT_FAILED = 1


class Parser(argparse.ArgumentParser):
    """Every parser of the command line (subcommands' too): one-line errors, and no abbreviated options
    (``--worker 2`` is refused, not taken as ``--workers 2``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # one line, like every other error of the CLI (argparse would also print the usage)
        self.exit(EXIT_USAGE, f"fedbandits: error: {message} (see `{self.prog} --help`)\n")


def positive_int(text: str) -> int:
    return _integer_from(text, 1)


def nonnegative_int(text: str) -> int:
    return _integer_from(text, 0)


def _integer_from(text: str, low: int) -> int:
    """An option's integer >= ``low``, or argparse's one-line refusal."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
    return value


def backend_options(p: argparse.ArgumentParser, local_workers: str = "1") -> None:
    p.add_argument(
        "--workers",
        type=positive_int,
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
        type=nonnegative_int,
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
    p.add_argument("--runs", type=positive_int, help="override [experiment] runs")
    p.add_argument("--seed", type=nonnegative_int, help="override [experiment] seed")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--transcript",
        action="store_true",
        help="save every message each silo released (private protocols) under DIR/transcript/",
    )


class BackendOptions(TypedDict):
    """Keyword arguments of ``run_experiment`` and ``reproduce`` that choose where tasks run."""

    workers: int | str
    backend: str
    address: str | None
    max_retries: int
    resume: bool
    log: Callable[[str], None]


def backend_kwargs(args: argparse.Namespace) -> BackendOptions:
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
        "log": log,
    }


def max_memory(args: argparse.Namespace) -> int | None:
    """The --max-memory bound in bytes, or None: the available memory."""
    return None if args.max_memory is None else parse_bytes(args.max_memory)


def log(message: str) -> None:
    print(f"fedbandits: {message}", file=sys.stderr)


def warn_clipping(results: Results, entries: dict[str, str] | None = None) -> None:
    """One stderr line per algorithm that clipped more than a few percent of its data (the table
    shows every algorithm's share; this says which bound to raise); ``entries``: run label -> the
    config entry it was made from (the frontier's variants), which then warns once."""
    for line in results.clipping_warnings(entries=entries):
        log(f"warning: {line}")
    for line in results.privacy_unit_warnings():
        log(f"warning: {line}")
