"""One silo of a deployment: its own users, its own LinUCB decisions, its own local randomizer.

The silo's learner is the online agent (:class:`~fedbandits.online.agent.Agent`), the one silo
object every runtime drives: here each of the silo's users is served by ``choose`` and rewarded at
once, ``sync_payload`` makes release k, ``apply_sync`` adopts the synced prefix.  The silo never
sends raw statistics: at synchronisation k the agent hands its batch statistics gamma_k (the
packed sum of x x^T and x y over its users of the batch) to its local randomizer R and releases
only the resulting noisy p-sum (``ldp``), shares (``distributed-dp``) -- or, with the non-private
``none`` protocol, the exact batch statistics, as that baseline does.  Its decisions are the
simulator's :class:`~fedbandits.algorithms.fedlinucb.FedLinUCB` agent's, bit for bit
(tests/test_online_parity.py, and the deployment's parity tests).

Durability: the whole silo (environment stream, LinUCB state, randomizer tree and noise
stream, released messages) is pickled atomically to ``state_dir`` *before* a message leaves the
silo.  A restarted silo therefore resends an already released p-sum byte for byte and never
redraws its noise; a batch whose release was not persisted was never sent, so replaying it is
not a second release.

Data source: with the ``data-files`` environment (:mod:`fedbandits.envs.files`) the silo reads
its users from its own data file (``data_file``, or the config's ``paths[silo_id]``) and nothing
else -- the one-agent environment draws exactly the numbers the simulator's agent ``silo_id``
draws, so parity holds without any silo seeing another's data.  The file's SHA-256 is kept in
the durable state: a restarted silo refuses a changed file.  With any other environment the
silo builds the configured environment with the run's seed and keeps its own agent's slice (the
other slices are drawn and discarded): a partition of a simulated instance, for trials.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fedbandits.crypto.double_masking import Advert, Masked, MaskingSilo, Reveal, SignedRoster
from fedbandits.crypto.secure_aggregation import SecAggError
from fedbandits.crypto.signing import Authority, Identity
from fedbandits.envs.files import DataFiles
from fedbandits.federation.spec import DeploySpec, load_pickle, save_pickle
from fedbandits.online.agent import Agent
from fedbandits.online.inputs import AgentError
from fedbandits.sim.seeding import env_rngs
from fedbandits.sim.task import time_grid

log = logging.getLogger("fedbandits.federation.silo")
_T = TypeVar("_T")

#: where a silo's noise comes from: "os" (the default: an exact discrete Gaussian drawn with the OS
#: CSPRNG, secret to the silo) or "derived" (the simulator's continuous noise from the config's
#: noise seed, for parity trials only: the server could recompute and subtract it)
NOISE_SOURCES = ("derived", "os")


class SiloError(RuntimeError):
    """A request the silo cannot serve (wrong config, impossible round); nothing changed."""


@dataclass
class SiloState:
    """Everything a silo must not lose; pickled atomically after every completed step."""

    digest: str
    silo_id: int
    noise_source: str
    env: Any
    agent: Agent  # the silo's learner and local randomizer (its noise stream, its tree)
    t: int = 0  # rounds played (or skipped while down)
    released: int = 0  # releases done (the silo's position in the tree)
    adopted: int = 0  # index of the synced prefix in force (0: none yet)
    messages: dict[int, np.ndarray] = field(default_factory=dict)  # release k -> message sent
    skipped_releases: list[int] = field(default_factory=list)
    served: np.ndarray | None = None  # (T,) bool: rounds whose user this silo served
    actions: np.ndarray | None = None  # (T,) chosen arm, -1 if not served
    regret: np.ndarray | None = None  # (T,) per-round pseudo-regret (0 if not served)
    finished: bool = False
    column: int = 0  # this silo's agent index in the environment's rounds (0 for its own data file)
    data_sha256: str | None = None  # of the silo's data file, if it reads one
    secagg: MaskingSilo | None = None  # distributed-dp: this silo's side of secure aggregation
    visits: np.ndarray | None = None  # (n_users,): how often each of the silo's users was served


#: a state file of a silo whose learner was the retired ``SiloFedLinUCB`` (before the one silo object)
RETIRED = (
    "state file {path} was written by an earlier fedbandits (its silo learner is retired): finish that "
    "deployment with the version that started it, or start afresh with a new state directory"
)


def check_pinned_spec(spec: DeploySpec, pinned: object) -> None:
    """Refuse a request whose spec is not the one the silo's operator configured.

    The silo must not take the algorithm, protocol or privacy budget from the server: a server
    that sent ``protocol = "none"`` or a huge epsilon would otherwise receive exact or weakly noised
    statistics.  ``deploy silo --config`` computes the hash of the deployment spec from the silo's
    own copy of the config and pins it in the SuperNode's node config (``spec-digest``)."""
    if not isinstance(pinned, str) or len(pinned) != 64:
        raise SiloError("this silo has no pinned deployment spec (node config spec-digest): start it with --config")
    if spec.digest != pinned:
        raise SiloError(
            f"the server requested deployment {spec.digest[:12]} (protocol {spec.params.protocol!r}, label "
            f"{spec.label!r}), but this silo's config gives {pinned[:12]}: refused; compare the config files"
        )


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sha256_or_none(path: Path) -> str | None:
    try:
        return file_sha256(path)
    except OSError:  # a missing or unreadable file is a changed file
        return None


class Silo:
    """The silo's logic, independent of the transport (Flower calls it from its ClientApp)."""

    def __init__(
        self,
        spec: DeploySpec,
        silo_id: int,
        state_dir: str | Path,
        noise_source: str = "os",
        data_file: str | Path | None = None,
        share_report: bool = False,
        signing: tuple[Identity, Authority] | None = None,
    ) -> None:
        """``signing``: this silo's signing identity and the pinned signing CA (``distributed-dp``
        needs them: :mod:`fedbandits.crypto.double_masking`)."""
        if isinstance(silo_id, bool) or not isinstance(silo_id, int) or not 0 <= silo_id < spec.silos:
            raise SiloError(f"silo id must be an integer in [0, {spec.silos}), got {silo_id!r}")
        if noise_source not in NOISE_SOURCES:
            raise SiloError(f"noise source must be one of {NOISE_SOURCES}, got {noise_source!r}")
        self.spec = spec
        self.silo_id = silo_id
        self.path = Path(state_dir) / f"silo-{silo_id}.pkl"
        self.noise_source = noise_source
        self.share_report = bool(share_report)
        self.data_file = Path(data_file) if data_file else None
        if self.data_file is not None and spec.config.environment.name != "data-files":
            raise SiloError(
                "a silo data file needs the environment 'data-files' in the config, "
                f"not {spec.config.environment.name!r}"
            )
        if spec.masked and signing is None:
            raise SiloError(
                "distributed-dp needs this silo's signing key, its certificate and the signing CA "
                "(node config signing-key, signing-cert, signing-ca)"
            )
        if signing is not None and signing[0].silo != silo_id:
            raise SiloError(f"the signing identity is silo {signing[0].silo}'s, not silo {silo_id}'s")
        self.signing = signing
        self.state = self._load_or_create()
        if self.state.secagg is not None and signing is not None:
            self.state.secagg.identity, self.state.secagg.authority = signing  # as configured now

    # -- state -------------------------------------------------------------------------------
    def _load_or_create(self) -> SiloState:
        if self.path.exists():
            try:
                state: SiloState = load_pickle(self.path)
            except (AttributeError, ImportError):  # a class it names is gone
                raise SiloError(RETIRED.format(path=self.path)) from None
            if not isinstance(getattr(state, "agent", None), Agent):
                raise SiloError(RETIRED.format(path=self.path))
            if state.digest != self.spec.digest or state.silo_id != self.silo_id:
                raise SiloError(
                    f"state file {self.path} belongs to another deployment (config hash {state.digest[:12]}, "
                    f"silo {state.silo_id}); use a fresh state directory"
                )
            path = self._data_path()
            if state.data_sha256 is not None and path is not None and state.data_sha256 != _sha256_or_none(path):
                raise SiloError(
                    f"data file {path} changed since this silo started (SHA-256 differs from its "
                    "durable state): a silo must keep serving the users it started with"
                )
            return state
        spec = self.spec
        env, column, digest = self._build_env()
        dim = env.dim
        if spec.params.privacy_unit == "user" and env.n_users < 1:
            where = self._data_path() or spec.config.environment.name
            raise SiloError(
                f"silo {self.silo_id}: privacy_unit 'user' needs user ids in its data ({where}): user_ids in a .npz, "
                "a user_id column in a .csv, or returning_users in a synthetic environment"
            )
        if env.dim != spec.setup.dim:
            raise SiloError(
                f"silo {self.silo_id}: its data has d = {env.dim} features, the deployment's d = {spec.setup.dim}"
            )
        # the secret samplers from the OS CSPRNG by default; the simulator's stream of silo i in the
        # deployed run with noise source ``derived`` (parity trials); rewards outside the private bound
        # are clipped and counted, as the simulator does
        seed = None if self.noise_source == "os" else spec.noise_seed
        agent = Agent(spec.setup, silo=self.silo_id, seed=seed, clip_rewards=True, run=spec.run)
        secagg = None
        if spec.masked:
            cal = spec.distributed()
            assert self.signing is not None
            identity, authority = self.signing
            secagg = MaskingSilo(
                self.silo_id,
                cal.bits,
                cal.codec(dim).steps.size,
                spec.digest.encode(),
                identity,
                authority,
                colluders=spec.params.colluders,
                min_survivors=spec.silos - spec.params.dropouts,
            )
        horizon = spec.horizon
        state = SiloState(
            digest=spec.digest,
            silo_id=self.silo_id,
            noise_source=self.noise_source,
            env=env,
            agent=agent,
            served=np.zeros(horizon, dtype=bool),
            actions=np.full(horizon, -1, dtype=np.int64),
            regret=np.zeros(horizon),
            column=column,
            data_sha256=digest,
            secagg=secagg,
            visits=np.zeros(env.n_users, dtype=np.int64) if env.n_users else None,
        )
        self._save(state)
        return state

    def _build_env(self) -> tuple[Any, int, str | None]:
        """The silo's data source, its column in the rounds, and the SHA-256 of its data file."""
        spec = self.spec
        if spec.config.environment.name != "data-files":
            return spec.build_env(), self.silo_id, None

        params = spec.config.environment.params
        path = self._data_path()
        if path is None:
            raise SiloError(f"silo {self.silo_id} has no data file: give one (--data) or list it in paths")
        try:
            digest = file_sha256(path)  # before reading: a file replaced meanwhile fails the next check
            env = DataFiles.for_agent(env_rngs(spec.config.experiment.seed, [spec.run]), params, self.silo_id, path)
        except (OSError, ValueError) as exc:
            raise SiloError(f"silo {self.silo_id}: cannot use data file {path}: {exc}") from None
        available = getattr(env, "rounds_available", None)
        if available is not None and available < spec.horizon:
            raise SiloError(f"data file {path} has {available} users; the run needs T = {spec.horizon}")
        return env, 0, digest

    def _data_path(self) -> Path | None:
        """The silo's data file: ``--data``, else its entry of the config's ``paths`` (data-files only)."""
        if self.data_file is not None:
            return self.data_file
        env = self.spec.config.environment
        paths = getattr(env.params, "paths", ()) if env.name == "data-files" else ()
        return Path(paths[self.silo_id]) if len(paths) > self.silo_id else None

    def _save(self, state: SiloState | None = None) -> None:
        save_pickle(self.path, state if state is not None else self.state)

    # -- protocol steps ----------------------------------------------------------------------
    def status(self) -> dict[str, int]:
        s = self.state
        return {"silo_id": self.silo_id, "released": s.released, "adopted": s.adopted, "t": s.t}

    def release(self, k: int, prefix: np.ndarray | None, prefix_round: int) -> np.ndarray:
        """Serve synchronisation ``k``: adopt the synced prefix ``prefix_round`` (= k - 1), play the
        batch, release the noisy p-sum (or exact batch statistics for ``none``).  Idempotent: a
        repeated request for an already released k returns the stored message unchanged."""
        spec = self.spec
        s = self.state
        if not 1 <= k <= spec.releases:
            raise SiloError(f"synchronisation {k} outside [1, {spec.releases}]")
        if k in s.messages:
            log.info("silo %d: release %d was already made; resending the stored message", self.silo_id, k)
            return s.messages[k]
        if k <= s.released:
            raise SiloError(f"release {k} is in the past (released {s.released}) and its message was not kept")
        if prefix_round != k - 1:
            raise SiloError(f"request {k} carries synced prefix {prefix_round}, expected {k - 1}")
        self._adopt(prefix, prefix_round)
        # releases the silo missed while it was down: time went on without it
        while s.released < k - 1:
            self._skip_release(s.released + 1)
        self._play_until(k * spec.batch)
        message = s.agent.sync_payload()
        s.released = k
        s.messages[k] = message
        self._save()  # durable *before* the message leaves the silo
        return message

    def finish(self, prefix: np.ndarray | None, prefix_round: int) -> dict[str, Any] | None:
        """Adopt the last synced prefix, play the rounds after the last synchronisation; return the
        trial report if this silo's operator opted in (``share_report``), else None: the report is
        computed from raw data and is outside the privacy guarantee."""
        spec = self.spec
        s = self.state
        if prefix_round != spec.releases:
            raise SiloError(f"finish carries synced prefix {prefix_round}, expected {spec.releases}")
        if not s.finished:
            self._adopt(prefix, prefix_round)
            while s.released < spec.releases:
                self._skip_release(s.released + 1)
            self._play_until(spec.horizon)
            s.finished = True
            self._save()
        return self.report() if self.share_report else None

    # -- secure aggregation (distributed-dp) -------------------------------------------------
    def _secagg(self) -> MaskingSilo:
        if self.state.secagg is None:
            raise SiloError(f"protocol {self.spec.params.protocol!r} uses no secure aggregation")
        return self.state.secagg

    def _step(self, call: Callable[[MaskingSilo], _T]) -> _T:
        """One secure-aggregation step: refused with its reason (state untouched), or durable
        before its answer leaves the silo."""
        try:
            out = call(self._secagg())
        except SecAggError as exc:
            log.warning("silo %d: secure aggregation refused: %s", self.silo_id, exc)
            raise SiloError(str(exc)) from None
        self._save()
        return out

    def advertise(self, epoch: int) -> Advert:
        """Signed fresh keys for ``epoch`` (durable before they leave the silo)."""
        return self._step(lambda c: c.advertise(epoch))

    def join(self, roster: SignedRoster) -> None:
        self._step(lambda c: c.join(roster))

    def masked(self, k: int) -> Masked:
        """Release ``k``'s residues masked for the current epoch (made by :meth:`release` first)."""
        if k not in self.state.messages:
            raise SiloError(f"release {k} was not made")
        return self._step(lambda c: c.mask(k, self.state.messages[k]))

    def sign_survivors(self, k: int, survivors: object) -> bytes:
        return self._step(lambda c: c.sign_survivors(k, survivors))

    def unmask(
        self, k: int, survivors: object, dropped: object, signatures: dict[int, bytes], blobs: dict[int, bytes]
    ) -> Reveal:
        return self._step(lambda c: c.unmask(k, survivors, dropped, signatures, blobs))

    def report(self) -> dict[str, Any]:
        """What the silo discloses at the end of a *trial*: its regret curve on the grid and counts."""
        s = self.state
        spec = self.spec
        grid = time_grid(spec.horizon, spec.config.experiment.grid_points)
        assert s.regret is not None and s.served is not None
        cum = np.cumsum(s.regret)
        counts = s.agent.counts
        return {
            "curve": cum[grid - 1].copy(),
            "served": int(s.served.sum()),
            "skipped_releases": len(s.skipped_releases),
            "clipped_features": counts["clipped_features"],
            "clipped_rewards": counts["clipped_rewards"],
            "psd_repairs": counts["psd_repairs"],
            "dropped_contributions": counts["dropped_contributions"],
            "max_user_visits": int(s.visits.max()) if s.visits is not None and s.visits.size else 0,
            "feature_norm_max": float(s.agent.feature_norm_max),
        }

    # -- internals ---------------------------------------------------------------------------
    def _adopt(self, prefix: np.ndarray | None, prefix_round: int) -> None:
        s = self.state
        if prefix_round == s.adopted:
            return
        if prefix_round < s.adopted:
            raise SiloError(f"synced prefix {prefix_round} is older than the one in force ({s.adopted})")
        if prefix is None:
            raise SiloError(f"synced prefix {prefix_round} is missing from the request")
        prefix = np.asarray(prefix, dtype=np.float64)
        if prefix.shape != (self.spec.width(),) or not np.isfinite(prefix).all():
            raise SiloError(f"synced prefix must be {self.spec.width()} finite floats, got shape {prefix.shape}")
        # a silo that missed releases first catches its clock up to the prefix's time
        while s.released < prefix_round:
            self._skip_release(s.released + 1)
        try:
            s.agent.apply_sync(prefix)
        except AgentError as exc:
            raise SiloError(f"synced prefix {prefix_round}: {exc}") from None
        s.adopted = prefix_round

    def _play_until(self, t_end: int) -> None:
        s = self.state
        i = s.column
        while s.t < t_end:
            rnd = s.env.next_round()
            user = None if rnd.users is None else int(rnd.users[0, i])
            decision = s.agent.choose(rnd.features[0, i], user_id=user)
            a = decision.arm
            # the simulator's reward, same dtypes (Environment.rewards on the chosen arm's mean and noise)
            y = s.env.rewards(rnd.means[:, i : i + 1, a], rnd.noise[:, i : i + 1])
            s.agent.reward(decision.decision_id, float(y[0, 0]))
            if user is not None and s.visits is not None:
                s.visits[user] += 1
            means = rnd.means[0, i]
            s.actions[s.t] = a  # type: ignore[index]
            s.regret[s.t] = float(means.max() - means[a])  # type: ignore[index]
            s.served[s.t] = True  # type: ignore[index]
            s.t += 1

    def _skip_release(self, k: int) -> None:
        """Release ``k`` happened while this silo was down: its users of that batch were not served
        (their contexts are drawn and discarded to keep the clock), nothing is sent, and the tree
        absorbs the lower levels exactly as a release with an empty batch would -- without noise,
        since nothing is released."""
        s = self.state
        spec = self.spec
        log.warning("silo %d: missed release %d while down; skipping its batch", self.silo_id, k)
        while s.t < k * spec.batch:
            s.env.next_round()
            s.t += 1
        s.agent.skip_release(spec.batch)
        s.released = k
        s.skipped_releases.append(k)


def load_silo_results(state_dir: str | Path, silo_id: int) -> SiloState:
    """A silo's durable state (its own record of actions, regret, messages): for the silo's operator."""
    return load_pickle(Path(state_dir) / f"silo-{silo_id}.pkl")  # type: ignore[no-any-return]
