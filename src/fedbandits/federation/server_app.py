"""The deployment's ServerApp: the server's side of the Flower app (needs ``fedbandits[deploy]``).

It drives the rounds of :class:`~fedbandits.federation.server.Coordinator` over Flower's grid: each
round's requests to the silos, their replies validated, secure aggregation's phases for
``distributed-dp``, the shuffler's batch for ``sdp-amplification``.  The messages are described in
:mod:`fedbandits.federation.wire`.
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
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedbandits.crypto.double_masking import Advert, Masked, Reveal, SignedRoster
from fedbandits.crypto.secure_aggregation import KEY_BYTES, SHARE_BYTES
from fedbandits.crypto.signing import Authority
from fedbandits.federation.deployment_results import deployment_results
from fedbandits.federation.server import Coordinator, Incoming, validate_release
from fedbandits.federation.shuffler_client import ShufflerClient
from fedbandits.federation.spec import atomic_write_bytes, spec_from_json
from fedbandits.federation.wire import arrays_of, byte_list, file_logger, int_list, wire_bytes
from fedbandits.sim.task import time_grid

log = logging.getLogger("fedbandits.federation")

#: seconds after a round's requests expire before the server's last pull of their replies
FINAL_PULL_MARGIN = 1.0
#: with ``reask``, a silo still silent this fraction of the round's deadline (and at least
#: NUDGE_FLOOR s) after its request, while its node is online and half of the silos have answered
#: (else half the deadline), is asked once more (see :func:`_exchange`)
NUDGE_FRACTION, NUDGE_FLOOR = 1 / 6, 10.0

#: a silo's node config for secure aggregation's signatures (distributed-dp)

server_app = ServerApp()


def _incoming(msg: Message) -> Incoming:
    node = int(msg.metadata.src_node_id)
    if msg.has_error():
        return Incoming(node, None, None, error=f"{msg.error.code}: {msg.error.reason}")
    content = msg.content
    meta = dict(content["meta"]) if "meta" in content.config_records else None
    arrays: dict[str, np.ndarray] = {}
    for name in content.array_records:
        arrays.update(arrays_of(content.array_records[name]) or {})
    return Incoming(node, meta, arrays, wire_bytes=wire_bytes(content))


# ================================================================ server ===================
@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    state_dir = Path(str(cfg["state-dir"]))
    file_logger(state_dir / "server.log")
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
    ca = str(cfg.get("signing-ca", ""))
    coord = Coordinator(spec, state_dir, Authority.load(ca) if ca else None)
    shuffler = None
    if spec.shuffled:
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
        if spec.masked:
            _masked_round(grid, coord, registry, spec_json, k, round_timeout, poll)
            continue
        meta = {"phase": "sync", "round": k, "digest": spec.digest, "prefix_round": k - 1, "spec": spec_json}
        replies = _exchange(grid, coord, registry, "train", meta, k, round_timeout, poll, reask=True)
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
        replies = _exchange(grid, coord, registry, "evaluate", meta, spec.releases + 1, round_timeout, poll, reask=True)
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
    results = deployment_results(spec, coord, time.time() - started)
    results.save(state_dir / "results")
    clipping = results.clipping_warnings()
    summary = {
        "run_id": str(run_id),
        "table": results.table(),
        "clipping_warnings": clipping,
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
    for line in clipping:
        log.warning("%s", line)


def _collect(
    coord: Coordinator, registry: dict[int, int] | None, replies: list[Incoming], phase: str, k: int
) -> tuple[dict[int, tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """Validated secure-aggregation replies: silo -> (node, meta), and the rejected ones."""
    out: dict[int, tuple[int, dict[str, Any]]] = {}
    rejected: list[tuple[int, str]] = []
    for inc in replies:
        res = validate_release(
            coord.spec, inc, phase=phase, round_=k, registry=registry, seen=set(out), width=coord.width
        )
        if isinstance(res, str):
            log.warning("round %d (%s): rejected a message from node %d: %s", k, phase, inc.node_id, res)
            rejected.append((inc.node_id, res))
        else:
            out[res[0]] = (inc.node_id, res[1])  # type: ignore[assignment]
    return out, rejected


def _roster_meta(roster: SignedRoster) -> dict[str, Any]:
    members = roster.members
    return {
        "epoch": roster.epoch,
        "threshold": roster.threshold,
        "members": members,
        "c_public": [roster.c_public[i] for i in members],
        "s_public": [roster.s_public[i] for i in members],
        "certs": [roster.certs[i] for i in members],
        "signatures": [roster.signatures[i] for i in members],
    }


def _masked_round(
    grid: Grid,
    coord: Coordinator,
    registry: dict[int, int] | None,
    spec_json: str,
    k: int,
    timeout: float,
    poll: float,
) -> None:
    """One ``distributed-dp`` synchronisation: key set-up if the epoch needs one, masked releases,
    the consistency check, the unmask step, the decoded sum (module docstring)."""
    spec = coord.spec
    base = {"round": k, "digest": spec.digest, "prefix_round": k - 1, "spec": spec_json}
    rejected: list[tuple[int, str]] = []
    roster_meta: dict[str, Any] = {}

    def ask(
        meta: dict[str, Any], phase: str, only: list[int], per_node: dict[int, dict[str, Any]] | None = None
    ) -> dict[int, tuple[int, dict[str, Any]]]:
        got, bad = _collect(
            coord,
            registry,
            _exchange(
                grid, coord, registry, "query", {**base, **meta, "phase": phase}, k, timeout, poll, per_node, only=only
            ),
            phase,
            k,
        )
        rejected.extend(bad)
        return got

    if coord.needs_epoch(_targets(grid, registry)):
        epoch = coord.next_epoch
        adverts = {}
        got = ask({"epoch": epoch}, "keys", _targets(grid, registry))
        for silo, (node, meta) in got.items():
            advert = Advert(*(meta.get(key) for key in ("c_public", "s_public", "cert", "signature")))  # type: ignore[arg-type]
            refused = coord.check_advert(silo, advert)
            if refused is None:
                adverts[silo] = advert
            else:
                log.warning("round %d: refused the keys of silo %d: %s", k, silo, refused)
                rejected.append((node, refused))
        if not adverts:
            log.warning("round %d: no silo answered the secure-aggregation key set-up; closing without data", k)
            coord.close_without_data(k, rejected)
            return
        coord.start_epoch(adverts, [got[silo][0] for silo in adverts])
    coord.open_masked_round(k)
    secagg = coord.state.secagg
    assert secagg is not None and secagg.roster is not None
    epoch, t = secagg.epoch, secagg.roster.threshold
    if coord.delivered_epoch != epoch:  # the epoch's first request from this process carries the roster
        roster_meta = {f"roster_{key}": value for key, value in _roster_meta(secagg.roster).items()}
    replies = _exchange(
        grid, coord, registry, "train", {**base, "phase": "sync", "epoch": epoch, **roster_meta}, k, timeout, poll
    )
    coord.delivered_epoch = epoch
    nodes: dict[int, int] = {}
    for inc in replies:
        res = validate_release(
            coord.spec, inc, phase="sync", round_=k, registry=registry, seen=set(), width=coord.width
        )
        if isinstance(res, str):
            reason: str | None = res
        else:
            meta = inc.meta or {}
            to, blobs = int_list(meta, "b_to"), byte_list(meta, "b_blobs")
            if to is None or blobs is None or len(to) != len(blobs):
                reason = f"silo {res[0]}: self-mask shares must pair b_to (integers) with b_blobs (bytes)"
            else:
                message = Masked(res[1], dict(zip(to, blobs, strict=True)), meta.get("b_commit"))  # type: ignore[arg-type]
                reason = coord.accept_masked(res[0], meta.get("epoch"), k, message)
                if reason is None:
                    nodes[res[0]] = inc.node_id
        if reason is not None:
            log.warning("round %d: rejected a message from node %d: %s", k, inc.node_id, reason)
            rejected.append((inc.node_id, reason))
    survivors = coord.close_messages()
    dropped = coord.dropped()
    if len(survivors) < t:
        log.warning("round %d: %d masked message(s), fewer than t = %d; closing without data", k, len(survivors), t)
        coord.close_without_data(k, rejected)
        return
    # consistency check (only if somebody dropped: round seeds are revealed only on a signed list)
    if dropped:
        for silo, (node, meta) in ask(
            {"epoch": epoch, "survivors": survivors}, "survivors", [nodes[i] for i in survivors]
        ).items():
            refused = coord.accept_signature(silo, meta.get("signature"))
            if refused is not None:
                rejected.append((node, refused))
    signers = sorted(secagg.signatures)
    if dropped and len(signers) < t:
        log.warning("round %d: %d survivor signature(s), fewer than t = %d; closing without data", k, len(signers), t)
        coord.close_without_data(k, rejected)
        return
    unmask = {
        "epoch": epoch,
        "survivors": survivors,
        "dropped": dropped,
        "signers": signers,
        "signatures": [secagg.signatures[i] for i in signers],
    }
    per_node = {}
    for silo in survivors:
        held = secagg.shares_for(silo)
        per_node[nodes[silo]] = {"held_from": sorted(held), "held": [held[j] for j in sorted(held)]}
    reveals: dict[int, Reveal] = {}
    for silo, (node, meta) in ask(unmask, "unmask", [nodes[i] for i in survivors], per_node).items():
        owners, shares = int_list(meta, "b_owners"), byte_list(meta, "b_shares", SHARE_BYTES)
        seed_for, seeds = int_list(meta, "seed_for"), byte_list(meta, "seeds", KEY_BYTES)
        if None in (owners, shares, seed_for, seeds) or len(owners) != len(shares) or len(seed_for) != len(seeds):  # type: ignore[arg-type]
            rejected.append((node, f"silo {silo}: an unmask answer pairs b_owners with b_shares, seed_for with seeds"))
            continue
        reveals[silo] = Reveal(dict(zip(owners, shares, strict=True)), dict(zip(seed_for, seeds, strict=True)))  # type: ignore[arg-type]
    coord.close_masked_round(k, reveals, rejected)
    log.info(
        "round %d closed: %d masked message(s), dropped %s, %d signature(s), %d unmask answer(s), %d rejected",
        k, len(survivors), dropped, len(signers), len(reveals), len(rejected),
    )  # fmt: skip


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
    per_node: dict[int, dict[str, Any]] | None = None,
    reask: bool = False,
    nudge_after: float | None = None,
    only: list[int] | None = None,
) -> list[Incoming]:
    """Send one request to every connected silo (``only``: to those of these nodes; ``per_node``:
    extra meta for some nodes); collect replies until all arrive or the deadline.

    With ``reask``, a silo whose node goes offline during the round (the SuperLink's notice: it
    crashed after taking the request, or before) is waited for until the deadline and asked again
    as soon as it is back: a restarted silo answers a request it had already served with the
    message it stored before replying, byte for byte (:class:`~fedbandits.federation.silo.Silo`),
    so asking twice is never a second release.  The cost: a round in which a silo dies for good
    waits until its deadline.

    Also with ``reask``, a silo whose node is online but silent ``nudge_after`` seconds after its
    request (default: :data:`NUDGE_FRACTION` of the deadline, at least :data:`NUDGE_FLOOR` s) is
    asked once more when at least half of the silos asked have answered -- or, if fewer have, once
    half the deadline has passed (a whole federation slow to start is no reason for a second
    ClientApp on every silo, but several silos held back at once, or a single silo, must be asked).
    A Flower 1.42 SuperNode sends a reply only after its *next* pull of a request, and one that
    was pulling a request when the server crashed keeps a dead task whose reply takes that turn:
    from then on every reply waits for the following request (seen in the chaos test: the silo
    missed every round after the server's restart).  The second request releases the held reply; its own reply
    is the one held next, to a request nobody pulls.  Whichever reply of a silo arrives first is
    taken; the silo's other requests are dropped from the round."""
    prefix = coord.state.prefix
    deadline = time.time() + timeout  # reset after the first push (requests created before it)
    dest: dict[str, int] = {}
    ids: set[str] = set()
    pushed_at: dict[int, float] = {}
    if nudge_after is None:
        nudge_after = max(timeout * NUDGE_FRACTION, NUDGE_FLOOR)
    nudge = nudge_after if reask else float("inf")
    nudged: set[int] = set()
    answered: set[int] = set()

    def content(node: int) -> RecordDict:
        out = RecordDict({"meta": ConfigRecord({**meta, **(per_node or {}).get(node, {})})})
        if prefix is not None:
            out["synced"] = ArrayRecord({"prefix": Array(np.ascontiguousarray(prefix))})
        return out

    def push(nodes: list[int], ttl: float) -> None:
        contents = [content(n) for n in nodes]
        messages = [
            # time to live = the round's deadline: a reply after it is not used, and a request that
            # outlives its round could be served late by a silo that rejoins (a wasted release)
            Message(c, dst_node_id=n, message_type=message_type, group_id=str(round_), ttl=ttl)
            for c, n in zip(contents, nodes, strict=True)
        ]
        pushed = list(grid.push_messages(messages))
        coord.state.downlink_messages += len(messages)
        coord.state.downlink_bytes += sum(wire_bytes(c) for c in contents)
        now = time.time()
        for mid, n in zip(pushed, nodes, strict=True):
            pushed_at[n] = now
            if mid is not None:
                dest[mid] = n
                ids.add(mid)

    out: list[Incoming] = []
    gone: set[int] = set()  # nodes that went offline during the round (reask only)

    def who(node: int | None) -> str:
        return f"silo {registry[node]} (node {node})" if registry and node in registry else f"node {node}"

    def pull() -> None:
        for msg in grid.pull_messages(ids):
            ids.discard(msg.metadata.reply_to_message_id)
            if _no_answer(msg):
                # the SuperLink's own notice that the silo did not answer (request expired,
                # node offline): the silo is missing this round, it sent nothing to reject
                node = dest.get(msg.metadata.reply_to_message_id)
                reason = str(msg.error.reason or "").split(" - ")[0]
                if node in answered:  # the notice of a silo's other request: its answer is in
                    continue
                if reask and node is not None and msg.error.code == ErrorCode.NODE_UNAVAILABLE:
                    gone.add(node)
                    log.warning(
                        "round %d: %s went offline; asked again if it is back within the deadline", round_, who(node)
                    )
                    continue
                log.warning("round %d: %s did not answer (%s)", round_, who(node), reason)
                continue
            node = dest.get(msg.metadata.reply_to_message_id)
            if node is not None:
                if node in answered:  # a silo answered both its request and the repeat: one is enough
                    continue
                answered.add(node)
                gone.discard(node)  # (its other request's offline notice may have come first)
                ids.difference_update([m for m in ids if dest[m] == node])
            inc = _incoming(msg)
            coord.state.uplink_messages += 1
            coord.state.uplink_bytes += inc.wire_bytes
            out.append(inc)

    push(_targets(grid, registry) if only is None else sorted(set(only) & set(_targets(grid, registry))), timeout)
    deadline = time.time() + timeout  # after the requests' expiry (created before the push, ttl = timeout)
    while (ids or gone) and time.time() < deadline:
        pull()
        if gone:
            back = sorted(gone & set(_targets(grid, registry)))
            left = deadline - time.time()
            if back and left > 1.0:
                gone.difference_update(back)
                log.info("round %d: %s back; asked again", round_, ", ".join(map(who, back)))
                push(back, left)
        now = time.time()
        silent = {dest[m] for m in ids} - nudged - gone
        # silent past the nudge delay while half of the silos answered, or past half the deadline anyway
        wait = nudge if 2 * len(answered) >= len(pushed_at) else max(nudge, timeout / 2)
        late = sorted(n for n in silent if now - pushed_at[n] >= wait)
        if late and deadline - now > 1.0:
            online = set(_targets(grid, registry))
            late = [n for n in late if n in online]
            nudged.update(late)
            if late:
                log.info(
                    "round %d: %s silent for %.0f s while online; asked once more",
                    round_,
                    ", ".join(map(who, late)),
                    wait,
                )
                push(late, deadline - now)
        if ids or gone:
            time.sleep(poll)
    if ids:
        # The SuperLink stores no reply to an expired request.  One last pull after the expiry (and a
        # margin for a store in progress) takes every reply it did store, so a silo counted as
        # missing sent nothing that reached the server (under distributed-dp the survivors then reveal
        # their round seeds with the missing silos; the self-mask still hides a message held anyway).
        time.sleep(FINAL_PULL_MARGIN)
        pull()
    if ids or gone:
        missing = {dest[m] for m in ids} | gone
        log.warning("round %d: %d silo(s) did not answer within %.0f s", round_, len(missing), timeout)
    return out


def _no_answer(msg: Message) -> bool:
    """An error reply made by the SuperLink itself (not by a silo) saying that no reply exists."""
    return (
        msg.has_error()
        and int(msg.metadata.src_node_id) == SUPERLINK_NODE_ID
        and msg.error.code
        in (ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE)
    )
