"""A deployment's outcome as the simulator's :class:`~fedbandits.sim.results.Results` (same summary table)."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from fedbandits.algorithms.fedlinucb import RETURNING_NOT_COVERED
from fedbandits.federation.server import Coordinator
from fedbandits.federation.spec import DeploySpec
from fedbandits.federation.wire import WITHHELD
from fedbandits.privacy.guarantee import NOT_FORMAL
from fedbandits.sim.results import AlgorithmResult, Results
from fedbandits.sim.task import time_grid


def delivered_guarantee(spec: DeploySpec, coord: Coordinator) -> dict[str, object]:
    """``distributed-dp``: what the worst round delivered (fewest silos' shares arrived), and the
    guarantee withdrawn if that exceeds the target (more silos missing than ``dropouts`` provisions)."""
    cal = spec.distributed()
    rounds = coord.state.rounds
    # rounds that closed without data (nobody answered, or the dropped masks could not be removed)
    # released no one's data: they do not lower the guarantee
    present = min((len(r.accepted) for r in rounds if r.accepted), default=spec.silos)
    delivered = cal.epsilon_with(present - cal.colluders)
    out: dict[str, object] = {
        "epsilon_delivered": delivered,
        "min_present": present,
        "short_rounds": sum(1 for r in rounds if len(r.missing) > cal.dropouts),
        "secure_aggregation_epochs": coord.state.epochs,
    }
    if delivered > cal.epsilon * (1.0 + 1e-9):
        out["guarantee"] = NOT_FORMAL
        out["guarantee_reason"] = (
            f"a round closed with {present} of {spec.silos} silos, more missing than the {cal.dropouts} dropouts "
            f"the noise was provisioned for: epsilon delivered {delivered:.6g} > target {cal.epsilon:g}"
        )
    return out


def deployment_results(spec: DeploySpec, coord: Coordinator, wall: float) -> Results:
    """One run of the deployed entry.  Regret comes from the silos' trial reports, which a silo sends
    only if its operator opted in (``share-report``); without every silo's report the regret is not
    available (NaN, ``report["regret_available"] = False``), never a made-up zero.  Messages and
    bytes are what the server measured on the wire (uplink + downlink)."""
    config = spec.config
    grid = time_grid(spec.horizon, config.experiment.grid_points)
    M = spec.silos
    s = coord.state
    shared = {silo: rep for silo, rep in s.reports.items() if WITHHELD not in rep}
    withheld = sorted(silo for silo, rep in s.reports.items() if WITHHELD in rep)
    complete = not withheld  # a silo that never answered counts 0 and is listed as missing
    curves = np.zeros((1, grid.size)) if complete else np.full((1, grid.size), np.nan)
    per_agent = np.zeros((1, M))
    per_agent[0, withheld] = np.nan
    for silo, rep in shared.items():
        if complete:
            curves[0] += rep["curve"]
        per_agent[0, silo] = rep["curve"][-1]
    alg = config.algorithms[spec.algorithm_index]
    report: dict[str, object] = {
        "batch": spec.batch,
        "reg": spec.regularizer(),
        **spec.privacy_report(),
        "deployment": "flower",
        "wire_bytes_uplink": s.uplink_bytes,
        "wire_bytes_downlink": s.downlink_bytes,
        "payload_bytes_uplink": s.payload_bytes,
        "rejected_messages": s.rejections,
        "server_restarts": s.restarts,
        "rounds_with_missing_silos": sum(1 for r in s.rounds if r.missing),
        "silos_missing_report": [i for i in range(M) if i not in s.reports],
        "silos_withholding_report": withheld,
        "regret_available": complete,
    }
    if spec.masked:
        report.update(delivered_guarantee(spec, coord))
    if spec.private:
        # a silo's policy checks every user it serves against the bounds: served users are the
        # denominator of the clipped shares (over the silos that shared their report)
        report["observations"] = sum(int(r["served"]) for r in shared.values())
        report.update(
            {
                key: sum(int(r[key]) for r in shared.values())
                for key in ("clipped_features", "clipped_rewards", "psd_repairs", "dropped_contributions")
            }
        )
        # the unit of privacy, as the simulator's report states it: user-level (contributions beyond the cap
        # dropped), or per interaction -- with the warning when a silo's users came back
        visits = max((int(r["max_user_visits"]) for r in shared.values()), default=0)
        if spec.params.privacy_unit == "user":
            report["privacy_unit"] = spec.params.privacy_spec().unit()
        else:
            report["privacy_unit"] = RETURNING_NOT_COVERED if visits > 1 else "interaction"
        if visits:
            report["max_user_visits"] = visits
        report["feature_norm_max"] = max((float(r["feature_norm_max"]) for r in shared.values()), default=0.0)
    result = AlgorithmResult(
        name=alg.name,
        label=alg.label,
        curves=curves,
        per_agent=per_agent,
        sync_rounds=np.array([s.completed]),
        messages=np.array([s.uplink_messages + s.downlink_messages], dtype=np.float64),  # as the simulator's
        bytes_sent=np.array([s.uplink_bytes + s.downlink_bytes], dtype=np.float64),
        seconds=wall,
        report=report,
    )
    # the one entry as deployed, with the noise stream it drew from (position 0 is stream 0 by default)
    stream = None if spec.noise_stream == 0 else spec.noise_stream
    one = replace(config.with_experiment(runs=1), algorithms=(replace(alg, noise_stream=stream),))
    return Results(
        config=one,
        grid=grid,
        algorithms={alg.label: result},
        wall_seconds=wall,
        env_seconds=0.0,
        workers_cpu=os.cpu_count() or 1,
    )
