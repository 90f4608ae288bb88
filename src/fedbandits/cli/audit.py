"""``fedbandits audit``: empirical privacy audits and the schedule and upload-timing side channels."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedbandits.audit.releases import AuditPlan, audit_all
from fedbandits.audit.schedule import AttackSetup, format_table, run_attack
from fedbandits.audit.upload_timing import TimingSetup, run_timing_attack
from fedbandits.cli.options import nonnegative_int, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
        type=positive_int,
        help="schedule: paired trials (default 2000); privacy: counted trials per dataset of each mode (>= 10)",
    )
    p_audit.add_argument(
        "--agents",
        type=positive_int,
        help="silos M >= 2 (default 2); with cdp-fclub-dc: local servers L >= 1 (default 1)",
    )
    p_audit.add_argument(
        "--dim", type=positive_int, help="feature dimension (default 5; with cdp-fclub-dc: d >= 2, default 2)"
    )
    p_audit.add_argument("--seed", type=nonnegative_int, default=0, help="seed (default 0)")
    p_audit.add_argument("--epsilon", type=float, help="schedule: claimed epsilon (default 1)")
    p_audit.add_argument("--delta", type=float, help="schedule: claimed delta (default 0.1)")
    p_audit.add_argument(
        "--threshold-c",
        type=float,
        help="C / L^2 in (0, 1) (default 0.5); with cdp-fclub-dc: c, one user of norm^2 > c L^2 triggers",
    )
    p_audit.add_argument("--json", type=Path, help="also write the results as JSON to this file")


#: options of `audit schedule` only, with their defaults
SCHEDULE_OPTIONS = {
    "algorithm": "feducb",
    "agents": None,
    "dim": None,
    "epsilon": 1.0,
    "delta": 0.1,
    "threshold_c": 0.5,
}


def audit(args: argparse.Namespace) -> int:
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
