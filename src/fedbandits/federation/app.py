"""The Flower ServerApp and ClientApp that carry Private-FedLinUCB (needs ``fedbandits[deploy]``).

Why this module is above ~600 lines: it is both ends of one message protocol -- what the
ServerApp writes into a message (phases, ``meta`` keys, arrays) the ClientApp reads a page later,
and both use the same record helpers -- and the Flower app that :mod:`fedbandits.federation.flower_setup`
generates loads ``server_app`` and ``client_app`` from this one module.

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

``distributed-dp`` adds secure aggregation against a server that cheats
(:mod:`fedbandits.crypto.double_masking`): before the first round of an epoch, ``query`` phase
"keys" (with the new epoch; each silo replies with two public keys, its signing certificate and its
signature of them); the first ``train`` request of the epoch carries the signed roster
(``roster_*`` fields), which each silo checks before it masks.  A silo's sync reply carries
``masked`` (its residues plus a fresh self-mask plus its pairwise masks, uint64), its encrypted
self-mask shares (``b_to``/``b_blobs``) and their commitment (``b_commit``).  Then, if some silo
is missing, ``query`` phase "survivors" to the silos whose message the server holds (each signs
the survivor list, ``signature``); and every round phase "unmask" with the list, the dropped silos, the signatures
(``signers``/``signatures``) and the self-mask shares addressed to that silo
(``held_from``/``held``); each replies with its self-mask shares of the survivors
(``b_owners``/``b_shares``) and its round seeds with the dropped (``seed_for``/``seeds``).  The
server removes the masks and closes the round; too few survivors or signatures close it without
data.  No key is ever revealed: an epoch survives dropouts.

Nothing else crosses the network.  Message sizes are measured as the bytes of the objects Flower
serialises and ships (before TLS framing).
"""

from __future__ import annotations

import functools
import json
import logging
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp

from fedbandits.crypto.double_masking import Advert, Masked, Reveal, SignedRoster
from fedbandits.crypto.secure_aggregation import KEY_BYTES, SHARE_BYTES
from fedbandits.crypto.signing import SIGNATURE_BYTES, Authority, Identity, load_signing
from fedbandits.federation.deployment_results import deployment_results
from fedbandits.federation.processes import serving_lock
from fedbandits.federation.server import WITHHELD, Coordinator, Incoming, validate_release
from fedbandits.federation.shuffler import ShufflerClient
from fedbandits.federation.silo import Silo, SiloError, check_pinned_spec
from fedbandits.federation.spec import atomic_write_bytes, cached_spec_from_json, spec_from_json
from fedbandits.sim.task import time_grid

log = logging.getLogger("fedbandits.federation")

#: seconds after a round's requests expire before the server's last pull of their replies
FINAL_PULL_MARGIN = 1.0
#: with ``reask``, a silo still silent this fraction of the round's deadline (and at least
#: NUDGE_FLOOR s) after its request, while its node is online and half of the silos have answered
#: (else half the deadline), is asked once more (see :func:`_exchange`)
NUDGE_FRACTION, NUDGE_FLOOR = 1 / 6, 10.0

#: a silo's node config for secure aggregation's signatures (distributed-dp)
SIGNING_CONFIG = ("signing-key", "signing-cert", "signing-ca")

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


def _byte_list(meta: dict[str, Any], key: str, size: int | None = None) -> list[bytes] | None:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(v, bytes) for v in value):
        return None
    if size is not None and any(len(v) != size for v in value):
        return None
    return value


def _int_list(meta: dict[str, Any], key: str) -> list[int] | None:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return value


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
            to, blobs = _int_list(meta, "b_to"), _byte_list(meta, "b_blobs")
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
        owners, shares = _int_list(meta, "b_owners"), _byte_list(meta, "b_shares", SHARE_BYTES)
        seed_for, seeds = _int_list(meta, "seed_for"), _byte_list(meta, "seeds", KEY_BYTES)
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


# ================================================================ silo =====================
Handler = Callable[[Message, Context], Message]


def _one_at_a_time(handler: Handler) -> Handler:
    """Serve ``handler`` under the silo's :func:`~fedbandits.federation.processes.serving_lock`."""

    @functools.wraps(handler)
    def serve(msg: Message, context: Context) -> Message:
        with serving_lock(Path(str(context.node_config["state-dir"]))):
            return handler(msg, context)

    return serve


def _silo(context: Context, meta: dict[str, Any]) -> Silo:
    node = context.node_config
    state_dir = Path(str(node["state-dir"]))
    _file_logger(state_dir / "silo.log")
    spec = cached_spec_from_json(str(meta["spec"]), state_dir / "spec.pickle")
    if spec.digest != meta.get("digest"):
        raise SiloError("the request's config hash does not match its spec")
    check_pinned_spec(spec, node.get("spec-digest"))
    data_file = str(node.get("data-file", "")) or None
    # secret noise and no trial report unless the silo's operator asked otherwise (node config)
    noise = str(node.get("noise-source", "os"))
    share = str(node.get("share-report", "false")).lower() == "true"
    silo_id = int(node["silo-id"])
    return Silo(spec, silo_id, state_dir, noise, data_file, share_report=share, signing=_signing(node, silo_id))


@functools.cache
def _signing_files(silo: int, key: str, cert: str, ca: str) -> tuple[Identity, Authority]:
    return load_signing(silo, key, cert, ca)


def _signing(node: dict[str, Any], silo: int) -> tuple[Identity, Authority] | None:
    """The silo's signing identity and the pinned signing CA from its node config, if given."""
    files = [str(node.get(k, "")) for k in SIGNING_CONFIG]
    if not any(files):
        return None
    if not all(files):
        raise SiloError(f"give all of the node config's {', '.join(SIGNING_CONFIG)}, or none")
    try:
        return _signing_files(silo, *files)
    except (OSError, ValueError) as exc:
        raise SiloError(f"the silo's signing files: {exc}") from None


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
@_one_at_a_time
def silo_sync(msg: Message, context: Context) -> Message:
    meta = dict(msg.content["meta"])
    silo = _silo(context, meta)
    k = _meta_int(meta, "round")
    arrays = _arrays(msg.content.array_records.get("synced")) if "synced" in msg.content.array_records else None
    prefix = arrays["prefix"] if arrays else None
    psum = silo.release(k, prefix, _meta_int(meta, "prefix_round"))
    out_meta = {"silo_id": silo.silo_id, "digest": silo.spec.digest, "phase": "sync", "round": k}
    fault = _faults(context).get(k)
    if silo.spec.masked:
        masked = _masked(silo, meta, k)
        to = sorted(masked.blobs)
        out_meta.update(
            {
                "epoch": meta.get("epoch"),
                "b_to": to,
                "b_blobs": [masked.blobs[j] for j in to],
                "b_commit": masked.commitment,
            }
        )
        return _reply(msg, out_meta, {"masked": masked.masked})
    if silo.spec.shuffled:
        # the p-sum goes to the shuffler (mutual TLS); the server only hears that it was sent
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


def _roster_from(meta: dict[str, Any], context: bytes) -> SignedRoster:
    """The roster a request delivers (``roster_*`` fields), checked for shape; the silo checks the rest."""
    members = _int_list(meta, "roster_members")
    c_public, s_public = _byte_list(meta, "roster_c_public", KEY_BYTES), _byte_list(meta, "roster_s_public", KEY_BYTES)
    certs, signatures = _byte_list(meta, "roster_certs"), _byte_list(meta, "roster_signatures", SIGNATURE_BYTES)
    if members is None or c_public is None or s_public is None or certs is None or signatures is None:
        raise SiloError(
            "a roster lists members (integers), their 32-byte c_public and s_public keys, certificates and "
            f"{SIGNATURE_BYTES}-byte signatures"
        )
    if not len(members) == len(c_public) == len(s_public) == len(certs) == len(signatures):
        raise SiloError("a roster gives two keys, a certificate and a signature per member")
    adverts = {
        m: Advert(c, s_, cert, sig)
        for m, c, s_, cert, sig in zip(members, c_public, s_public, certs, signatures, strict=True)
    }
    return SignedRoster.of(context, _meta_int(meta, "roster_epoch"), _meta_int(meta, "roster_threshold"), adverts)


def _masked(silo: Silo, meta: dict[str, Any], k: int) -> Masked:
    """The silo's release k masked for the request's epoch (joining the epoch the request delivers)."""
    if "roster_members" in meta:
        silo.join(_roster_from(meta, silo.spec.digest.encode()))
    secagg = silo.state.secagg
    if secagg is None or secagg.roster is None or secagg.roster.epoch != meta.get("epoch"):
        raise SiloError(f"request for epoch {meta.get('epoch')!r}, but this silo holds no keys of that epoch")
    return silo.masked(k)


def _keyed(meta: dict[str, Any], keys: str, values: str, size: int | None = None) -> dict[int, bytes]:
    who, blobs = _int_list(meta, keys), _byte_list(meta, values, size)
    if who is None or blobs is None or len(who) != len(blobs):
        raise SiloError(f"a request must pair {keys} (integers) with {values} (bytes)")
    return dict(zip(who, blobs, strict=True))


@client_app.query()
@_one_at_a_time
def silo_secure_aggregation(msg: Message, context: Context) -> Message:
    """Key set-up ("keys"), consistency check ("survivors") and unmask step ("unmask") of secure
    aggregation (distributed-dp; :mod:`fedbandits.crypto.double_masking`)."""
    meta: dict[str, Any] = dict(msg.content["meta"])
    silo = _silo(context, meta)
    phase = meta.get("phase")
    k = _meta_int(meta, "round")
    out: dict[str, Any] = {"silo_id": silo.silo_id, "digest": silo.spec.digest, "phase": phase, "round": k}
    secagg = silo.state.secagg
    if phase != "keys" and (secagg is None or secagg.roster is None or secagg.roster.epoch != meta.get("epoch")):
        raise SiloError(f"request for epoch {meta.get('epoch')!r}, but this silo holds no keys of that epoch")
    if phase == "keys":
        advert = silo.advertise(_meta_int(meta, "epoch"))
        out.update(c_public=advert.c_public, s_public=advert.s_public, cert=advert.cert, signature=advert.signature)
    elif phase == "survivors":
        out["signature"] = silo.sign_survivors(k, meta.get("survivors"))
    elif phase == "unmask":
        signatures = _keyed(meta, "signers", "signatures", SIGNATURE_BYTES)
        held = _keyed(meta, "held_from", "held")
        reveal = silo.unmask(k, meta.get("survivors"), meta.get("dropped"), signatures, held)
        out["b_owners"] = sorted(reveal.b_shares)
        out["b_shares"] = [reveal.b_shares[j] for j in out["b_owners"]]
        out["seed_for"] = sorted(reveal.seeds)
        out["seeds"] = [reveal.seeds[j] for j in out["seed_for"]]
    else:
        raise SiloError(f"unknown secure-aggregation phase {phase!r}")
    return _reply(msg, out, {})


@client_app.evaluate()
@_one_at_a_time
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
