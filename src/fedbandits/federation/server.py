"""The server's side of a deployment: validation of every incoming message, the analyzer, durable state.

The server sees only what silos release.  For each synchronisation k it accepts at most one
message per silo, each checked before it can touch the state (:func:`validate_release`):
the sender must be the silo its node is registered as, the message must be for the current
round and this deployment (config hash), and the payload exactly P finite float64 numbers.  A
rejected message is logged with its reason and counts as missing.  When the round closes
(all silos answered, or the deadline passed) the federation's round ledger
(:class:`fedbandits.online.Rounds`, the service's coordinator's too) closes it: the analyzer A of
Algorithm 2 adds the accepted p-sums -- in silo order, exactly like the simulator -- and releases
the synced prefix; the whole server state is then written atomically, so a restarted server
resumes after the last completed round and never loses or redoes one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.crypto.double_masking import MaskingServer, Reveal, SignedRoster
from fedbandits.crypto.secure_round import Outcome, Replies, Step, drive, open_sum, secure_round
from fedbandits.crypto.signing import Authority
from fedbandits.federation.spec import DeploySpec, load_pickle, save_pickle, shown
from fedbandits.federation.wire import WITHHELD
from fedbandits.online.aggregator import Aggregator
from fedbandits.online.rounds import Rounds

log = logging.getLogger("fedbandits.federation.server")


class ServerStateError(RuntimeError):
    """The server's durable state does not belong to this deployment."""


@dataclass
class Incoming:
    """A reply as the transport hands it over, before any validation."""

    node_id: int
    meta: dict[str, Any] | None  # the reply's ConfigRecord, or None if absent
    arrays: dict[str, np.ndarray] | None  # the reply's arrays, or None if absent
    error: str | None = None  # a transport- or silo-side error instead of content
    wire_bytes: int = 0


@dataclass
class RoundRecord:
    round: int
    accepted: list[int]  # silos whose release was accepted (shuffled: who acknowledged sending)
    missing: list[int]
    rejected: list[tuple[int, str]]  # (node id, reason)
    messages: np.ndarray  # (M, P): accepted releases, NaN rows where missing; shuffled: the (n, P) batch
    prefix: np.ndarray  # (P,): the synced prefix released after this round


@dataclass
class ServerState:
    digest: str
    silos: int
    width: int
    #: the open round and the arithmetic that closes it (the tree analyzer for ldp and shuffled
    #: protocols, the exact running sum for none, the modular tree analyzer for distributed-dp): the
    #: service's coordinator holds the same object
    ledger: Rounds
    rounds: list[RoundRecord] = field(default_factory=list)
    uplink_messages: int = 0
    downlink_messages: int = 0
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    payload_bytes: int = 0
    shuffler_bytes: int = 0  # shuffled protocols: bytes of the batches the shuffler sent the server
    rejections: int = 0
    restarts: int = 0
    finished: bool = False
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: distributed-dp: the server's side of secure aggregation
    secagg: MaskingServer | None = None
    epochs: int = 0  # secure-aggregation epochs started (key set-ups)
    epoch_nodes: list[int] = field(default_factory=list)  # nodes whose silos are in the current roster

    @property
    def completed(self) -> int:
        """Synchronisations completed (closed and persisted)."""
        return self.ledger.closed

    @property
    def prefix(self) -> np.ndarray | None:
        """The latest synced prefix (after ``completed``)."""
        return self.ledger.prefix


def validate_release(
    spec: DeploySpec,
    incoming: Incoming,
    *,
    phase: str,
    round_: int,
    registry: dict[int, int] | None,
    seen: set[int],
    width: int,
    curve_points: int | None = None,
) -> tuple[int, np.ndarray | dict[str, Any]] | str:
    """Check one reply; return (silo id, payload) or the reason it is rejected.

    ``registry`` maps registered node ids to silo ids (None: silos are identified by their
    claim only, which a deployment with SuperNode authentication never does); ``seen`` holds
    the silos already accepted this round.
    """
    checked = _sender(spec, incoming, phase, round_, registry, seen)
    if isinstance(checked, str):
        return checked
    silo, meta = checked
    arrays = incoming.arrays or {}
    if phase in ("setup", "keys", "survivors", "unmask"):
        return silo, dict(meta)
    if phase == "sync":
        return _release(spec, silo, arrays, width)
    return _report(silo, meta, arrays, curve_points)


def _sender(
    spec: DeploySpec, incoming: Incoming, phase: str, round_: int, registry: dict[int, int] | None, seen: set[int]
) -> tuple[int, dict[str, Any]] | str:
    """The silo a reply comes from, if it is this deployment's, this phase's and this round's first."""
    if incoming.error is not None:
        return f"error reply from node {incoming.node_id}: {shown(incoming.error)}"
    meta = incoming.meta
    if meta is None:
        return "no 'meta' record"
    silo = meta.get("silo_id")
    if isinstance(silo, bool) or not isinstance(silo, int) or not 0 <= silo < spec.silos:
        return f"silo_id must be an integer in [0, {spec.silos}), got {shown(silo)}"
    if registry is not None:
        if incoming.node_id not in registry:
            return f"node {incoming.node_id} is not a registered silo"
        if registry[incoming.node_id] != silo:
            return f"node {incoming.node_id} is registered as silo {registry[incoming.node_id]} but claims silo {silo}"
    if meta.get("digest") != spec.digest:
        return f"silo {silo}: config hash {str(meta.get('digest'))[:12]!r} is not this deployment's"
    if meta.get("phase") != phase:
        return f"silo {silo}: phase {shown(meta.get('phase'))}, expected {phase!r}"
    r = meta.get("round")
    if isinstance(r, bool) or not isinstance(r, int) or r != round_:
        return f"silo {silo}: round {shown(r)} is not the current round {round_} (stale or replayed)"
    if silo in seen:
        return f"silo {silo}: a second message in round {round_} (one per silo per round)"
    return silo, meta


def _release(spec: DeploySpec, silo: int, arrays: dict[str, np.ndarray], width: int) -> tuple[int, np.ndarray] | str:
    """A sync reply's payload as the protocol carries it: nothing (shuffled), residues (masked), a p-sum."""
    if spec.shuffled:
        # the p-sum went to the shuffler; a payload here would tell the server who sent it
        if arrays:
            return f"silo {silo}: a shuffled protocol's acknowledgement must carry no arrays, got {sorted(arrays)}"
        return silo, np.zeros(0)
    if spec.masked:
        if set(arrays) != {"masked"}:
            return f"silo {silo}: expected exactly one array 'masked', got {sorted(arrays)}"
        x = arrays["masked"]
        if not isinstance(x, np.ndarray) or x.dtype != np.uint64 or x.shape != (width,):
            return f"silo {silo}: masked must be {width} uint64 residues, got {getattr(x, 'dtype', type(x).__name__)}"
        return silo, x
    if set(arrays) != {"psum"}:
        return f"silo {silo}: expected exactly one array 'psum', got {sorted(arrays)}"
    x = arrays["psum"]
    if not isinstance(x, np.ndarray) or x.dtype != np.float64:
        return f"silo {silo}: psum dtype must be float64, got {getattr(x, 'dtype', type(x).__name__)}"
    if x.shape != (width,):
        return f"silo {silo}: psum shape must be ({width},), got {x.shape}"
    if not np.isfinite(x).all():
        return f"silo {silo}: psum has {int((~np.isfinite(x)).sum())} non-finite entries"
    return silo, x


#: the counts of a silo's trial report, each a non-negative integer
REPORT_COUNTS = (
    "served",
    "skipped_releases",
    "clipped_features",
    "clipped_rewards",
    "psd_repairs",
    "dropped_contributions",
    "max_user_visits",
)


def _report(
    silo: int, meta: dict[str, Any], arrays: dict[str, np.ndarray], curve_points: int | None
) -> tuple[int, dict[str, Any]] | str:
    """A finish reply: the trial report, or an acknowledgement from a silo that does not share it (the default)."""
    if meta.get("report") == WITHHELD:
        if arrays:
            return f"silo {silo}: a withheld report must carry no arrays, got {sorted(arrays)}"
        return silo, {WITHHELD: True}
    if set(arrays) != {"curve"}:
        return f"silo {silo}: expected exactly one array 'curve', got {sorted(arrays)}"
    curve = arrays["curve"]
    if (
        not isinstance(curve, np.ndarray)
        or curve.dtype != np.float64
        or curve.shape != (curve_points,)
        or not np.isfinite(curve).all()
    ):
        return f"silo {silo}: curve must be {curve_points} finite float64 numbers"
    counts = {}
    for key in REPORT_COUNTS:
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"silo {silo}: report field {key} must be a non-negative integer, got {shown(v)}"
        counts[key] = v
    # the largest feature norm the silo saw: the bound that would clip none (shown with the clipping counts)
    largest = meta.get("feature_norm_max")
    if isinstance(largest, bool) or not isinstance(largest, int | float) or not 0 <= largest < math.inf:
        return f"silo {silo}: report field feature_norm_max must be a finite number >= 0, got {shown(largest)}"
    return silo, {"curve": curve, **counts, "feature_norm_max": float(largest)}


class Coordinator:
    """Server state machine for one deployment; the transport (Flower) calls it round by round."""

    def __init__(self, spec: DeploySpec, state_dir: str | Path, authority: Authority | None = None) -> None:
        """``authority``: the silos' signing CA (``distributed-dp``: required for a new deployment)."""
        self.spec = spec
        self.width = spec.width()
        self.path = Path(state_dir) / "server.pkl"
        if self.path.exists():
            state: ServerState = load_pickle(self.path)
            if state.digest != spec.digest:
                raise ServerStateError(
                    f"server state {self.path} belongs to another deployment (config hash {state.digest[:12]})"
                )
            state.restarts += 1
            self.state = migrated(state, spec)
            log.info("resuming from durable state: %d of %d synchronisations completed", state.completed, spec.releases)
        else:
            self.state = ServerState(digest=spec.digest, silos=spec.silos, width=self.width, ledger=Rounds(spec.setup))
            if spec.masked:
                if authority is None:
                    raise ServerStateError("distributed-dp needs the silos' signing CA (signing-ca.pem)")
                cal = spec.distributed()
                self.state.secagg = MaskingServer(spec.digest.encode(), cal.bits, self.width, authority)
        if self.state.secagg is not None and authority is not None:
            self.state.secagg.authority = authority  # the CA as configured now (e.g. renewed)
        if self.state.secagg is not None:
            # A round in flight when the server stopped is asked again in the epoch in force (its
            # roster is durable from record_epoch on): each silo resends its stored message of that
            # round, byte for byte, and repeats its unmask answer for the same list, so the round
            # closes with data.  If a new epoch is needed instead (a node changed), every silo that
            # masked the round refuses to mask it again -- a release enters one masked sum, ever --
            # and the round closes without data.
            secagg = self.state.secagg
            secagg.round_, secagg.received, secagg.survivors, secagg.signatures = None, {}, None, {}
        #: the epoch whose roster this process has delivered with a sync request (none yet after a
        #: start: a silo that missed the roster before a restart then joins with the next request)
        self.delivered_epoch = 0
        self.save()

    def save(self) -> None:
        save_pickle(self.path, self.state)

    @property
    def next_round(self) -> int:
        return self.state.completed + 1

    def close_round(self, k: int, accepted: dict[int, np.ndarray], rejected: list[tuple[int, str]]) -> np.ndarray:
        """Aggregate the accepted releases of synchronisation k; persist; return the synced prefix."""
        M, P = self.spec.silos, self.width
        rows = np.zeros((M, P))
        record = np.full((M, P), np.nan)
        for silo, x in accepted.items():
            rows[silo] = x
            record[silo] = x
        return self._close(k, rows, record, sorted(accepted), rejected)

    def close_shuffled_round(
        self, k: int, batch: np.ndarray, acknowledged: list[int], rejected: list[tuple[int, str]]
    ) -> np.ndarray:
        """As :meth:`close_round` for a shuffled protocol: ``batch (n, P)`` is the shuffler's
        anonymous batch of round k, summed in the order the shuffler chose (as the simulator
        sums its shuffled messages); ``acknowledged`` lists the silos that said they sent."""
        self._check(k)
        record = np.array(batch, dtype=np.float64)
        prefix = self.state.ledger.close_batch(record)
        if len(batch) != len(acknowledged):
            log.warning(
                "round %d: the shuffler's batch holds %d message(s), %d silo(s) acknowledged",
                k,
                len(batch),
                len(acknowledged),
            )
        return self._record(k, record, sorted(acknowledged), rejected, prefix)

    # -- distributed-dp: secure aggregation ---------------------------------------------------
    def _secagg(self) -> MaskingServer:
        assert self.state.secagg is not None, "not a distributed-dp deployment"
        return self.state.secagg

    def needs_epoch(self, connected: list[int]) -> bool:
        """Whether the next masked round needs a key set-up first: none yet (or the server restarted
        mid-round), or a ``connected`` node is not in the roster (a silo that came back, or joined late)."""
        return self._secagg().roster is None or not set(connected) <= set(self.state.epoch_nodes)

    def secure_round(
        self, k: int, connected: list[int], carry: Callable[[Step], Replies | None], rejected: list[tuple[int, str]]
    ) -> Outcome:
        """Round ``k`` of secure aggregation (:func:`fedbandits.crypto.secure_round.secure_round`;
        a key set-up first if :meth:`needs_epoch` for the ``connected`` nodes), each step taken to
        the silos by the transport's ``carry``, then closed, with its data or without;
        ``rejected``: the transport's own refusals (the protocol's are added)."""
        params = self.spec.params
        new_epoch, least = self.needs_epoch(connected), self.spec.silos - params.dropouts
        steps = secure_round(self._secagg(), k, new_epoch=new_epoch, colluders=params.colluders, least=least)
        outcome = drive(steps, carry)
        for node, why in outcome.rejected:
            log.warning("round %d: rejected a message from node %s: %s", k, node, why)
        rejected.extend(outcome.rejected)
        if outcome.reveals is None:
            log.warning("round %d: %s; closing without data", k, outcome.why)
            self.close_without_data(k, rejected)
            return outcome
        self.close_masked_round(k, outcome.reveals, rejected)
        log.info(
            "round %d closed: %d masked message(s), dropped %s, %d signature(s), %d unmask answer(s), %d rejected",
            k, len(outcome.survivors), outcome.dropped, len(outcome.signers), len(outcome.reveals), len(rejected),
        )  # fmt: skip
        return outcome

    def record_epoch(self, roster: SignedRoster, nodes: list[int]) -> None:
        """Keep the epoch the round published (its silos' ``nodes``) in the durable state."""
        self.state.epochs += 1
        self.state.epoch_nodes = sorted(nodes)
        self.save()
        log.info("secure aggregation epoch %d: silos %s, threshold %d", roster.epoch, roster.members, roster.threshold)

    def close_masked_round(self, k: int, reveals: dict[int, Reveal], rejected: list[tuple[int, str]]) -> np.ndarray:
        """Close ``distributed-dp`` round ``k``: the survivors' modular sum (self-masks and the
        dropped silos' pairwise masks removed with ``reveals``), decoded; the decoded node sum is
        recorded.  If the masks cannot be removed the round closes without data."""
        self._check(k)
        secagg = self._secagg()
        accepted = sorted(secagg.received)
        total, why = open_sum(secagg, reveals, "no reveals")
        if total is None:
            log.warning("round %d: %s; closing without data", k, why)
            return self.close_without_data(k, rejected)
        node, prefix = self.state.ledger.close_sum(total)
        return self._record(k, node.copy(), accepted, rejected, prefix)

    def close_without_data(self, k: int, rejected: list[tuple[int, str]]) -> np.ndarray:
        """Close ``distributed-dp`` round ``k`` as an empty node: nobody's data is released (no silo
        could take part, too few survivors signed, or the masks could not be removed).  No key was
        revealed: the epoch goes on."""
        self._check(k)
        secagg = self._secagg()
        secagg.round_, secagg.survivors = None, None
        node, prefix = self.state.ledger.close_sum(np.zeros(self.width, dtype=np.uint64))
        return self._record(k, node.copy(), [], rejected, prefix)

    def _check(self, k: int) -> None:
        if k != self.state.completed + 1:
            raise ValueError(f"round {k} cannot close: {self.state.completed} rounds are completed")

    def _close(
        self, k: int, rows: np.ndarray, record: np.ndarray, accepted: list[int], rejected: list[tuple[int, str]]
    ) -> np.ndarray:
        """Close round k of ``none``, ``ldp`` or a shuffled protocol with ``rows (n, P)``."""
        self._check(k)
        return self._record(k, record, accepted, rejected, self.state.ledger.close_rows(rows))

    def _record(
        self, k: int, record: np.ndarray, accepted: list[int], rejected: list[tuple[int, str]], prefix: np.ndarray
    ) -> np.ndarray:
        """Keep closed round k's record and counts, and persist the state."""
        s = self.state
        missing = [i for i in range(self.spec.silos) if i not in accepted]
        s.rounds.append(RoundRecord(k, accepted, missing, list(rejected), record, prefix.copy()))
        if s.secagg is not None:
            s.payload_bytes += len(accepted) * self.width * 8  # uint64 residues
        else:
            s.payload_bytes += int(np.isfinite(record).all(axis=1).sum()) * self.width * 8
        s.rejections += len(rejected)
        self.save()
        if missing:
            log.warning("round %d closed without silo(s) %s: their p-sums are absent from this node", k, missing)
        return prefix

    def synced_prefixes(self) -> np.ndarray:
        return np.stack([r.prefix for r in self.state.rounds]) if self.state.rounds else np.zeros((0, self.width))


def migrated(state: ServerState, spec: DeploySpec) -> ServerState:
    """A server state pickled by an earlier version, as :class:`Rounds` holds it now: before the
    round-closing arithmetic moved to :class:`Aggregator` the state held ``analyzer``, ``total`` and
    ``modular`` itself; then an ``aggregator``; both with ``completed`` and ``prefix`` beside it."""
    old = state.__dict__
    if "ledger" in old:
        return state
    if "aggregator" in old:
        aggregator = old.pop("aggregator")
    else:
        aggregator = Aggregator(spec.setup)
        aggregator.analyzer, aggregator.total = old.pop("analyzer"), old.pop("total")
        aggregator.modular = old.pop("modular", None)
    completed, prefix = old.pop("completed"), old.pop("prefix")
    aggregator.rounds = completed
    ledger = Rounds(spec.setup)
    ledger.aggregator, ledger.round, ledger.prefix = aggregator, completed, prefix
    ledger.finished = spec.setup.releases is not None and completed == spec.setup.releases
    state.ledger = ledger
    return state
