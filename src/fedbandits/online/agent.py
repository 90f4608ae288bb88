"""An online agent: one silo's live decisions (choose now, reward later), LinUCB or FedLinUCB.

The simulator's :class:`~fedbandits.algorithms.fedlinucb.FedLinUCB` plays all runs x agents in
lock step; an :class:`Agent` is one of those agents taken out of the loop.  It keeps the same
pieces -- the ridge state kept by Sherman-Morrison (:class:`~fedbandits.core.ridge.RidgeState`,
updated by its one-learner form :func:`~fedbandits.core.ridge.rank_one_update`), the fused
``[V^-1 | theta]`` scoring (:func:`~fedbandits.core.ucb.score_one`, :class:`~fedbandits.core.ucb.UCBScorer`'s
arithmetic for one learner; the projection is built once per state change, not per decision), the
clipping rule, the silo's local randomizer (tree p-sums with Gaussian noise, or distributed-dp shares)
-- so that, fed the simulator's stream with rewards posted at once and a seed (``derived`` noise),
it makes the simulator's choices and releases its statistics (tests/test_online_parity.py).
Without a seed (the default) the noise is the deployed silo's secret noise: an exact discrete
Gaussian drawn from the OS CSPRNG (``noise_source = "os"``).  Decisions and rewards:

* :meth:`Agent.choose` scores the K candidate arms and returns a :class:`Decision`; the chosen
  arm's features wait, under the decision's id, for its reward.
* :meth:`Agent.reward` completes a decision once: the (clipped) observation enters the batch
  statistics of the next release, and -- for LinUCB and non-lazy FedLinUCB -- the agent's own
  state.  A decision not rewarded within ``expiry_seconds`` expires: counted, never learned from.
* :meth:`Agent.sync_payload` releases the completed decisions since the previous release through
  the configured protocol; :meth:`Agent.apply_sync` adopts the federation's synced prefix.  A lazy
  agent (the default for private protocols) acts on lambda I + the synced prefix only.

User-level privacy (``privacy_unit = "user"``, ``max_contributions = m``): every decision names its
user (``user_id``), and a user's completed decisions enter the releases of one budget epoch at most m
times -- the (m+1)-th and later are served, but their rewards are dropped and counted
(``dropped_contributions``), as the simulator drops a user's visits beyond the m-th.  Contributions
are counted against the epoch of the release they enter (the next release's), so that a decision made
in one epoch and rewarded in the next is capped in the next.  Ids are kept only as keyed digests
(BLAKE2b with a secret of the agent's, saved with its state): a digest cannot be matched to an id by
enumerating ids without that secret.  Every input is checked before anything changes: a bad one
raises :class:`AgentError` (a ``ValueError``) naming the field, and the agent is as it was.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

import fedbandits.online.state as statefile
from fedbandits.config import Config
from fedbandits.core.clipping import ROUNDING, centred
from fedbandits.core.ridge import RidgeState, raise_eigenvalues, rank_one_update
from fedbandits.core.ucb import projection, score_one
from fedbandits.online.choice import Chooser
from fedbandits.online.inputs import (
    AgentError,
    AlreadyRewarded,
    ExpiredDecision,
    check_features,
    check_logs,
    check_prefix,
    check_reward,
    user_key,
)
from fedbandits.online.setup import AgentSetup, Randomizer
from fedbandits.online.status import report as agent_status
from fedbandits.privacy.mechanisms import pack, unpack


@dataclass(frozen=True)
class Decision:
    """One choice: the arm (index into the features given), its id for :meth:`Agent.reward`,
    and every arm's UCB score ``(K,)`` (float32, as the simulator scores; with a ``reward_offset`` c the
    model fits y - c, and c is added back so the scores are on the rewards' scale), and the choice's
    propensity (:mod:`fedbandits.online.choice`)."""

    arm: int
    decision_id: str
    scores: np.ndarray
    context_id: str | None = None
    #: the probability with which the arm was chosen (1 for ``ucb``; exact for epsilon-greedy and
    #: softmax; Thompson sampling's K > 2 a Monte Carlo estimate, its standard error beside it)
    propensity: float = 1.0
    propensity_error: float = 0.0


class Agent:
    """One silo's online LinUCB / FedLinUCB learner.  Build it with :meth:`from_config`."""

    def __init__(
        self,
        setup: AgentSetup,
        *,
        silo: int = 0,
        seed: int | None = None,
        expiry_seconds: float = 86400.0,
        clock: Callable[[], float] = time.monotonic,
        clip_rewards: bool = False,
        run: int = 0,
    ) -> None:
        """``run``: with a ``seed``, the simulator's run whose noise stream of silo ``silo`` this agent
        draws (a deployment of run r; 0 otherwise)."""
        if isinstance(silo, bool) or not isinstance(silo, int) or not 0 <= silo < setup.silos:
            raise AgentError(f"silo must be an integer in [0, {setup.silos}) ([environment] agents), got {silo!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise AgentError(f"seed must be an integer >= 0 or None (secret OS randomness), got {seed!r}")
        if isinstance(expiry_seconds, bool) or not isinstance(expiry_seconds, int | float) or not expiry_seconds > 0:
            raise AgentError(f"expiry_seconds must be a number > 0, got {expiry_seconds!r}")
        if not callable(clock):
            raise AgentError("clock must be a callable returning seconds (e.g. time.monotonic)")
        self.setup = setup
        self.silo = silo
        self.expiry_seconds = float(expiry_seconds)
        self.clock = clock
        self.clip_out_of_bound = bool(clip_rewards)
        d = setup.dim
        self.dim = d
        self.reg = setup.reg
        self.private = setup.private
        self.lazy = setup.lazy
        self.federated = setup.federated
        self._radius = setup.radius()
        self.feature_bound = setup.fed_params.feature_bound if self.private else None
        self.reward_bound = setup.fed_params.reward_bound if self.private else None
        self.reward_offset = setup.params.reward_offset  # c: the agent learns from y - c, as the simulator does
        self.state = RidgeState((1,), d, self.reg)
        #: the (clipped) completed decisions since the last release, by decision number: W_i and U_i are
        #: summed from them in decision order at the release, so the order rewards arrive in is irrelevant
        self.completed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.synced_cov = np.zeros((1, d, d))  # W_syn in force
        self.synced_bias = np.zeros((1, d))  # U_syn in force
        #: where the privacy noise comes from: "os" (seed=None, the default: the deployed silo's exact
        #: discrete Gaussian from the OS CSPRNG, nothing secret kept) or "derived" (seed=s: the
        #: simulator's stream, for tests and parity trials -- whoever knows s knows the noise)
        self.noise_source = "os" if seed is None else "derived"
        self.chooser = Chooser(
            setup.params, setup.silos, silo, None if seed is None else setup.choice_stream(seed, run)
        )
        self.randomizer: Randomizer | None = None
        if self.private:
            self.randomizer = setup.randomizer(None if seed is None else setup.noise_stream(silo, seed, run))
        # decision ids carry the agent's instance: another agent's ids are unknown here.  A seeded
        # (test) agent's instance is derived, so two agents built alike issue the same ids
        self.instance = (
            hashlib.sha256(f"{setup.label}:{silo}:{seed}".encode()).hexdigest()[:16]
            if seed is not None
            else secrets.token_hex(8)
        )
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        #: user-level: the key of the user-id digests (secret; a seeded test agent's is derived from its instance)
        self.user_secret = (
            hashlib.sha256(f"user-ids:{self.instance}".encode()).digest()[:32]
            if seed is not None
            else secrets.token_bytes(32)
        )
        self.feature_norm_max = 0.0
        self.pending: dict[int, tuple[np.ndarray, float]] = {}  # decision number -> (x (d,), deadline)
        #: user-level: a pending decision's user key; and per user key, (epoch, contributions to that epoch)
        self.pending_users: dict[int, str] = {}
        self.contributions: dict[str, tuple[int, int]] = {}
        self.expired: set[int] = set()
        self._queue: deque[tuple[float, int]] = deque()  # (deadline, number), oldest first
        self._theta = np.zeros((1, d))
        self._proj = np.zeros((d, d + 1), dtype=np.float32)
        self._stale = True  # theta, [V^-1 | theta] and beta are recomputed at the next decision
        self._beta = 0.0
        self._refresh()

    @classmethod
    def from_config(
        cls,
        config: Config | dict[str, Any] | str | Path,
        *,
        entry: str | None = None,
        silo: int = 0,
        seed: int | None = None,
        expiry_seconds: float = 86400.0,
        clock: Callable[[], float] = time.monotonic,
        clip_rewards: bool = False,
    ) -> Agent:
        """An agent for entry ``entry`` (a label; default the first ``[[algorithms]]`` entry) of a
        config (a Config, a dict or a TOML file's path), validated as ``fedbandits run`` does.

        ``silo``: this agent's index among the ``[environment] agents`` silos.  ``seed``: None (noise
        source ``os``) for the deployed silo's secret noise, an exact discrete Gaussian from the OS
        CSPRNG; an integer s (``derived``) for the simulator's noise stream of silo ``silo`` in run 0
        with ``noise_seed = s`` (tests, parity trials: not secret).  ``clip_rewards``: clip a reward
        outside the private bound [-B, B] and count it (the simulator's behaviour) instead of
        refusing it."""
        setup = AgentSetup.from_config(config, entry)
        return cls(setup, silo=silo, seed=seed, expiry_seconds=expiry_seconds, clock=clock, clip_rewards=clip_rewards)

    # -- decisions ---------------------------------------------------------------------------
    def choose(self, features: Any, *, context_id: str | None = None, user_id: int | str | None = None) -> Decision:
        """Score the K candidate arms ``features (K, d)`` and choose the best (first on ties).

        ``user_id``: the user served (an integer >= 0 or a string); required with ``privacy_unit = "user"``,
        ignored otherwise."""
        x = check_features(features, self.dim)
        key = self._user("user_id", user_id)
        self._expire()
        if self._stale:
            self._refresh()
        scores = score_one(x, self._proj, self._beta)
        number = self.counts["sequence"]
        # on the model's scores, as the simulator chooses (before c is added back)
        estimates = None if self.noise_source == "os" else [int(self.instance, 16), number]
        arm, propensity, error = self.chooser.choose(x, scores, self._theta[0], estimates)
        if self.reward_offset:
            scores = scores + np.float32(self.reward_offset)
        deadline = self.clock() + self.expiry_seconds
        self.pending[number] = (x[arm].astype(np.float64), deadline)
        if key is not None:
            self.pending_users[number] = key
        self._queue.append((deadline, number))
        self.counts["sequence"] = number + 1
        self.counts["decisions"] += 1
        return Decision(arm, f"{self.instance}-{number}", scores, context_id, propensity, error)

    def reward(self, decision_id: str, value: float, *, field: str = "value") -> None:
        """Complete decision ``decision_id`` with reward ``value`` (once; in any order, any delay
        below ``expiry_seconds``).  ``field``: the name a refused value's error gives it (a service
        names its request's field)."""
        number = self._number(decision_id)
        y = self._reward_value(field, value)
        self._expire()
        entry = self.pending.pop(number, None)
        if entry is None:
            if number in self.expired:
                self.counts["late_rewards"] += 1
                raise ExpiredDecision(
                    f"decision_id {decision_id!r} expired (no reward within expiry_seconds = {self.expiry_seconds:g}); "
                    "its reward is refused and counted"
                )
            raise AlreadyRewarded(f"decision_id {decision_id!r} was already rewarded; a decision takes one reward")
        queue = self._queue  # completed decisions at its head wait for no deadline: drop them now
        while queue and queue[0][1] not in self.pending:
            queue.popleft()
        key = self.pending_users.pop(number, None)
        if self._kept(key):
            self._learn(number, entry[0], y)
        self.counts["rewarded"] += 1

    def partial_fit(self, features: Any, arms: Any, rewards: Any, *, user_ids: Any = None) -> None:
        """Learn from logged, completed decisions (like MABWiser's ``partial_fit``).

        ``features``: ``(n, K, d)`` -- every logged candidate set, the chosen one ``arms[i]`` -- or
        ``(n, d)`` -- the chosen arms' features themselves (``arms`` then only checked, may be None).
        ``rewards (n,)``.  ``user_ids (n,)``: each row's user (required with ``privacy_unit = "user"``).
        Each row counts as one completed decision of the next release."""
        x, y = check_logs(features, arms, rewards, self.dim)
        checked = [self._reward_value(f"rewards[{i}]", float(v)) for i, v in enumerate(y)]
        if self.setup.user_level and user_ids is None:
            raise AgentError('user_ids: required (n,) with privacy_unit = "user" (one user id per logged row)')
        try:
            ids = [None] * len(y) if user_ids is None else list(user_ids)
        except TypeError:
            raise AgentError(f"user_ids must be a sequence, one id per row ({len(y)}), got {user_ids!r:.40}") from None
        if len(ids) != len(y):
            raise AgentError(f"user_ids must have one id per row ({len(y)}), got {len(ids)}")
        keys = [self._user(f"user_ids[{i}]", v) for i, v in enumerate(ids)]
        for row, value, key in zip(x, checked, keys, strict=True):
            if self._kept(key):
                self._learn(self.counts["sequence"], row.copy(), value)
            self.counts["sequence"] += 1  # a logged row is a decision made elsewhere: it takes a number
        self.counts["logged"] += len(y)

    # -- synchronisation ---------------------------------------------------------------------
    def sync_payload(self) -> np.ndarray:
        """This silo's release for the next sync round: the batch statistics of the decisions
        completed since the previous release, packed ``(P,)`` (upper triangle of W, then U) and
        privatized by the protocol's local randomizer (``ldp``: a noisy tree p-sum; ``distributed-dp``:
        encoded residues with a noise share, uint64; ``none``: exact)."""
        if not self.federated:
            raise AgentError(f"{self.setup.name!r} does not synchronise: sync_payload needs a fedlinucb entry")
        if self.budget_spent():
            raise AgentError(
                f"sync_payload: the noise is calibrated for K = horizon // batch = {self.setup.releases} releases "
                "per epoch, all made; a new release would exceed the privacy budget (new_epoch() starts another)"
            )
        self._expire()
        local_cov, local_bias = self._batch_statistics()
        gamma = pack(local_cov, local_bias)
        if self.randomizer is not None:
            payload = self.randomizer.release(gamma)[0, 0].copy()
        else:
            payload = gamma[0, 0].copy()
        # the rounds this release covers, as the simulator counts them for the radius: dropped ones too
        self.counts["released_samples"] += len(self.completed) + self.counts["dropped_unreleased"]
        self.counts["dropped_unreleased"] = 0
        self.completed = {}
        self.counts["syncs"] += 1
        return payload

    def skip_release(self, rounds: int) -> None:
        """A release this silo missed while it was down (a deployment's silo, :mod:`fedbandits.federation`):
        the ``rounds`` users of its batch were not served, nothing is sent, and the randomizer's tree
        absorbs its lower levels as an empty batch would (nothing is drawn: nothing is released).  The
        rounds count in the radius's n, as the simulator's clock counts them."""
        if not self.federated or self.budget_spent():
            raise AgentError("skip_release: no release is due (not federated, or this epoch's releases are made)")
        if self.completed or self.pending:
            raise AgentError("skip_release: this batch has decisions; release them (sync_payload) instead")
        if self.randomizer is not None:
            self.randomizer.skip()
        self.counts["released_samples"] += rounds
        self.counts["skipped_samples"] += rounds
        self.counts["syncs"] += 1
        self.counts["skipped_releases"] += 1
        self._stale = True

    def budget_spent(self) -> bool:
        """True when this epoch's K planned releases are all made (a private protocol); never otherwise."""
        releases = self.setup.releases
        return releases is not None and self.counts["syncs"] - self.counts["epoch_start"] >= releases

    def new_epoch(self) -> None:
        """Start a new budget epoch: a fresh local randomizer (a new tree, new secret noise) for K more
        releases, whose (epsilon, delta) adds to the earlier epochs' by basic composition
        (``status()["epsilon_lifetime"]``).  The learned state and the synced prefix are kept; the
        server starts its own new tree and adds its prefix to the earlier epochs' final one.
        Refused with ``derived`` noise (a fresh randomizer would replay the seeded stream) and before
        the epoch's releases are all made (the calibration covers K, not fewer)."""
        if not self.private:
            raise AgentError("new_epoch: only a private protocol has a budget to renew")
        if self.setup.streaming:
            raise AgentError("new_epoch: a streaming release has no budget epochs (one guarantee covers every release)")
        if self.noise_source != "os":
            raise AgentError("new_epoch: needs noise_source 'os' (a seeded stream would replay its noise)")
        if not self.budget_spent():
            raise AgentError(
                f"new_epoch: this epoch has made {self.counts['syncs'] - self.counts['epoch_start']} of its "
                f"{self.setup.releases} releases; a new epoch starts when they are all made"
            )
        self.randomizer = self.setup.randomizer(None)
        self.counts["epoch_start"] = self.counts["syncs"]
        self.counts["epochs"] += 1
        # user-level: counts of the epochs now over are dead (the next contribution resets them anyway)
        self.contributions = {k: v for k, v in self.contributions.items() if v[0] >= self.counts["epochs"]}

    def recall(self, number: int, x: Any, deadline: float, *, counted: bool = False, user: str | None = None) -> None:
        """Re-enter decision ``number`` with its chosen arm's features ``x (d,)`` and its deadline: a
        service replaying its event log after a restart (fedbandits.serve), not for callers that decide
        (use :meth:`choose`).  ``counted=False``: the next decision, counted now; ``counted=True``: a
        decision the loaded state already counts, pending when a snapshot saved without pending
        decisions was taken (:meth:`recall_left_out`).  ``user``: the decision's user key
        (:meth:`user_key`; required with ``privacy_unit = "user"``)."""
        if counted:
            self.recall_left_out([number], [x], [deadline], [user])
            return
        rows = self._recalled([number], x, [user])
        if number != self.counts["sequence"]:
            raise AgentError(f"recall: decision {number} is not the next one ({self.counts['sequence']})")
        self._expire()
        self.counts["sequence"] = number + 1
        self.counts["decisions"] += 1
        self._enter(number, rows[0], deadline, user)

    def recall_left_out(
        self, numbers: Sequence[int], x: Any, deadlines: Sequence[float], users: Sequence[str | None]
    ) -> None:
        """Re-enter the decisions the loaded state counts but left out, pending when a snapshot saved
        without pending decisions was taken: their numbers, chosen arms' features ``x (n, d)``, deadlines
        and user keys, in the order they were made (before any later one); the checks of :meth:`recall`,
        and :meth:`_enter` in bulk (a replica reloads at each of another one's releases: fedbandits.serve.silo)."""
        if not numbers:
            return
        rows, pending = self._recalled(numbers, x, users), self.pending
        if bad := [n for n in numbers if not 0 <= n < self.counts["sequence"] or n in pending or n in self.expired]:
            raise AgentError(f"recall: decision {bad[0]} is not one the loaded state left out")
        times = [float(t) for t in deadlines]
        pending.update(zip(numbers, zip(rows, times, strict=True), strict=True))
        if self.setup.user_level:
            self.pending_users.update(zip(numbers, cast(Sequence[str], users), strict=True))  # checked: _recalled
        self._queue.extend(zip(times, numbers, strict=True))

    def _recalled(self, numbers: Sequence[int], x: Any, users: Sequence[str | None]) -> np.ndarray:
        """Recalled decisions' features ``(n, d)``, checked, and their user keys checked."""
        rows = check_features(np.asarray(x, dtype=np.float64).reshape(len(numbers), -1), self.dim)
        if self.setup.user_level:
            for number, user in zip(numbers, users, strict=True):
                if not isinstance(user, str) or len(user) != 32:
                    got = f"{user!r:.40}"
                    raise AgentError(f"recall: decision {number} needs its user key (privacy_unit = 'user'), got {got}")
        return rows.astype(np.float64)

    def _enter(self, number: int, x: np.ndarray, deadline: float, user: str | None) -> None:
        self.pending[number] = (x, float(deadline))
        if self.setup.user_level:
            assert user is not None
            self.pending_users[number] = user
        self._queue.append((float(deadline), number))

    def user_key(self, user_id: object) -> str:
        """The digest a user's contributions are counted under (what a service logs instead of the id)."""
        return user_key("user_id", user_id, self.user_secret)

    def apply_sync(self, prefix: Any) -> None:
        """Adopt the federation's synced prefix ``(P,)`` (the server's release after a sync round)."""
        if not self.federated:
            raise AgentError(f"{self.setup.name!r} does not synchronise: apply_sync needs a fedlinucb entry")
        p = check_prefix(prefix, self.setup.width, self.dim)
        cov, bias = unpack(p[None], self.dim)
        gram = self.reg * np.eye(self.dim) + cov
        repaired = 0
        if self.private:
            gram, repaired = raise_eigenvalues(gram, 0.1 * self.reg)
        state_bias = bias
        if not self.lazy and self.completed:
            # decisions completed since the release are not in the prefix yet: keep acting on them
            local_cov, local_bias = self._batch_statistics()
            gram = gram + local_cov[0]
            state_bias = bias + local_bias[0]
        try:
            self.state.set(gram, state_bias)
        except ValueError as exc:
            raise AgentError(f"prefix: {exc}") from None
        self.synced_cov, self.synced_bias = cov, bias
        self.counts["psd_repairs"] += repaired
        self.counts["adopted"] += 1
        self._refresh()

    # -- reports -----------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        """Counts and the privacy spent (expires overdue decisions first; :func:`fedbandits.online.status.report`)."""
        self._expire()
        return agent_status(self)

    # -- save / load (fedbandits.online.state) -----------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the whole state to ``path`` (npz + JSON, atomically; no pickle)."""
        header, arrays = statefile.dump(self)
        statefile.write(Path(path), header, arrays, self.clock())

    def snapshot(self, pending: bool = True) -> bytes:
        """What :meth:`save` writes, as bytes (a service keeps them in its event log); ``pending=False``
        leaves the pending decisions out (the service's log holds them, and :meth:`recall` re-enters them)."""
        return statefile.encode(*statefile.dump(self, pending), self.clock())

    @classmethod
    def load(cls, path: str | Path | bytes, *, clock: Callable[[], float] = time.monotonic) -> Agent:
        """An agent exactly as saved (its noise stream continues, never replays); ``path`` may be
        the bytes of :meth:`snapshot`."""
        source = io.BytesIO(path) if isinstance(path, bytes) else Path(path)
        header, arrays = statefile.read(source)
        try:
            return statefile.restore(cls, header, arrays, clock)
        except statefile.StateFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError):  # a well-formed archive of the wrong content
            raise statefile.StateFileError(f"{source} is not an agent state file (corrupt or truncated)") from None

    def state_digest(self) -> str:
        """SHA-256 of the whole state (what :meth:`save` writes): equal digests, equal agents."""
        return statefile.digest(*statefile.dump(self))

    def decision_number(self, decision_id: object) -> int:
        """The number of one of this agent's decision ids (:class:`AgentError` for any other value)."""
        return self._number(decision_id)

    # -- internals ---------------------------------------------------------------------------
    def _number(self, decision_id: object) -> int:
        if isinstance(decision_id, str):
            instance, _, tail = decision_id.rpartition("-")
            if (
                instance == self.instance
                and tail.isascii()
                and tail.isdigit()
                and str(int(tail)) == tail
                and int(tail) < self.counts["sequence"]
            ):
                return int(tail)
        raise AgentError(f"decision_id {decision_id!r:.80} is unknown to this agent")

    def _user(self, name: str, user_id: object) -> str | None:
        """A decision's user key: required (and checked) at the user level, ignored otherwise."""
        if not self.setup.user_level:
            return None
        if user_id is None:
            raise AgentError(
                f'{name}: required with privacy_unit = "user" (the user served, an integer >= 0 or a string)'
            )
        return user_key(name, user_id, self.user_secret)

    def _kept(self, key: str | None) -> bool:
        """Whether a completed decision of user ``key`` enters the next release: the user's first
        ``max_contributions`` in the epoch that release belongs to (the next one once this epoch's
        releases are all made); a later one is dropped and counted."""
        if key is None:
            return True
        epoch = self.counts["epochs"] + (1 if self.budget_spent() else 0)
        seen_epoch, n = self.contributions.get(key, (epoch, 0))
        if seen_epoch != epoch:
            n = 0
        if n >= self.setup.contributions:
            self.counts["dropped_contributions"] += 1
            self.counts["dropped_unreleased"] += 1  # a round the radius counts, as the simulator's does
            return False
        self.contributions[key] = (epoch, n + 1)
        return True

    def _reward_value(self, name: str, value: object) -> float:
        return check_reward(name, value, None if self.clip_out_of_bound else self.reward_bound, self.reward_offset)

    def _learn(self, number: int, x: np.ndarray, value: float) -> None:
        """One completed decision: centre (y - c), clip (private), then the batch statistics and (non-lazy)
        the state."""
        value = centred(value, self.reward_offset)
        if self.private:
            # core.clipping's clip_norm and clip_rewards on one observation, the norm computed once
            assert self.feature_bound is not None and self.reward_bound is not None
            norm = np.linalg.norm(x, axis=-1, keepdims=True)
            size = float(norm[0])
            self.feature_norm_max = max(self.feature_norm_max, size)
            if size > self.feature_bound:
                x = x * (self.feature_bound / norm)
                self.counts["clipped_features"] += int(size > self.feature_bound * (1 + ROUNDING))
            if not -self.reward_bound <= value <= self.reward_bound:
                value = min(max(value, -self.reward_bound), self.reward_bound)
                self.counts["clipped_rewards"] += 1
            self.counts["observations"] += 1
        if not self.lazy:
            rank_one_update(self.state.gram[0], self.state.inv[0], self.state.bias[0], x, value)
        if self.federated:
            self.completed[number] = (x, np.array([value]))
        self.counts["learned"] += 1
        if not self.lazy:
            self._stale = True

    def _batch_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """W_i ``(1, 1, d, d)`` and U_i ``(1, 1, d)`` of the completed decisions, added in decision order
        exactly as the simulator adds a silo's rounds (the same operations, so the same bits)."""
        d = self.dim
        if not self.completed:
            return np.zeros((1, 1, d, d)), np.zeros((1, 1, d))
        order = sorted(self.completed)
        x = np.stack([self.completed[n][0] for n in order])  # (n, d)
        y = np.concatenate([self.completed[n][1] for n in order])  # (n,)
        # a running sum (cumsum adds left to right, as `total += term` in decision order does, bit for bit)
        cov = np.cumsum(x[:, :, None] * x[:, None, :], axis=0)[-1]
        bias = np.cumsum(x * y[:, None], axis=0)[-1]
        return cov.reshape(1, 1, d, d), bias.reshape(1, 1, d)

    def _refresh(self) -> None:
        """theta-hat, [V^-1 | theta] and the radius after a state change (once, not per decision)."""
        self._theta = self.state.theta()
        self._proj = projection(self.state.inv[0], self._theta[0])
        self.chooser.refresh(self.state.inv[0])
        self._beta = float(self._radius(float(self._radius_samples()), self.dim, self.reg))
        self._stale = False

    def _radius_samples(self) -> int:
        """n of beta(n), as the simulator counts it: LinUCB its own samples; FedLinUCB M times the
        silo's samples (in the releases made, if lazy) -- with rewards at once, the simulator's M t."""
        if not self.federated:
            return self.counts["learned"]
        if self.lazy:
            own = self.counts["released_samples"]
        else:  # a dropped contribution is a round the simulator's n = M t counts, though nothing is learned
            own = self.counts["learned"] + self.counts["dropped_contributions"] + self.counts["skipped_samples"]
        return self.setup.silos * own

    def _expire(self) -> None:
        queue = self._queue
        if not queue:
            return
        now = self.clock()
        while queue and queue[0][0] <= now:
            _, number = queue.popleft()
            if self.pending.pop(number, None) is not None:
                self.pending_users.pop(number, None)
                self.expired.add(number)
                self.counts["expired"] += 1


#: the agent's counters, saved with it
COUNTERS = (
    "sequence",
    "decisions",
    "rewarded",
    "logged",
    "learned",
    "expired",
    "late_rewards",
    "released_samples",
    "syncs",
    "adopted",
    "observations",
    "clipped_features",
    "clipped_rewards",
    "psd_repairs",
    "epochs",  # budget epochs completed before the current one (new_epoch)
    "epoch_start",  # the value of syncs when the current epoch began
    "dropped_contributions",  # user-level: completed decisions beyond a user's cap, never learned from
    "dropped_unreleased",  # of those, the ones since the last release (its rounds count for the radius)
    "skipped_releases",  # releases a deployed silo missed while it was down (skip_release)
    "skipped_samples",  # the rounds of their batches, never served (the radius counts them)
)
