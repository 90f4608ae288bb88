"""``fedbandits evaluate``: a config's entries, and the logging and uniform policies, on logged data.

    fedbandits evaluate CONFIG.toml (--logs SILO.npz [SILO.npz ...] | --serve-logs STATE_DIR [...]
        | --obd FOLDER [--behavior random]
        [--campaign all] [--silos-by COLUMN|campaign] [--features items|shared]) [--split M]
        [--tune GRID.toml [--tune-share 0.5]] [--estimators dm,ips,snips,dr]
        [--interval normal|bootstrap] [--resamples 1000] [--seed 0] [--json FILE] [--figure FILE.png]
    fedbandits evaluate --check-estimators --obd FOLDER [--campaign all] [--bts-prior FILE] [--draws N]

The log is the environment: the config's ``[environment]`` table is not read (it may be left out).
docs/evaluation.md explains the methods and their limits.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from fedbandits.cli.options import nonnegative_int, positive_int
from fedbandits.config import Config, ConfigError, config_from_dict
from fedbandits.evaluation.csv_log import read_csv_log
from fedbandits.evaluation.estimators import ESTIMATORS, INTERVALS
from fedbandits.evaluation.logs import BanditLog, concatenate, read_npz
from fedbandits.evaluation.obd import BEHAVIORS, CAMPAIGNS, FEATURES, read_obd, read_obd_campaigns
from fedbandits.evaluation.obd_check import check, format_check
from fedbandits.evaluation.report import evaluate_config, format_table, write_figure, write_json
from fedbandits.evaluation.serve_log import read_serve_log
from fedbandits.evaluation.tuned import tune_on_log
from fedbandits.experiments.tune import load_grid


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "evaluate",
        help="evaluate a config's entries on logged bandit data (replay), beside the logging policy",
        description="Off-policy evaluation on logged data: each config entry replayed (Li et al. 2011; "
        "rejection-sampled for a non-uniform logger, Dudik et al. 2012), the logging policy's own value and "
        "the uniform policy's DM / IPS / SNIPS / DR estimates, each with a 95%% interval (docs/evaluation.md).",
    )
    p.add_argument("config", type=Path, nargs="?", metavar="CONFIG.toml", help="its [[algorithms]] are replayed")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--logs", type=Path, nargs="+", metavar="SILO.npz|.csv", help="one generic log per silo (.npz or .csv)"
    )
    source.add_argument("--obd", type=Path, metavar="FOLDER", help="the Open Bandit Dataset's folder, as shipped")
    source.add_argument(
        "--serve-logs",
        type=Path,
        nargs="+",
        metavar="STATE_DIR",
        help="serving silos' state folders, one per silo (serve silo --log-candidates)",
    )
    p.add_argument("--behavior", choices=BEHAVIORS, default="random", help="with --obd: the logging policy")
    p.add_argument("--campaign", choices=CAMPAIGNS, default="all", help="with --obd: the campaign")
    p.add_argument(
        "--silos-by",
        metavar="COLUMN",
        help="with --obd: one silo per value of this column, or 'campaign': the three campaigns as silos",
    )
    p.add_argument(
        "--features",
        choices=FEATURES,
        help="with --obd: 'items' (one-hot item + affinity, d = K + 1; the default) or 'shared' (constant, "
        "item_feature_0, affinity: d = 3, the same meaning in every campaign; --silos-by campaign's)",
    )
    p.add_argument("--split", type=positive_int, metavar="M", help="deal the rounds to M silos (seeded by --seed)")
    p.add_argument(
        "--tune",
        type=Path,
        metavar="GRID.toml",
        help="tune the entries (fedbandits tune's grid) by replay on the first --tune-share of every silo's "
        "rounds, and report the tuned config on the rest",
    )
    p.add_argument(
        "--tune-share", type=float, default=0.5, help="with --tune: the share of the rounds tuned on (default 0.5)"
    )
    p.add_argument(
        "--estimators",
        default=",".join(ESTIMATORS),
        help=f"the uniform policy's estimators, comma-separated (default {','.join(ESTIMATORS)})",
    )
    p.add_argument("--interval", choices=INTERVALS, default="normal", help="the estimators' intervals")
    p.add_argument("--resamples", type=positive_int, default=1000, help="with --interval bootstrap (default 1000)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="cross-fitting, bootstrap, split, rejections")
    p.add_argument("--json", type=Path, help="also write the table as JSON to this file")
    p.add_argument("--figure", type=Path, metavar="FILE.png", help="also draw the table: values and intervals")
    p.add_argument(
        "--check-estimators",
        action="store_true",
        help="with --obd: each logging policy's value against its estimates from the other's log (no config)",
    )
    p.add_argument("--bts-prior", type=Path, help="with --check-estimators: BTS's published Beta parameters")
    p.add_argument(
        "--draws", type=positive_int, default=100_000, help="with --bts-prior: rankings drawn (default 100,000)"
    )


def load_log(args: argparse.Namespace) -> BanditLog:
    """The log the options name, with its silos (checked)."""
    if args.obd is None:
        if args.silos_by is not None or args.features is not None:
            raise ValueError("--silos-by and --features go with --obd")
        if args.serve_logs is not None:
            logs = []
            for folder in args.serve_logs:
                read = read_serve_log(folder)
                left = f"{read.unrewarded} unrewarded, {read.without_candidates} without candidates"
                print(f"{folder}: {read.log.n} rewarded decisions with their candidates ({left}: left out)")
                logs.append(read.log)
            log = concatenate(logs)
        else:
            log = concatenate([read_csv_log(path) if path.suffix == ".csv" else read_npz(path) for path in args.logs])
    elif args.silos_by == "campaign":
        if args.features == "items":
            raise ValueError("--silos-by campaign: the campaigns share no item: their silos take --features shared")
        log = read_obd_campaigns(args.obd, args.behavior)
    else:
        log = read_obd(args.obd, args.behavior, args.campaign, args.silos_by, args.features or "items")
    if args.split is not None:
        if len(log.silo_names) > 1:
            raise ValueError("--split deals one log to M silos: give one log, without --silos-by")
        if args.split > log.n:
            raise ValueError(f"--split {args.split}: the log has {log.n} rounds")
        log = log.dealt(args.split, args.seed)
    return log


def load_config(path: Path) -> Config:
    """The config with its ``[environment]`` replaced: the log is the environment."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    table["environment"] = {"name": "gaussian-sphere"}  # validated, never built: the log replaces it
    return config_from_dict(table)


def evaluate(args: argparse.Namespace) -> int:
    estimators = tuple(name.strip() for name in args.estimators.split(",") if name.strip())
    unknown = [name for name in estimators if name not in ESTIMATORS]
    if unknown or not estimators:
        raise ValueError(f"--estimators: each of {', '.join(ESTIMATORS)}, got {args.estimators!r}")
    if args.check_estimators:
        return check_estimators(args, estimators)
    if args.bts_prior is not None:
        raise ValueError("--bts-prior goes with --check-estimators")
    if args.config is None:
        raise ValueError("give CONFIG.toml (its entries are replayed), or --check-estimators with --obd")
    config = load_config(args.config)
    log = load_log(args)
    tuning = None
    if args.tune is not None:
        tuning = tune_on_log(config, load_grid(args.tune), log, share=args.tune_share, seed=args.seed)
        print("\n".join(tuning.lines()))
        config, log = tuning.config, tuning.report
    elif args.tune_share != 0.5:
        raise ValueError("--tune-share goes with --tune")
    rows = evaluate_config(
        config,
        log,
        estimators=estimators,
        interval=args.interval,
        resamples=args.resamples,
        seed=args.seed,
    )
    print(format_table(rows, log))
    if args.json is not None:
        write_json(args.json, rows, log, None if tuning is None else tuning.record())
    if args.figure is not None:
        write_figure(args.figure, rows, log)
    return 0


def check_estimators(args: argparse.Namespace, estimators: tuple[str, ...]) -> int:
    """The Open Bandit Dataset's evaluation of the estimators (:mod:`fedbandits.evaluation.obd_check`)."""
    if args.obd is None or args.config is not None:
        raise ValueError("--check-estimators takes --obd FOLDER and no CONFIG.toml")
    rows = check(args.obd, args.campaign, prior=args.bts_prior, estimators=estimators, draws=args.draws, seed=args.seed)
    print(format_check(rows, args.campaign, args.draws))
    if args.bts_prior is None:
        print("(BTS from Random's log needs --bts-prior: BTS's published Beta parameters, docs/evaluation.md)")
    return 0
