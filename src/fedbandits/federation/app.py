"""The Flower ServerApp and ClientApp that carry Private-FedLinUCB (needs ``fedbandits[deploy]``).

Messages (Flower Message API, one per silo per synchronisation):

* server -> silo ``train``: ConfigRecord ``meta`` {phase "sync", round k, digest, prefix_round
  k-1, spec (the deployment spec as JSON)}, ArrayRecord ``synced`` {"prefix": the synced
  prefix after k-1} (absent for k = 1);
* silo -> server reply: ``meta`` {silo_id, digest, phase, round}, ArrayRecord {"psum": the
  silo's released noisy p-sum (``ldp``) or exact batch statistics (``none``)}; with
  ``sdp-amplification`` the p-sum goes to the shuffler instead
  (:mod:`fedbandits.federation.shuffler`) and the reply carries no arrays: the server takes the
  round's anonymous batch from the shuffler when the round closes;
* server -> silo ``evaluate`` (phase "finish") with the last prefix; the reply is the silo's
  trial report (regret curve on the time grid and counts).

Nothing else crosses the network.  Message sizes are measured as the bytes of the objects Flower
serialises and ships (before TLS framing).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedbandits.federation.server import WITHHELD, Coordinator, Incoming, validate_release
from fedbandits.federation.silo import Silo, SiloError, check_pinned_spec
from fedbandits.federation.spec import atomic_write_bytes, spec_from_json

log = logging.getLogger("fedbandits.federation")

server_app = ServerApp()
client_app = ClientApp()


def wire_bytes(obj: Any) -> int:
    """Bytes of every serialised object Flower ships for a message (its content tree)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(o.deflate()) for o in get_all_nested_objects(obj).values())


def _file_logger(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger("fedbandits")
    root.setLevel(logging.INFO)
    if not any(isinstance(h, logging.FileHandler) and h.baseFilename == str(path) for h in root.handlers):
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)


def _arrays(record: ArrayRecord | None) -> dict[str, np.ndarray] | None:
    if record is None:
        return None
    return {key: arr.numpy() for key, arr in record.items()}


def _incoming(msg: Message) -> Incoming:
    node = int(msg.metadata.src_node_id)
    if msg.has_error():
        return Incoming(node, None, None, error=f"{msg.error.code}: {msg.error.reason}")
    content = msg.content
    meta = dict(content["meta"]) if "meta" in content.config_records else None
    arrays: dict[str, np.ndarray] = {}
    for name in content.array_records:
        arrays.update(_arrays(content.array_records[name]) or {})
    return Incoming(node, meta, arrays, wire_bytes=wire_bytes(content))


# ================================================================ server ===================
@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    state_dir = Path(str(cfg["state-dir"]))
    _file_logger(state_dir / "server.log")
    try:
        _serve(grid, cfg, state_dir, context.run_id)
    except Exception:
        # first line: the Flower run, so that a launcher can ignore a dying earlier run's failure
        atomic_write_bytes(state_dir / "error.txt", f"run {context.run_id}\n{traceback.format_exc()}".encode())
        log.exception("server failed")
        raise


def _serve(grid: Grid, cfg: dict[str, Any], state_dir: Path, run_id: int) -> None:
    spec_json = Path(str(cfg["spec-file"])).read_text()
    spec = spec_from_json(spec_json)
    round_timeout = float(cfg["round-timeout"])
    join_timeout = float(cfg["join-timeout"])
    poll = float(cfg.get("poll-interval", 0.2))
    registry_file = str(cfg.get("registry-file", ""))
    registry = None
    if registry_file:
        registry = {int(node): int(silo) for node, silo in json.loads(Path(registry_file).read_text()).items()}
    coord = Coordinator(spec, state_dir)
    shuffler = None
    if spec.shuffled:
        from fedbandits.federation.shuffler import ShufflerClient

        shuffler = ShufflerClient.from_config(cfg)
    started = time.time()
    log.info("server up (run %s): %s, M=%d silos, K=%d synchronisations", run_id, spec.label, spec.silos, spec.releases)

    # bounded wait for the silos to connect
    deadline = time.time() + join_timeout
    while True:
        nodes = _targets(grid, registry)
        if len(nodes) >= spec.silos or time.time() > deadline:
            break
        time.sleep(poll)
    if not nodes:
        raise RuntimeError(f"no silo connected within {join_timeout:.0f} s")
    log.info("%d of %d silos connected", len(nodes), spec.silos)

    for k in range(coord.next_round, spec.releases + 1):
        meta = {"phase": "sync", "round": k, "digest": spec.digest, "prefix_round": k - 1, "spec": spec_json}
        replies = _exchange(grid, coord, registry, "train", meta, k, round_timeout, poll)
        accepted: dict[int, np.ndarray] = {}
        rejected: list[tuple[int, str]] = []
        seen: set[int] = set()
        for inc in replies:
            res = validate_release(spec, inc, phase="sync", round_=k, registry=registry, seen=seen, width=coord.width)
            if isinstance(res, str):
                log.warning("round %d: rejected a message from node %d: %s", k, inc.node_id, res)
                rejected.append((inc.node_id, res))
                continue
            seen.add(res[0])
            accepted[res[0]] = res[1]  # type: ignore[assignment]
        if shuffler is None:
            coord.close_round(k, accepted, rejected)
            log.info("round %d closed: silos %s accepted, %d rejected", k, sorted(accepted), len(rejected))
        else:
            # the p-sums went to the shuffler; it permutes them once and hands over the batch
            batch, withheld, size = shuffler.close(spec.digest, k, coord.width, patience=round_timeout)
            if not np.isfinite(batch).all() or len(batch) > spec.silos:
                raise RuntimeError(f"round {k}: the shuffler's batch is malformed (shape {batch.shape})")
            if withheld:
                log.warning("round %d: the shuffler withheld the batch (fewer messages than the guarantee needs)", k)
            coord.state.shuffler_bytes += size
            coord.close_shuffled_round(k, batch, sorted(accepted), rejected)
            log.info(
                "round %d closed: %d shuffled message(s); silos %s acknowledged, %d rejected",
                k,
                len(batch),
                sorted(accepted),
                len(rejected),
            )

    # finish: last prefix down, trial reports up
    if not coord.state.finished:
        meta = {
            "phase": "finish",
            "round": spec.releases + 1,
            "digest": spec.digest,
            "prefix_round": spec.releases,
            "spec": spec_json,
        }
        replies = _exchange(grid, coord, registry, "evaluate", meta, spec.releases + 1, round_timeout, poll)
        from fedbandits.sim.runner import time_grid

        points = time_grid(spec.horizon, spec.config.experiment.grid_points).size
        seen = set()
        for inc in replies:
            res = validate_release(
                spec,
                inc,
                phase="finish",
                round_=spec.releases + 1,
                registry=registry,
                seen=seen,
                width=coord.width,
                curve_points=points,
            )
            if isinstance(res, str):
                log.warning("finish: rejected a report from node %d: %s", inc.node_id, res)
                coord.state.rejections += 1
                continue
            seen.add(res[0])
            coord.state.reports[res[0]] = res[1]  # type: ignore[assignment]
        coord.state.finished = True
        coord.save()
    from fedbandits.federation.results import deployment_results

    results = deployment_results(spec, coord, time.time() - started)
    results.save(state_dir / "results")
    summary = {
        "run_id": str(run_id),
        "table": results.table(),
        "completed": coord.state.completed,
        "reports": sorted(coord.state.reports),
        "rejections": coord.state.rejections,
        "uplink_messages": coord.state.uplink_messages,
        "downlink_messages": coord.state.downlink_messages,
        "uplink_bytes": coord.state.uplink_bytes,
        "downlink_bytes": coord.state.downlink_bytes,
        "payload_bytes": coord.state.payload_bytes,
        "shuffler_bytes": coord.state.shuffler_bytes,
        "restarts": coord.state.restarts,
        "missing": {r.round: r.missing for r in coord.state.rounds if r.missing},
    }
    atomic_write_bytes(state_dir / "done.json", json.dumps(summary, indent=2).encode())
    log.info("deployment finished\n%s", results.table())


def _targets(grid: Grid, registry: dict[int, int] | None) -> list[int]:
    nodes = sorted(int(n) for n in grid.get_node_ids())
    if registry is not None:
        nodes = [n for n in nodes if n in registry]
    return nodes


def _exchange(
    grid: Grid,
    coord: Coordinator,
    registry: dict[int, int] | None,
    message_type: str,
    meta: dict[str, Any],
    round_: int,
    timeout: float,
    poll: float,
) -> list[Incoming]:
    """Send one request to every connected silo; collect replies until all arrive or the deadline."""
    nodes = _targets(grid, registry)
    content = RecordDict({"meta": ConfigRecord(meta)})
    prefix = coord.state.prefix
    if prefix is not None:
        content["synced"] = ArrayRecord({"prefix": Array(np.ascontiguousarray(prefix))})
    size = wire_bytes(content)
    messages = [
        # time to live = the round's deadline: a reply after it is not used, and a request that
        # outlives its round could be served late by a silo that rejoins (a wasted release)
        Message(content, dst_node_id=n, message_type=message_type, group_id=str(round_), ttl=timeout)
        for n in nodes
    ]
    pushed = list(grid.push_messages(messages))
    coord.state.downlink_messages += len(messages)
    coord.state.downlink_bytes += size * len(messages)
    dest = {mid: n for mid, n in zip(pushed, nodes, strict=True) if mid is not None}
    ids = set(dest)
    out: list[Incoming] = []
    deadline = time.time() + timeout
    while ids and time.time() < deadline:
        for msg in grid.pull_messages(ids):
            ids.discard(msg.metadata.reply_to_message_id)
            if _no_answer(msg):
                # the SuperLink's own notice that the silo did not answer (request expired,
                # node offline): the silo is missing this round, it sent nothing to reject
                node = dest.get(msg.metadata.reply_to_message_id)
                who = f"silo {registry[node]} (node {node})" if registry and node in registry else f"node {node}"
                reason = str(msg.error.reason or "").split(" - ")[0]
                log.warning("round %d: %s did not answer (%s)", round_, who, reason)
                continue
            inc = _incoming(msg)
            coord.state.uplink_messages += 1
            coord.state.uplink_bytes += inc.wire_bytes
            out.append(inc)
        if ids:
            time.sleep(poll)
    if ids:
        log.warning("round %d: %d silo(s) did not answer within %.0f s", round_, len(ids), timeout)
    return out


def _no_answer(msg: Message) -> bool:
    """An error reply made by the SuperLink itself (not by a silo) saying that no reply exists."""
    return (
        msg.has_error()
        and int(msg.metadata.src_node_id) == SUPERLINK_NODE_ID
        and msg.error.code
        in (ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE)
    )


# ================================================================ silo =====================
def _silo(context: Context, meta: dict[str, Any]) -> Silo:
    node = context.node_config
    state_dir = Path(str(node["state-dir"]))
    _file_logger(state_dir / "silo.log")
    spec = spec_from_json(str(meta["spec"]))
    if spec.digest != meta.get("digest"):
        raise SiloError("the request's config hash does not match its spec")
    check_pinned_spec(spec, node.get("spec-digest"))
    data_file = str(node.get("data-file", "")) or None
    # secret noise and no trial report unless the silo's operator asked otherwise (node config)
    noise = str(node.get("noise-source", "os"))
    share = str(node.get("share-report", "false")).lower() == "true"
    return Silo(spec, int(node["silo-id"]), state_dir, noise, data_file, share_report=share)


def _meta_int(meta: dict[str, Any], key: str) -> int:
    """An integer field of a request (the silo trusts nothing it receives)."""
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SiloError(f"request field {key!r} must be an integer, got {value!r}")
    return value


def _faults(context: Context) -> dict[int, str]:
    """Test hook (node config ``inject-fault``, e.g. "nan@2,replay@3"): misbehave in given rounds."""
    text = str(context.node_config.get("inject-fault", ""))
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, _, at = item.partition("@")
        out[int(at)] = kind
    return out


def _patience(context: Context) -> float:
    value = context.node_config.get("shuffler-patience", 30.0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 30.0


def _reply(msg: Message, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Message:
    content = RecordDict({"meta": ConfigRecord(meta)})
    if arrays:
        content["data"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    return Message(content, reply_to=msg)


@client_app.train()
def silo_sync(msg: Message, context: Context) -> Message:
    meta = dict(msg.content["meta"])
    silo = _silo(context, meta)
    k = _meta_int(meta, "round")
    arrays = _arrays(msg.content.array_records.get("synced")) if "synced" in msg.content.array_records else None
    prefix = arrays["prefix"] if arrays else None
    psum = silo.release(k, prefix, _meta_int(meta, "prefix_round"))
    out_meta = {"silo_id": silo.silo_id, "digest": silo.spec.digest, "phase": "sync", "round": k}
    fault = _faults(context).get(k)
    if silo.spec.shuffled:
        # the p-sum goes to the shuffler (mutual TLS); the server only hears that it was sent
        from fedbandits.federation.shuffler import ShufflerClient

        shuffler = ShufflerClient.from_config(context.node_config)
        status = shuffler.send(silo.silo_id, silo.spec.digest, k, psum, patience=_patience(context))
        log.info("silo %d: release %d handed to the shuffler (%s)", silo.silo_id, k, status)
        if fault == "leak":  # test hook: a silo that also sends its p-sum to the server
            return _reply(msg, out_meta, {"psum": psum})
        return _reply(msg, out_meta, {})
    if fault == "nan":
        psum = psum.copy()
        psum[0] = np.nan
    elif fault == "shape":
        psum = psum[:-1].copy()
    elif fault == "replay" and k > 1:
        out_meta["round"] = k - 1
        psum = silo.state.messages[k - 1]
    if fault:
        log.warning("silo %d: injecting fault %r in round %d (test hook)", silo.silo_id, fault, k)
    return _reply(msg, out_meta, {"psum": psum})


@client_app.evaluate()
def silo_finish(msg: Message, context: Context) -> Message:
    meta = dict(msg.content["meta"])
    silo = _silo(context, meta)
    arrays = _arrays(msg.content.array_records.get("synced")) if "synced" in msg.content.array_records else None
    report = silo.finish(arrays["prefix"] if arrays else None, _meta_int(meta, "prefix_round"))
    out_meta = {
        "silo_id": silo.silo_id,
        "digest": silo.spec.digest,
        "phase": "finish",
        "round": _meta_int(meta, "round"),
    }
    if report is None:  # the operator did not opt in: acknowledge without a report
        return _reply(msg, {**out_meta, "report": WITHHELD}, {})
    curve = report.pop("curve")
    return _reply(msg, {**out_meta, **report}, {"curve": curve})
