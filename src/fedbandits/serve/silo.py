"""A serving silo: the online agent (:class:`fedbandits.online.Agent`) behind its event log.

Every method that changes the agent records the change in the log (:mod:`fedbandits.serve.store`)
in one transaction before it returns, so what a caller was told happened has happened for good:

* :meth:`ServingSilo.decide` -- the agent chooses; the decision (its number, the chosen arm's
  features, the time) is committed; then the answer.
* :meth:`ServingSilo.reward` -- the agent learns; the reward is committed; then the answer.  A
  reward for a decision past its expiry is refused and counted (a ``late`` event), never learned.
* :meth:`ServingSilo.release` -- the server's sync round ``(epoch, round)``: the completed decisions
  since the previous release, privatized by the agent's local randomizer, committed with the
  agent's new state; a retried round gets the same stored bytes (the noise is never redrawn).
* :meth:`ServingSilo.adopt` -- the federation's prefix, committed with the agent's new state.

A restart loads the newest snapshot and replays the events after it on the recorded times
(the agent's clock is pinned to each event's), so the agent is the one that acknowledged them:
every acknowledged reward is learned once, and every completed decision is in exactly one
release (or waits for the next).  If a write fails (a full disk, a closed connection; at any
statement of its transaction or at its COMMIT) the transaction is rolled back whole -- a release is
never kept without its snapshot -- and the silo refuses everything (503, ``/healthz`` too) until it
is restarted: memory may then hold what the log does not, and the restart resumes from the log (a
failed read of the log too).  Budget epochs (issue "Live decisions, part 2", item 3): a private
protocol's noise is calibrated for K releases.  When they are made, policy ``stop`` keeps serving from
the last prefix and refuses further releases; policy ``renew`` starts epoch e + 1 when the server asks
for it (a fresh randomizer; the lifetime epsilon is the sum of the epochs', shown in the status).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from fedbandits.config import Config, config_from_dict
from fedbandits.crypto.double_masking import Advert, Masked, MaskingSilo, Reveal, SecAggError, SignedRoster
from fedbandits.crypto.signing import Authority, Identity
from fedbandits.online import Agent, AgentError, AgentSetup
from fedbandits.online.inputs import AlreadyRewarded, ExpiredDecision
from fedbandits.privacy.discrete_gaussian import DrawsAhead
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.serve import pending
from fedbandits.serve.masking import federation_context, mask_round, silo_state_from_text, silo_state_to_text
from fedbandits.serve.metrics import Latencies
from fedbandits.serve.options import POLICIES
from fedbandits.serve.pgstore import PgStore
from fedbandits.serve.store import Event, Store, StoreError

_T = TypeVar("_T")


class ServeError(ValueError):
    """A request the silo refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Clock:
    """Wall-clock seconds (deadlines survive restarts), pinned to a recorded time during replay."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.pinned: float | None = None

    def __call__(self) -> float:
        return self.now() if self.pinned is None else self.pinned


class ServingSilo:
    """One silo's agent and event log.  Not thread-safe: the service calls it from one thread."""

    #: a failed shared log (PostgreSQL) is tried again at most this often (:meth:`recover`)
    RETRY_SECONDS = 1.0
    agent: Agent

    @staticmethod
    def check(
        config: Config | dict[str, object] | str | Path,
        entry: str | None,
        silo: int,
        policy: str = "stop",
        allow_unprivatized: bool = False,
        shuffler: bool = False,
    ) -> AgentSetup:
        """The entry's set-up, if a silo can serve it with these settings (else a ServeError); opens
        nothing.  ``shuffler``: its releases go through the deployment's shuffler
        (:mod:`fedbandits.serve.shuffling`), which ``sdp-amplification`` needs."""
        if policy not in POLICIES:
            raise ServeError(400, f"budget policy must be one of {list(POLICIES)}, got {policy!r}")
        # refuses the protocols an agent does not sync with, and sdp-amplification without a shuffler
        setup = AgentSetup.from_config(config, entry, shuffler=shuffler)
        if shuffler and not setup.shuffled:
            raise ServeError(400, f"a shuffler is for protocol 'sdp-amplification', not {setup.protocol!r}")
        if setup.shuffled and policy != "stop":
            raise ServeError(
                400, "budget policy: the shuffler numbers the rounds of one budget epoch; sdp-amplification uses 'stop'"
            )
        if setup.federated and not setup.private and not allow_unprivatized:
            raise ServeError(
                400,
                "protocol 'none' sends the silo's exact statistics to the server; "
                "pass allow_unprivatized (--allow-unprivatized) to opt in",
            )
        if isinstance(silo, bool) or not isinstance(silo, int) or not 0 <= silo < setup.silos:
            raise ServeError(400, f"silo must be an integer in [0, {setup.silos}) ([environment] agents), got {silo!r}")
        return setup

    def __init__(
        self,
        config: Config | dict[str, object] | str | Path,
        state_dir: Path,
        *,
        entry: str | None = None,
        silo: int = 0,
        expiry_seconds: float = 86400.0,
        policy: str = "stop",
        durability: str = "process",
        allow_unprivatized: bool = False,
        shuffler: bool = False,
        signing: tuple[Identity, Authority] | None = None,
        now: Callable[[], float] = time.time,
        log_candidates: bool = False,
        store: str | None = None,
    ) -> None:
        """``store``: a PostgreSQL URL, the log this silo's replicas share (:mod:`fedbandits.serve.pgstore`);
        by default the SQLite log ``events.sqlite`` in ``state_dir``.  ``signing``: this silo's signing
        identity and the pinned signing CA, which
        ``distributed-dp`` needs (its secure aggregation's keys are signed: :mod:`fedbandits.serve.masking`).
        ``log_candidates``: keep every decision's candidate features in the log (the operator's opt-in:
        the users' contexts stay in the silo's log, which ``fedbandits evaluate`` can then read)."""
        setup = self.check(config, entry, silo, policy, allow_unprivatized, shuffler)
        if setup.masked and signing is None:
            raise ServeError(400, "distributed-dp needs the silo's signing key, certificate and signing CA")
        if signing is not None and not setup.masked:
            raise ServeError(400, f"a signing identity is for protocol 'distributed-dp', not {setup.protocol!r}")
        if signing is not None and signing[0].silo != silo:
            raise ServeError(400, f"the signing identity is silo {signing[0].silo}'s, not silo {silo}'s")
        self.signing = signing
        self.log_candidates = bool(log_candidates)
        self.setup = setup
        self.policy = policy
        self.clock = Clock(now)
        sqlite = Path(state_dir) / "events.sqlite"
        self.store: Store = Store(sqlite, durability) if store is None else PgStore(store, durability)
        self.broken: str | None = None
        identity = json.dumps({"config": setup.config.to_dict(), "entry": setup.label, "silo": silo}, sort_keys=True)
        #: the coordinator's binding of secure aggregation to this federation (config and entry)
        self.context = federation_context(setup)
        #: the log's state-change count and last event this silo's agent holds (fedbandits.serve.store)
        self.version, self.applied, self.replayed, self.recoveries, self._tried = 0, 0, 0, 0, 0.0
        #: a shared log: the age of the other replicas' events when this one read them (its freshness)
        self.lag = Latencies()
        #: a shared log: whether this replica answered the last sync round (it draws the next one's noise)
        self.leading = not self.store.shared
        #: distributed-dp: this silo's side of secure aggregation, kept in the log (meta "masking"; a
        #: log from before issue #45 holds the all-present protocol's state as "secagg": not used)
        self.secagg: MaskingSilo | None = None
        try:
            with self.store.transaction():  # one replica at a time: the first one creates the agent
                known = self.store.meta("identity")
                if known is not None and known != identity:
                    if not _same_identity(known, identity):
                        raise StoreError(f"{state_dir}: the event log belongs to another config, entry or silo")
                    self.store.put_meta({"identity": identity})  # a parameter added since, at its default
                if self.store.snapshot() is None:
                    fresh = Agent(setup, silo=silo, expiry_seconds=expiry_seconds, clock=self.clock)
                    self.store.add_snapshot(fresh.snapshot(pending=False))
                    self.store.put_meta({"identity": identity})
                self._load()
        except StoreError:
            self.store.close()
            raise
        self.started = self.clock()
        self.last_contact: float | None = None

    # -- recovery ----------------------------------------------------------------------------
    def _load(self, news: list[Event] | None = None) -> None:
        """The agent, the prefix in force and secure aggregation's state as the log has them: the newest
        snapshot and the events after it (a start, a replica's catch-up after another one's release,
        adoption or secure-aggregation step, a recovery).  Inside a transaction (a consistent read).
        ``news``: a replica's catch-up, the events after those its agent holds, just read."""
        snap = self.store.snapshot()
        assert snap is not None
        seq, state = snap
        # snapshots hold no pending decision, so loading shifts no deadline (the clock is the wall clock)
        agent = Agent.load(state, clock=self.clock)
        if news is not None and pending.carried(agent, seq, self.agent, self.applied, news):
            after: Iterable[Event] = [e for e in news if e.seq > seq]  # read already
        else:
            pending.from_log(self.store, agent, seq)
            after = self.store.events_after(seq)
        self.agent, self.applied, n = agent, seq, 0
        for event in after:
            self._apply(event)
            n += 1
        self.replayed = n
        #: (epoch, round, time) of the prefix in force, as the log has it
        self.prefix_in_force = self.store.last_prefix()
        self.version = self.store.version()
        if self.signing is not None:
            cal = self.setup.calibration
            assert isinstance(cal, DistributedCalibration)
            least = self.setup.silos - cal.dropouts
            self.secagg = MaskingSilo(
                agent.silo, cal.bits, self.setup.width, self.context, *self.signing,
                colluders=cal.colluders, min_survivors=least,
            )  # fmt: skip
            text = self.store.meta("masking")
            if text is not None:
                silo_state_from_text(text, self.secagg, self.setup.silos)

    def _apply(self, event: Event) -> None:
        """One logged event, on the time it was logged at (a replay, or another replica's event)."""
        agent = self.agent
        self.clock.pinned = event.at
        try:
            if event.kind == "decision":
                assert event.x is not None
                agent.recall(event.number, np.frombuffer(event.x), event.at + agent.expiry_seconds, user=event.user)
            elif event.kind == "reward":
                agent.reward(f"{agent.instance}-{event.number}", float(event.value or 0.0))
            else:  # a late reward: refused again, counted again
                with contextlib.suppress(ExpiredDecision):
                    agent.reward(f"{agent.instance}-{event.number}", float(event.value or 0.0))
        finally:
            self.clock.pinned = None
        self.applied = event.seq

    def _catch_up(self) -> None:
        """Under the write lock, a shared log: what the silo's other replicas committed since this one
        last read it -- their events, or (after a release, an adoption, a secure-aggregation step) the
        state they left.  Every change this replica makes starts here, so it never acts on a model
        behind the log (the freshness bound: zero committed events)."""
        if not self.store.shared:
            return
        version, events = self.store.news(self.applied)
        if version != self.version:
            self._load(events)
            self.leading = False  # another replica released, adopted or took a secure-aggregation step
            return
        now = self.clock.now()
        for event in events:
            self.lag.add(max(0.0, now - event.at))  # how long after its commit this replica read it
            self._apply(event)

    def close(self) -> None:
        self.store.close()

    def refresh(self) -> None:
        """What the silo's other replicas committed, read now (a shared log; otherwise nothing to read)."""
        self._usable()
        self._write(lambda: None)

    # -- traffic -----------------------------------------------------------------------------
    def decide(
        self, features: np.ndarray, context_id: str | None = None, user_id: int | str | None = None
    ) -> tuple[int, str, float]:
        """(arm, decision id, the probability the arm was chosen with).  ``user_id``: the user served,
        required with ``privacy_unit = "user"`` (the log keeps its digest)."""
        self._usable()
        return self._write(self.decision(features, context_id, user_id))

    def decision(
        self, features: np.ndarray, context_id: str | None = None, user_id: int | str | None = None
    ) -> Callable[[], tuple[int, str, float]]:
        """:meth:`decide`'s change, as a step of a transaction (:meth:`write_many`)."""

        def step() -> tuple[int, str, float]:
            now = self.clock.now()  # under the write lock: the log's times rise with its numbers
            self.clock.pinned = now
            try:
                decision = self.agent.choose(features, context_id=context_id, user_id=user_id)
            except AgentError as exc:
                raise ServeError(422, str(exc)) from None
            finally:
                self.clock.pinned = None
            number = self.agent.counts["sequence"] - 1
            user = self.agent.pending_users.get(number)  # the digest choose() computed (user-level), else None
            shown = features if self.log_candidates else None
            self.applied = self.store.add_event(
                now, "decision", number, features[decision.arm], None, context_id, user,
                decision.arm, decision.propensity, shown,
            )  # fmt: skip
            return decision.arm, decision.decision_id, decision.propensity

        return step

    def reward(self, decision_id: str, value: float, name: str = "reward") -> None:
        """Complete ``decision_id``; a refused value (422) is named ``name``, the request's field."""
        self._usable()
        late = self._write(self.rewarding(decision_id, value, name))
        if late is not None:  # logged and committed first
            raise late

    def rewarding(self, decision_id: str, value: float, name: str = "reward") -> Callable[[], ServeError | None]:
        """:meth:`reward`'s change, as a step of a transaction (:meth:`write_many`): None, or a late
        reward's refusal (410), which it logged."""

        def step() -> ServeError | None:
            agent = self.agent
            try:
                number = agent.decision_number(decision_id)
            except AgentError as exc:
                raise ServeError(404, str(exc)) from None
            now = self.clock.now()
            self.clock.pinned = now
            try:
                agent.reward(decision_id, value, field=name)  # a bad value: 422 naming the request's field
            except ExpiredDecision as exc:  # counted by the agent: logged, so that a restart counts it too
                self.applied = self.store.add_event(now, "late", number, None, value)
                return ServeError(410, str(exc))
            except AlreadyRewarded as exc:
                raise ServeError(409, str(exc)) from None
            except AgentError as exc:
                raise ServeError(422, str(exc)) from None
            finally:
                self.clock.pinned = None
            self.applied = self.store.add_event(now, "reward", number, None, value)
            return None

        return step

    # -- federation --------------------------------------------------------------------------
    def position(self) -> tuple[int, int]:
        """(epoch, round) of this silo's next release."""
        c = self.agent.counts
        return c["epochs"], c["syncs"] - c["epoch_start"]

    def release(self, epoch: int, round_: int) -> tuple[np.ndarray, int]:
        """The release of sync round ``(epoch, round_)`` and how many completed decisions it holds."""
        self._usable()
        if not self.setup.federated:
            raise ServeError(409, f"{self.setup.name!r} does not synchronise")
        self.last_contact = self.clock.now()
        return self._write(lambda: self._release(epoch, round_))

    def _release(self, epoch: int, round_: int) -> tuple[np.ndarray, int]:
        self.leading = True  # after the catch-up: this replica draws the next round's noise ahead
        stored = self.store.release(epoch, round_)
        if stored is not None:
            return stored.payload, stored.samples
        agent = self.agent
        renew = False
        if agent.budget_spent():
            if self.policy == "stop":
                epoch_now = agent.counts["epochs"]
                raise ServeError(409, f"budget spent: epoch {epoch_now}'s releases are all made (policy stop)")
            renew = (epoch, round_) == (agent.counts["epochs"] + 1, 0)
        expected = (agent.counts["epochs"] + 1, 0) if renew or agent.budget_spent() else self.position()
        if (epoch, round_) != expected:
            raise ServeError(409, f"round: this silo's next release is epoch {expected[0]} round {expected[1]}")
        secagg = self.secagg
        if secagg is not None and secagg.roster is None:
            raise ServeError(409, "secure aggregation is not set up yet (keys, roster)")
        if renew:
            agent.new_epoch()
        samples = len(agent.completed)
        payload = agent.sync_payload()
        if secagg is not None:  # the residues leave the silo masked: the coordinator learns only their sum
            payload = secagg.mask(mask_round(epoch, round_), payload).masked
        self.store.add_release(epoch, round_, payload, samples)
        if secagg is not None:
            self._keep_secagg()
        self._snapshot()
        return payload, samples

    # -- secure aggregation (distributed-dp; fedbandits.serve.masking) -----------------------------
    def masked_release(self, epoch: int, round_: int) -> tuple[Masked | None, int, str]:
        """Release ``(epoch, round_)`` masked, with its sample count; or None and why it is withdrawn:
        it was masked under an earlier key set-up or protocol, and it enters one masked sum, ever."""
        secagg = self._masked()
        payload, samples = self.release(epoch, round_)
        record = secagg.rounds.get(mask_round(epoch, round_))
        if record is None or not np.array_equal(record.message.masked, payload):
            why = (
                f"release {epoch}.{round_} was masked under an earlier key set-up or protocol: it enters one "
                "masked sum, ever (withdrawn)"
            )
            return None, samples, why
        return record.message, samples, ""

    def secagg_keys(self, secagg_epoch: int) -> Advert | int:
        """This silo's public keys for set-up ``secagg_epoch``, signed (the same ones when asked again);
        for a set-up older than one it has advertised or joined, the first it would advertise for
        (a coordinator that lost its state learns where to start)."""
        secagg = self._masked()
        first = max(secagg.joined + 1, secagg.offered)
        if isinstance(secagg_epoch, int) and 0 < secagg_epoch < first:
            self.last_contact = self.clock.now()
            return first
        return self._secagg_step(lambda c: c.advertise(secagg_epoch), 409)

    def secagg_roster(self, roster: SignedRoster) -> None:
        """Check the roster (every member's signed keys, the threshold) and join it."""
        if roster.context != self._masked().context:
            raise ServeError(422, "roster: it belongs to another federation (config or entry)")
        self._secagg_step(lambda c: c.join(roster), 422)

    def secagg_survivors(self, epoch: int, round_: int, survivors: object) -> bytes:
        """This silo's signature of round ``(epoch, round_)``'s survivor list (one list per round)."""
        return self._secagg_step(lambda c: c.sign_survivors(mask_round(epoch, round_), survivors), 422)

    def secagg_unmask(
        self,
        epoch: int,
        round_: int,
        survivors: object,
        dropped: object,
        signatures: dict[int, bytes],
        held: dict[int, bytes],
    ) -> Reveal:
        """This silo's unmask answer for round ``(epoch, round_)`` (:mod:`fedbandits.crypto.double_masking`)."""
        r = mask_round(epoch, round_)
        return self._secagg_step(lambda c: c.unmask(r, survivors, dropped, signatures, held), 422)

    def _secagg_step(self, call: Callable[[MaskingSilo], _T], status: int) -> _T:
        """One secure-aggregation step: refused with its reason (``status``; nothing changed), or
        committed to the log before its answer leaves the silo."""
        self._masked()
        self.last_contact = self.clock.now()

        def step() -> _T:
            secagg = self._masked()  # after the catch-up: the state another replica may have left
            try:
                out = call(secagg)
            except SecAggError as exc:
                raise ServeError(status, str(exc)) from None
            self._keep_secagg()
            return out

        return self._write(step)

    def _keep_secagg(self) -> None:
        assert self.secagg is not None
        self.store.put_meta({"masking": silo_state_to_text(self.secagg)})
        self.version = self.store.bump()

    def _masked(self) -> MaskingSilo:
        self._usable()
        if self.secagg is None:
            raise ServeError(409, f"protocol {self.setup.protocol!r} does not use secure aggregation")
        return self.secagg

    def adopt(self, epoch: int, round_: int, prefix: np.ndarray) -> bool:
        """Adopt the prefix of closed round ``(epoch, round_)``; False if a later one is already in force."""
        self._usable()
        if not self.setup.federated:
            raise ServeError(409, f"{self.setup.name!r} does not synchronise")
        self.last_contact = self.clock.now()

        def step() -> bool:
            last = self.prefix_in_force
            if last is not None and (epoch, round_) <= last[:2]:
                return False
            try:
                self.agent.apply_sync(prefix)
            except AgentError as exc:
                raise ServeError(422, str(exc)) from None
            self.store.add_prefix(epoch, round_)
            self._snapshot()
            self.prefix_in_force = self.store.last_prefix()
            return True

        return self._write(step)

    def model_version(self) -> str | None:
        """``"epoch.round"`` of the prefix in force (None before the first)."""
        last = self.prefix_in_force
        return None if last is None else f"{last[0]}.{last[1]}"

    def prepare_noise(self) -> bool:
        """Draw one entry of the next release's secret noise ahead (``ldp``); False when none is left to
        draw.  The service calls it between requests, so a release costs no sampling.  A replica draws
        only after it answered a sync round: another one's release or adoption reloads this one's agent,
        dropping what it drew, and a replica answering a round it did not expect draws at its release."""
        r = self.agent.randomizer
        return self.leading and isinstance(r, DrawsAhead) and not self.agent.budget_spent() and r.prepare()

    # -- reports -----------------------------------------------------------------------------
    def status(self, sync_seconds: float | None = None) -> dict[str, object]:
        out = dict(self.agent.status())
        last = self.prefix_in_force
        out["model_version"] = self.model_version()
        out["last_sync"] = None if last is None else last[2]
        out["budget_policy"] = self.policy
        out["replayed_events"] = self.replayed
        if self.setup.federated:
            if self.agent.budget_spent() and self.policy == "stop":
                out["syncing"] = "stopped: budget spent (policy stop), serving from the last prefix"
            elif sync_seconds is not None and self._overdue(sync_seconds):
                out["syncing"] = "server unreachable: serving from the last prefix"
            else:
                out["syncing"] = "active"
        if self.store.shared:  # a replica: how fresh its statistics were when it read the others' events
            lag = self.lag.percentiles()  # milliseconds
            out["replica"] = {"store": self.store.where(), "lag_ms": lag, "recoveries": self.recoveries}
        if self.broken:
            out["broken"] = self.broken
        return out

    def _overdue(self, sync_seconds: float) -> bool:
        since = self.last_contact if self.last_contact is not None else self.started
        return self.clock.now() - since > 3 * sync_seconds

    # -- internals ---------------------------------------------------------------------------
    def _snapshot(self) -> None:
        # without the pending decisions (the log has them): a snapshot costs the learned state, not the
        # number of users yet to answer.  Overdue ones are expired first, so "pending" is exact at this time
        self.agent.status()
        pending_from = min(self.agent.pending, default=self.agent.counts["sequence"])
        self.store.add_snapshot(self.agent.snapshot(pending=False), pending_from)
        self.version = self.store.bump()  # the other replicas reload it

    def _usable(self) -> None:
        if self.broken and not self.recover():
            raise ServeError(503, f"the event log failed ({self.broken}); {self._remedy()}")

    def _remedy(self) -> str:
        return "retrying (at most once a second)" if self.store.shared else "restart the service"

    def recover(self) -> bool:
        """A shared log (PostgreSQL) that failed: connect again and reload the agent from the log (as a
        restart would), at most once a second; whether the silo serves again.  A SQLite silo is restarted."""
        if not self.broken:
            return True
        if not self.store.shared or time.monotonic() - self._tried < self.RETRY_SECONDS:
            return False
        self._tried = time.monotonic()
        try:
            self.store.reopen()
            with self.store.transaction():
                self._load()
        except Exception as exc:  # still down: the next request tries again
            self.broken = _described(exc)
            return False
        self.broken = None
        self.recoveries += 1
        return True

    def write_many(self, steps: list[Callable[[], object]]) -> list[object]:
        """Several requests' steps (:meth:`decision`, :meth:`rewarding`) in one transaction -- on a
        shared log, the requests a replica's service took together: one lock, one catch-up, one insert
        and one commit for all (fedbandits.serve.http).  Each step's result, or its refusal (a
        ServeError; it changed nothing), in order; a failed write fails them all (503), none acknowledged."""
        self._usable()

        def step() -> list[object]:
            out: list[object] = []
            for one in steps:
                try:
                    out.append(one())
                except ServeError as exc:
                    out.append(exc)
            return out

        return self._write(step)

    def _write(self, step: Callable[[], _T]) -> _T:
        """``step`` -- it may change the agent, and writes what it changed to the log -- in one transaction
        under the log's write lock, after what the silo's other replicas committed (a shared log), and
        committed before this returns.  A ServeError from ``step`` is a refusal that changed nothing: the
        transaction rolls back and it passes; any other failure stops the silo (503): memory may hold
        what the log does not."""
        try:
            with self.store.transaction():
                self._catch_up()
                return step()
        except ServeError:
            raise
        except Exception as exc:
            raise self.failed(exc) from None

    def failed(self, exc: BaseException) -> ServeError:
        """The event log failed (a write, or a read: a full disk, a closed connection): the silo refuses
        everything from now on (503) until it is restarted on its log, which resumes exactly."""
        if not self.broken:
            self.broken = _described(exc)
        return ServeError(503, f"the event log failed ({self.broken}); {self._remedy()}")


def _described(exc: BaseException) -> str:
    """A failure of the log in one line (the 503's text and the status' ``broken``)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _same_identity(known: str, identity: str) -> bool:
    """Whether a log's stored identity names this config, entry and silo once validated again: a log
    written before a parameter was added (at its default since) states fewer keys, not another config."""
    try:
        old, new = json.loads(known), json.loads(identity)
        again = config_from_dict(old["config"]).to_dict()
    except (ValueError, KeyError, TypeError):
        return False
    return bool(again == new["config"] and old.get("entry") == new["entry"] and old.get("silo") == new["silo"])
