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
release (or waits for the next).  If a commit fails the silo refuses everything (503) until it is
restarted: memory may then hold what the log does not.

Budget epochs (issue "Live decisions, part 2", item 3): a private protocol's noise is calibrated
for K releases.  When they are made, policy ``stop`` keeps serving from the last prefix and
refuses further releases; policy ``renew`` starts epoch e + 1 when the server asks for it (a
fresh randomizer; the lifetime epsilon is the sum of the epochs', shown in the status).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedbandits.config import Config
from fedbandits.crypto.double_masking import Advert, SignedRoster, advert_bytes, roster_problem
from fedbandits.crypto.secure_aggregation import SecAggClient, SecAggError
from fedbandits.crypto.signing import Authority, Identity
from fedbandits.online import Agent, AgentError, AgentSetup
from fedbandits.online.inputs import AlreadyRewarded, ExpiredDecision
from fedbandits.privacy.discrete_gaussian import SecretTreeRandomizer
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.serve.masking import client_from_text, client_to_text, federation_context, keyed, mask_round, unkeyed
from fedbandits.serve.options import POLICIES
from fedbandits.serve.store import Store, StoreError


class ServeError(ValueError):
    """A request the silo refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def public_key(private: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


class Clock:
    """Wall-clock seconds (deadlines survive restarts), pinned to a recorded time during replay."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.pinned: float | None = None

    def __call__(self) -> float:
        return self.now() if self.pinned is None else self.pinned


class ServingSilo:
    """One silo's agent and event log.  Not thread-safe: the service calls it from one thread."""

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
    ) -> None:
        """``signing``: this silo's signing identity and the pinned signing CA, which
        ``distributed-dp`` needs (its secure aggregation's keys are signed: :mod:`fedbandits.serve.masking`)."""
        setup = self.check(config, entry, silo, policy, allow_unprivatized, shuffler)
        if setup.masked and signing is None:
            raise ServeError(400, "distributed-dp needs the silo's signing key, certificate and signing CA")
        if signing is not None and not setup.masked:
            raise ServeError(400, f"a signing identity is for protocol 'distributed-dp', not {setup.protocol!r}")
        if signing is not None and signing[0].silo != silo:
            raise ServeError(400, f"the signing identity is silo {signing[0].silo}'s, not silo {silo}'s")
        self.signing = signing
        self.setup = setup
        self.policy = policy
        self.clock = Clock(now)
        self.store = Store(Path(state_dir) / "events.sqlite", durability)
        self.broken: str | None = None
        identity = json.dumps({"config": setup.config.to_dict(), "entry": setup.label, "silo": silo}, sort_keys=True)
        #: the coordinator's binding of secure aggregation to this federation (config and entry)
        self.context = federation_context(setup)
        known = self.store.meta("identity")
        if known is not None and known != identity:
            self.store.close()
            raise StoreError(f"{state_dir}: the event log belongs to another config, entry or silo")
        snap = self.store.snapshot()
        if snap is None:
            self.agent = Agent(setup, silo=silo, expiry_seconds=expiry_seconds, clock=self.clock)
            with self.store.transaction():
                self.store.add_snapshot(self.agent.snapshot(pending=False))
            self.store.set_meta({"identity": identity})
            self.replayed = 0
        else:
            self.agent = self._replay(*snap)
        self.started = self.clock()
        self.last_contact: float | None = None
        #: (epoch, round, time) of the prefix in force, as the log has it (read once here, kept by adopt)
        self.prefix_in_force = self.store.last_prefix()
        #: distributed-dp: this silo's side of secure aggregation, kept in the log (meta "secagg")
        self.secagg: SecAggClient | None = None
        text = self.store.meta("secagg") if setup.masked else None
        if text is not None:
            self.secagg = client_from_text(text, setup.silos)

    # -- recovery ----------------------------------------------------------------------------
    def _replay(self, seq: int, state: bytes) -> Agent:
        # snapshots hold no pending decision, so loading shifts no deadline (the clock is the wall clock)
        agent = Agent.load(state, clock=self.clock)
        # the snapshot leaves pending decisions out: re-enter those the log shows unanswered and unexpired
        for number, at, x, user in self.store.unanswered(seq):
            if number not in agent.expired:
                agent.recall(number, np.frombuffer(x), at + agent.expiry_seconds, counted=True, user=user)
        n = 0
        for event in self.store.events_after(seq):
            self.clock.pinned = event.at
            if event.kind == "decision":
                assert event.x is not None
                agent.recall(event.number, np.frombuffer(event.x), event.at + agent.expiry_seconds, user=event.user)
            elif event.kind == "reward":
                agent.reward(f"{agent.instance}-{event.number}", float(event.value or 0.0))
            else:  # a late reward: refused again, counted again
                try:
                    agent.reward(f"{agent.instance}-{event.number}", float(event.value or 0.0))
                except ExpiredDecision:
                    pass
            n += 1
        self.clock.pinned = None
        self.replayed = n
        return agent

    def close(self) -> None:
        self.store.close()

    # -- traffic -----------------------------------------------------------------------------
    def decide(
        self, features: np.ndarray, context_id: str | None = None, user_id: int | str | None = None
    ) -> tuple[int, str, np.ndarray]:
        """``user_id``: the user served, required with ``privacy_unit = "user"`` (the log keeps its digest)."""
        self._usable()
        now = self.clock.now()
        self.clock.pinned = now
        try:
            decision = self.agent.choose(features, context_id=context_id, user_id=user_id)
        except AgentError as exc:
            raise ServeError(422, str(exc)) from None
        finally:
            self.clock.pinned = None
        number = self.agent.counts["sequence"] - 1
        user = self.agent.pending_users.get(number)  # the digest choose() computed (user-level), else None
        self._commit(
            lambda: self.store.add_event(now, "decision", number, features[decision.arm], None, context_id, user)
        )
        return decision.arm, decision.decision_id, decision.scores

    def reward(self, decision_id: str, value: float) -> None:
        self._usable()
        agent = self.agent
        try:
            number = agent.decision_number(decision_id)
        except AgentError as exc:
            raise ServeError(404, str(exc)) from None
        now = self.clock.now()
        self.clock.pinned = now
        try:
            agent.reward(decision_id, value)
        except ExpiredDecision as exc:  # counted by the agent: logged, so that a restart counts it too
            self._commit(lambda: self.store.add_event(now, "late", number, None, value))
            raise ServeError(410, str(exc)) from None
        except AlreadyRewarded as exc:
            raise ServeError(409, str(exc)) from None
        except AgentError as exc:
            raise ServeError(422, str(exc)) from None
        finally:
            self.clock.pinned = None
        self._commit(lambda: self.store.add_event(now, "reward", number, None, value))

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
        if self.setup.masked and (secagg is None or secagg.roster is None or not secagg.held):
            raise ServeError(409, "secure aggregation is not set up yet (keys, roster, shares)")
        if renew:
            agent.new_epoch()
        samples = len(agent.completed)
        payload = agent.sync_payload()
        if secagg is not None:  # the residues leave the silo masked: the coordinator learns only their sum
            payload = secagg.mask(mask_round(epoch, round_), payload)

        def write() -> None:
            self.store.add_release(epoch, round_, payload, samples)
            self._snapshot()

        self._commit(write)
        return payload, samples

    # -- secure aggregation (distributed-dp; fedbandits.serve.masking) -----------------------------
    def secagg_keys(self, secagg_epoch: int) -> Advert:
        """Step 1: this silo's public keys for set-up ``secagg_epoch``, signed (the same ones when asked again)."""
        self._masked()
        self.last_contact = self.clock.now()
        client = self.secagg
        if client is None or self.store.meta("secagg_epoch") != str(secagg_epoch):
            cal = self.setup.calibration
            assert isinstance(cal, DistributedCalibration)
            client = SecAggClient(self.agent.silo, cal.bits, self.setup.width)
            client.advertise()
            self._commit(lambda: self._keep_secagg(client, {"secagg_epoch": str(secagg_epoch), "secagg_shares": ""}))
            self.secagg = client
        assert self.signing is not None
        identity = self.signing[0]
        c_public, s_public = public_key(client.c_private), public_key(client.s_private)
        signature = identity.sign(advert_bytes(self.context, secagg_epoch, self.agent.silo, c_public, s_public))
        return Advert(c_public, s_public, identity.cert, signature)

    def secagg_roster(self, roster: SignedRoster) -> dict[int, bytes]:
        """Step 2: check every member's signed keys, then this silo's encrypted shares of its mask key,
        one per member (stored: a retry gets them)."""
        self._masked()
        client = self.secagg
        if client is None or self.store.meta("secagg_epoch") != str(roster.epoch):
            raise ServeError(409, f"roster: this silo has no keys for set-up {roster.epoch}")
        stored = self.store.meta("secagg_shares")
        if client.roster == roster and stored:
            return keyed(json.loads(stored), "secagg_shares")
        if roster.context != self.context:
            raise ServeError(422, "roster: it belongs to another federation (config or entry)")
        assert self.signing is not None
        cal = self.setup.calibration
        assert isinstance(cal, DistributedCalibration)
        keys = (public_key(client.c_private), public_key(client.s_private))
        reason = roster_problem(
            roster, self.signing[1], self.agent.silo, keys, cal.colluders, self.setup.silos - cal.dropouts
        )
        if reason is not None:
            raise ServeError(422, reason)
        try:
            shares = client.share(roster)
        except SecAggError as exc:
            raise ServeError(422, f"roster: {exc}") from None
        self._commit(lambda: self._keep_secagg(client, {"secagg_shares": json.dumps(unkeyed(shares))}))
        return shares

    def secagg_shares(self, shares: dict[int, bytes]) -> None:
        """Step 2, the other way: the shares the other members addressed to this silo."""
        self._masked()
        client = self.secagg
        if client is None or client.roster is None:
            raise ServeError(409, "shares: no roster yet")
        if set(shares) != set(client.roster.members):
            raise ServeError(400, f"shares: must hold one share from each of silos {client.roster.members}")
        try:
            client.receive(shares)
        except SecAggError as exc:
            raise ServeError(422, f"shares: {exc}") from None
        self._commit(lambda: self._keep_secagg(client, {}))

    def _keep_secagg(self, client: SecAggClient, extra: dict[str, str]) -> None:
        self.store.db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [("secagg", client_to_text(client)), *extra.items()]
        )

    def _masked(self) -> None:
        self._usable()
        if not self.setup.masked:
            raise ServeError(409, f"protocol {self.setup.protocol!r} does not use secure aggregation")

    def adopt(self, epoch: int, round_: int, prefix: np.ndarray) -> bool:
        """Adopt the prefix of closed round ``(epoch, round_)``; False if a later one is already in force."""
        self._usable()
        if not self.setup.federated:
            raise ServeError(409, f"{self.setup.name!r} does not synchronise")
        self.last_contact = self.clock.now()
        last = self.prefix_in_force
        if last is not None and (epoch, round_) <= last[:2]:
            return False
        try:
            self.agent.apply_sync(prefix)
        except AgentError as exc:
            raise ServeError(422, str(exc)) from None

        def write() -> None:
            self.store.add_prefix(epoch, round_)
            self._snapshot()

        self._commit(write)
        self.prefix_in_force = self.store.last_prefix()
        return True

    def model_version(self) -> str | None:
        """``"epoch.round"`` of the prefix in force (None before the first)."""
        last = self.prefix_in_force
        return None if last is None else f"{last[0]}.{last[1]}"

    def prepare_noise(self) -> bool:
        """Draw one entry of the next release's secret noise ahead (``ldp``); False when none is left to
        draw.  The service calls it between requests, so a release costs no sampling."""
        r = self.agent.randomizer
        return isinstance(r, SecretTreeRandomizer) and not self.agent.budget_spent() and r.prepare()

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
        self.store.add_snapshot(self.agent.snapshot(pending=False))

    def _usable(self) -> None:
        if self.broken:
            raise ServeError(503, f"the event log failed ({self.broken}); restart the service")

    def _commit(self, write: Callable[[], object]) -> None:
        try:
            with self.store.transaction():
                write()
        except Exception as exc:  # the agent changed and the log did not: stop acknowledging anything
            self.broken = f"{type(exc).__name__}: {exc}"
            raise ServeError(503, f"the event log failed ({self.broken}); restart the service") from None
