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
from fedbandits.crypto.secure_round import KEYS, MASKED, SURVIVORS, UNMASK, Ask, Epoch, Replies, Step
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
    poll = float(cfg.get("poll-interval", 0.2))
    registry_file = str(cfg.get("registry-file", ""))
    registry = None
    if registry_file:
        registry = {int(node): int(silo) for node, silo in json.loads(Path(registry_file).read_text()).items()}
    ca = str(cfg.get("signing-ca", ""))
    coord = Coordinator(spec, state_dir, Authority.load(ca) if ca else None)
    shuffler = ShufflerClient.from_config(cfg) if spec.shuffled else None
    started = time.time()
    log.info("server up (run %s): %s, M=%d silos, K=%d synchronisations", run_id, spec.label, spec.silos, spec.releases)
    _wait_for_silos(grid, registry, spec.silos, float(cfg["join-timeout"]), poll)
    for k in range(coord.next_round, spec.releases + 1):
        if spec.masked:
            _masked_round(grid, coord, registry, spec_json, k, round_timeout, poll)
        else:
            _direct_round(grid, coord, registry, spec_json, k, round_timeout, poll, shuffler)
    if not coord.state.finished:
        _finish(grid, coord, registry, spec_json, round_timeout, poll)
    results = deployment_results(spec, coord, time.time() - started)
    results.save(state_dir / "results")
    clipping = results.clipping_warnings()
    summary = {"run_id": str(run_id), "table": results.table(), "clipping_warnings": clipping, **_counts(coord)}
    atomic_write_bytes(state_dir / "done.json", json.dumps(summary, indent=2).encode())
    log.info("deployment finished\n%s", results.table())
    for line in clipping:
        log.warning("%s", line)


def _wait_for_silos(grid: Grid, registry: dict[int, int] | None, silos: int, join_timeout: float, poll: float) -> None:
    """A bounded wait for the silos to connect (at least one)."""
    deadline = time.time() + join_timeout
    while True:
        nodes = _targets(grid, registry)
        if len(nodes) >= silos or time.time() > deadline:
            break
        time.sleep(poll)
    if not nodes:
        raise RuntimeError(f"no silo connected within {join_timeout:.0f} s")
    log.info("%d of %d silos connected", len(nodes), silos)


def _direct_round(
    grid: Grid,
    coord: Coordinator,
    registry: dict[int, int] | None,
    spec_json: str,
    k: int,
    timeout: float,
    poll: float,
    shuffler: ShufflerClient | None,
) -> None:
    """One synchronisation of ``none``, ``ldp`` or a shuffled protocol: every silo's release (its
    acknowledgement, shuffled), validated; the round closed with them or with the shuffler's batch."""
    spec = coord.spec
    meta = {"phase": "sync", "round": k, "digest": spec.digest, "prefix_round": k - 1, "spec": spec_json}
    replies = _exchange(grid, coord, registry, "train", meta, k, timeout, poll, reask=True)
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
        return
    # the p-sums went to the shuffler; it permutes them once and hands over the batch
    batch, withheld, size = shuffler.close(spec.digest, k, coord.width, patience=timeout)
    if not np.isfinite(batch).all() or len(batch) > spec.silos:
        raise RuntimeError(f"round {k}: the shuffler's batch is malformed (shape {batch.shape})")
    if withheld:
        log.warning("round %d: the shuffler withheld the batch (fewer messages than the guarantee needs)", k)
    coord.state.shuffler_bytes += size
    coord.close_shuffled_round(k, batch, sorted(accepted), rejected)
    log.info(
        "round %d closed: %d shuffled message(s); silos %s acknowledged, %d rejected",
        k, len(batch), sorted(accepted), len(rejected),
    )  # fmt: skip


def _finish(
    grid: Grid, coord: Coordinator, registry: dict[int, int] | None, spec_json: str, timeout: float, poll: float
) -> None:
    """The last prefix down, the trial reports up (those the silos' operators opted in to share)."""
    spec = coord.spec
    last = spec.releases + 1
    meta = {"phase": "finish", "round": last, "digest": spec.digest, "prefix_round": spec.releases, "spec": spec_json}
    replies = _exchange(grid, coord, registry, "evaluate", meta, last, timeout, poll, reask=True)
    points = time_grid(spec.horizon, spec.config.experiment.grid_points).size
    seen: set[int] = set()
    for inc in replies:
        res = validate_release(
            spec, inc, phase="finish", round_=last, registry=registry, seen=seen, width=coord.width, curve_points=points
        )
        if isinstance(res, str):
            log.warning("finish: rejected a report from node %d: %s", inc.node_id, res)
            coord.state.rejections += 1
            continue
        seen.add(res[0])
        coord.state.reports[res[0]] = res[1]  # type: ignore[assignment]
    coord.state.finished = True
    coord.save()


def _counts(coord: Coordinator) -> dict[str, Any]:
    """What the server's ``done.json`` reports of the run besides its table."""
    s = coord.state
    return {
        "completed": s.completed,
        "reports": sorted(s.reports),
        "rejections": s.rejections,
        "uplink_messages": s.uplink_messages,
        "downlink_messages": s.downlink_messages,
        "uplink_bytes": s.uplink_bytes,
        "downlink_bytes": s.downlink_bytes,
        "payload_bytes": s.payload_bytes,
        "shuffler_bytes": s.shuffler_bytes,
        "restarts": s.restarts,
        "missing": {r.round: r.missing for r in s.rounds if r.missing},
    }


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
    """One ``distributed-dp`` synchronisation: the secure round of the protocol layer
    (:func:`fedbandits.crypto.secure_round.secure_round`) carried over Flower, then closed."""
    _MaskedRound(grid, coord, registry, spec_json, k, timeout, poll).run()


class _MaskedRound:
    """Flower's carriage of one secure round: each step a request to the silos, their replies
    validated (sender, round, deployment) and parsed; the round's rejected messages."""

    def __init__(
        self,
        grid: Grid,
        coord: Coordinator,
        registry: dict[int, int] | None,
        spec_json: str,
        k: int,
        timeout: float,
        poll: float,
    ) -> None:
        self.grid, self.coord, self.registry, self.k, self.timeout, self.poll = grid, coord, registry, k, timeout, poll
        self.base = {"round": k, "digest": coord.spec.digest, "prefix_round": k - 1, "spec": spec_json}
        self.rejected: list[tuple[int, str]] = []
        self.nodes: dict[int, int] = {}  # silo -> the node its masked message came from

    def run(self) -> None:
        self.coord.secure_round(self.k, _targets(self.grid, self.registry), self.carry, self.rejected)

    def carry(self, step: Step) -> Replies | None:
        if isinstance(step, Epoch):
            self.coord.record_epoch(step.roster, list(step.tags.values()))
            return None
        if step.phase == MASKED:
            return self.masked(step)
        only = _targets(self.grid, self.registry) if step.to is None else [self.nodes[i] for i in step.to]
        fields = {key: value for key, value in step.fields.items() if key != "round"}
        per_node = {self.nodes[i]: _per_node(extra) for i, extra in step.per_silo.items()}
        if step.phase == UNMASK:
            signatures = fields.pop("signatures")
            fields.update(signers=sorted(signatures), signatures=[signatures[i] for i in sorted(signatures)])
        message = {**self.base, **fields, "phase": step.phase}
        replies = _exchange(
            self.grid, self.coord, self.registry, "query", message, self.k, self.timeout, self.poll, per_node, only=only
        )
        got, bad = _collect(self.coord, self.registry, replies, step.phase, self.k)
        self.rejected.extend(bad)
        return {silo: (node, _PARSE[step.phase](silo, meta)) for silo, (node, meta) in got.items()}

    def masked(self, step: Ask) -> Replies:
        """The sync request (with the roster, the epoch's first from this process) and the masked
        replies, validated and parsed."""
        coord, k = self.coord, self.k
        roster: SignedRoster = step.fields["roster"]
        epoch = step.fields["epoch"]
        roster_meta: dict[str, Any] = {}
        if coord.delivered_epoch != epoch:  # the epoch's first request from this process carries the roster
            roster_meta = {f"roster_{key}": value for key, value in _roster_meta(roster).items()}
        meta = {**self.base, "phase": "sync", "epoch": epoch, **roster_meta}
        replies = _exchange(self.grid, coord, self.registry, "train", meta, k, self.timeout, self.poll)
        coord.delivered_epoch = epoch
        out: Replies = {}
        for inc in replies:
            res = validate_release(
                coord.spec, inc, phase="sync", round_=k, registry=self.registry, seen=set(out), width=coord.width
            )
            if isinstance(res, str):
                log.warning("round %d: rejected a message from node %d: %s", k, inc.node_id, res)
                self.rejected.append((inc.node_id, res))
                continue
            got = inc.meta or {}
            to, blobs = int_list(got, "b_to"), byte_list(got, "b_blobs")
            if to is None or blobs is None or len(to) != len(blobs):
                answer: Any = f"silo {res[0]}: self-mask shares must pair b_to (integers) with b_blobs (bytes)"
            else:
                answer = (got.get("epoch"), Masked(res[1], dict(zip(to, blobs, strict=True)), got.get("b_commit")))  # type: ignore[arg-type]
                self.nodes[res[0]] = inc.node_id
            out[res[0]] = (inc.node_id, answer)
        return out


def _per_node(extra: dict[str, Any]) -> dict[str, Any]:
    """A silo's own fields of the unmask request, on the wire: the self-mask shares addressed to it."""
    held: dict[int, bytes] = extra["held"]
    return {"held_from": sorted(held), "held": [held[j] for j in sorted(held)]}


def _advert(silo: int, meta: dict[str, Any]) -> Advert:
    return Advert(*(meta.get(key) for key in ("c_public", "s_public", "cert", "signature")))  # type: ignore[arg-type]


def _signature(silo: int, meta: dict[str, Any]) -> object:
    return meta.get("signature")


def _reveal(silo: int, meta: dict[str, Any]) -> Reveal | str:
    owners, shares = int_list(meta, "b_owners"), byte_list(meta, "b_shares", SHARE_BYTES)
    seed_for, seeds = int_list(meta, "seed_for"), byte_list(meta, "seeds", KEY_BYTES)
    if (
        owners is None
        or shares is None
        or seed_for is None
        or seeds is None
        or len(owners) != len(shares)
        or len(seed_for) != len(seeds)
    ):
        return f"silo {silo}: an unmask answer pairs b_owners with b_shares, seed_for with seeds"
    return Reveal(dict(zip(owners, shares, strict=True)), dict(zip(seed_for, seeds, strict=True)))


#: each query phase's reply, parsed into what the protocol layer takes (a str: why it cannot be)
_PARSE = {KEYS: _advert, SURVIVORS: _signature, UNMASK: _reveal}


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
    exchange = _Exchange(grid, coord, registry, message_type, meta, round_, timeout, poll, per_node, reask)
    exchange.nudge = (
        (max(timeout * NUDGE_FRACTION, NUDGE_FLOOR) if nudge_after is None else nudge_after) if reask else float("inf")
    )
    return exchange.run(only)


class _Exchange:
    """The state of one :func:`_exchange`: requests pushed, replies taken, silos gone or nudged."""

    def __init__(
        self,
        grid: Grid,
        coord: Coordinator,
        registry: dict[int, int] | None,
        message_type: str,
        meta: dict[str, Any],
        round_: int,
        timeout: float,
        poll: float,
        per_node: dict[int, dict[str, Any]] | None,
        reask: bool,
    ) -> None:
        self.grid, self.coord, self.registry = grid, coord, registry
        self.message_type, self.meta, self.per_node = message_type, meta, per_node or {}
        self.round, self.timeout, self.poll, self.reask = round_, timeout, poll, reask
        self.prefix = coord.state.prefix
        self.nudge = float("inf")
        self.dest: dict[str, int] = {}  # message id -> node
        self.ids: set[str] = set()  # requests not answered yet
        self.pushed_at: dict[int, float] = {}
        self.nudged: set[int] = set()
        self.answered: set[int] = set()
        self.gone: set[int] = set()  # nodes that went offline during the round (reask only)
        self.out: list[Incoming] = []

    def run(self, only: list[int] | None) -> list[Incoming]:
        targets = _targets(self.grid, self.registry)
        self.push(targets if only is None else sorted(set(only) & set(targets)), self.timeout)
        deadline = time.time() + self.timeout  # after the requests' expiry (created before the push, ttl = timeout)
        while (self.ids or self.gone) and time.time() < deadline:
            self.pull()
            if self.gone:
                self.ask_the_returned(deadline)
            self.ask_the_silent(deadline)
            if self.ids or self.gone:
                time.sleep(self.poll)
        if self.ids:
            # The SuperLink stores no reply to an expired request.  One last pull after the expiry (and a
            # margin for a store in progress) takes every reply it did store, so a silo counted as
            # missing sent nothing that reached the server (under distributed-dp the survivors then reveal
            # their round seeds with the missing silos; the self-mask still hides a message held anyway).
            time.sleep(FINAL_PULL_MARGIN)
            self.pull()
        if self.ids or self.gone:
            missing = {self.dest[m] for m in self.ids} | self.gone
            log.warning("round %d: %d silo(s) did not answer within %.0f s", self.round, len(missing), self.timeout)
        return self.out

    def content(self, node: int) -> RecordDict:
        out = RecordDict({"meta": ConfigRecord({**self.meta, **self.per_node.get(node, {})})})
        if self.prefix is not None:
            out["synced"] = ArrayRecord({"prefix": Array(np.ascontiguousarray(self.prefix))})
        return out

    def push(self, nodes: list[int], ttl: float) -> None:
        contents = [self.content(n) for n in nodes]
        messages = [
            # time to live = the round's deadline: a reply after it is not used, and a request that
            # outlives its round could be served late by a silo that rejoins (a wasted release)
            Message(c, dst_node_id=n, message_type=self.message_type, group_id=str(self.round), ttl=ttl)
            for c, n in zip(contents, nodes, strict=True)
        ]
        pushed = list(self.grid.push_messages(messages))
        self.coord.state.downlink_messages += len(messages)
        self.coord.state.downlink_bytes += sum(wire_bytes(c) for c in contents)
        now = time.time()
        for mid, n in zip(pushed, nodes, strict=True):
            self.pushed_at[n] = now
            if mid is not None:
                self.dest[mid] = n
                self.ids.add(mid)

    def who(self, node: int | None) -> str:
        registry = self.registry
        return f"silo {registry[node]} (node {node})" if registry and node in registry else f"node {node}"

    def pull(self) -> None:
        for msg in self.grid.pull_messages(self.ids):
            self.ids.discard(msg.metadata.reply_to_message_id)
            node = self.dest.get(msg.metadata.reply_to_message_id)
            if _no_answer(msg):
                self.no_answer(msg, node)
                continue
            if node is not None:
                if node in self.answered:  # a silo answered both its request and the repeat: one is enough
                    continue
                self.answered.add(node)
                self.gone.discard(node)  # (its other request's offline notice may have come first)
                self.ids.difference_update([m for m in self.ids if self.dest[m] == node])
            inc = _incoming(msg)
            self.coord.state.uplink_messages += 1
            self.coord.state.uplink_bytes += inc.wire_bytes
            self.out.append(inc)

    def no_answer(self, msg: Message, node: int | None) -> None:
        """The SuperLink's own notice that the silo did not answer (request expired, node offline):
        the silo is missing this round, it sent nothing to reject."""
        reason = str(msg.error.reason or "").split(" - ")[0]
        if node in self.answered:  # the notice of a silo's other request: its answer is in
            return
        if self.reask and node is not None and msg.error.code == ErrorCode.NODE_UNAVAILABLE:
            self.gone.add(node)
            log.warning(
                "round %d: %s went offline; asked again if it is back within the deadline", self.round, self.who(node)
            )
            return
        log.warning("round %d: %s did not answer (%s)", self.round, self.who(node), reason)

    def ask_the_returned(self, deadline: float) -> None:
        back = sorted(self.gone & set(_targets(self.grid, self.registry)))
        left = deadline - time.time()
        if back and left > 1.0:
            self.gone.difference_update(back)
            log.info("round %d: %s back; asked again", self.round, ", ".join(map(self.who, back)))
            self.push(back, left)

    def ask_the_silent(self, deadline: float) -> None:
        now = time.time()
        silent = {self.dest[m] for m in self.ids} - self.nudged - self.gone
        # silent past the nudge delay while half of the silos answered, or past half the deadline anyway
        wait = self.nudge if 2 * len(self.answered) >= len(self.pushed_at) else max(self.nudge, self.timeout / 2)
        late = sorted(n for n in silent if now - self.pushed_at[n] >= wait)
        if late and deadline - now > 1.0:
            online = set(_targets(self.grid, self.registry))
            late = [n for n in late if n in online]
            self.nudged.update(late)
            if late:
                log.info(
                    "round %d: %s silent for %.0f s while online; asked once more",
                    self.round,
                    ", ".join(map(self.who, late)),
                    wait,
                )
                self.push(late, deadline - now)


def _no_answer(msg: Message) -> bool:
    """An error reply made by the SuperLink itself (not by a silo) saying that no reply exists."""
    return (
        msg.has_error()
        and int(msg.metadata.src_node_id) == SUPERLINK_NODE_ID
        and msg.error.code
        in (ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE)
    )
