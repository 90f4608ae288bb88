"""One silo of a deployment: its own users, its own LinUCB decisions, its own local randomizer.

The silo never sends raw statistics.  At synchronisation k it forms its batch statistics
gamma_k (the packed sum of x x^T and x y over its users of the batch), hands them to its
local randomizer R (:class:`~fedbandits.privacy.mechanisms.TreeRandomizer` for one silo) and
releases only the resulting noisy p-sum (``ldp``) -- or, with the non-private ``none`` protocol,
the exact batch statistics, as that baseline does.  Its decisions use V = lambda I + W_syn +
W_i exactly as :class:`~fedbandits.algorithms.fedlinucb.FedLinUCB` (the same class, with one
agent).

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

from fedbandits.algorithms.fedlinucb import FedLinUCB
from fedbandits.crypto.double_masking import Advert, Masked, MaskingSilo, Reveal, SignedRoster
from fedbandits.crypto.secure_aggregation import SecAggError
from fedbandits.crypto.signing import Authority, Identity
from fedbandits.envs.base import Round
from fedbandits.envs.files import DataFiles
from fedbandits.federation.spec import DeploySpec, load_pickle, save_pickle
from fedbandits.privacy.mechanisms import TreeRandomizer, pack, protocol_streams, silo_noise_rng, unpack
from fedbandits.privacy.tree import lowest_set_bit
from fedbandits.protocols.base import Protocol

# SecretDistributedRandomizer lives in protocols (the online agent uses it too); importing it here
# also keeps silo state files pickled before the move loadable (pickle finds it under this module)
from fedbandits.protocols.distributed_dp import DistributedRandomizer, SecretDistributedRandomizer  # noqa: F401
from fedbandits.sim.seeding import env_rngs, noise_rngs
from fedbandits.sim.task import time_grid

log = logging.getLogger("fedbandits.federation.silo")
_T = TypeVar("_T")

#: where a silo's noise comes from: "os" (the default: an exact discrete Gaussian drawn with the OS
#: CSPRNG, secret to the silo) or "derived" (the simulator's continuous noise from the config's
#: noise seed, for parity trials only: the server could recompute and subtract it)
NOISE_SOURCES = ("derived", "os")


class SiloError(RuntimeError):
    """A request the silo cannot serve (wrong config, impossible round); nothing changed."""


class _NoProtocol(Protocol):
    """Placeholder: a deployed silo's synchronisation is split across a network round trip."""

    name = "deployed"

    def sync(self, cov: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise RuntimeError("a deployed silo synchronises through the server, not through a protocol object")


class SiloFedLinUCB(FedLinUCB):
    """FedLinUCB for one silo (one agent) of an M-silo federation.

    ``sync`` (called by ``end_round`` every B rounds) only *prepares* the batch statistics and
    resets W_i, U_i; ``adopt`` installs the synchronised statistics the server returns (lines
    10-17 of Algorithm 1 split around the network round trip; no round is played in between).
    The radius counts n = M t samples like the simulator's M-agent policy.
    """

    def __init__(self, spec: DeploySpec, dim: int, n_arms: int, reg: float, n_users: int = 0) -> None:
        super().__init__(1, 1, n_arms, dim, spec.horizon, spec.params, _NoProtocol(1, 1, dim), reg=reg, n_users=n_users)
        self.federation_size = spec.silos
        self.pending: np.ndarray | None = None

    def radius_samples(self) -> int:
        return self.federation_size * (self.last_sync_t if self.lazy else self.t)

    def sync(self) -> None:
        self.pending = pack(self.local_cov, self.local_bias)[0, 0].copy()  # gamma_k, (P,)
        self.local_cov[...] = 0.0
        self.local_bias[...] = 0.0
        self.last_sync_t = self.t
        self.sync_rounds += 1

    def adopt(self, prefix: np.ndarray) -> None:
        cov, bias = unpack(prefix[None], self.dim)
        gram = self.reg_value * np.eye(self.dim) + cov
        if self.private:
            gram = self.repair(gram, 0.1 * self.reg_value)
        self.state.set(gram[:, None], bias[:, None])
        self.synced_cov, self.synced_bias = cov, bias


@dataclass
class SiloState:
    """Everything a silo must not lose; pickled atomically after every completed step."""

    digest: str
    silo_id: int
    noise_source: str
    env: Any
    policy: SiloFedLinUCB
    randomizer: TreeRandomizer | DistributedRandomizer | None
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
            state: SiloState = load_pickle(self.path)
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
        policy = SiloFedLinUCB(spec, dim, env.n_arms, spec.regularizer(), n_users=env.n_users)
        # the silo's randomizer R, as the online agent's set-up builds it: the secret samplers from the
        # OS CSPRNG by default, the simulator's stream of silo i with noise source ``derived`` (parity)
        randomizer = spec.setup.randomizer(None if self.noise_source == "os" else self._noise_stream())
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
            policy=policy,
            randomizer=randomizer,
            served=np.zeros(horizon, dtype=bool),
            actions=np.full(horizon, -1, dtype=np.int64),
            regret=np.zeros(horizon),
            column=column,
            data_sha256=digest,
            secagg=secagg,
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

    def _noise_stream(self) -> np.random.Generator:
        """``derived`` noise: the stream the simulator gives silo i (parity trials only)."""
        spec = self.spec
        run_rng = noise_rngs(spec.noise_seed, [spec.run], spec.noise_stream)[0]
        protocol_rng = protocol_streams(run_rng)[0]  # GaussianTreeProtocol's noise stream of the run
        return silo_noise_rng(protocol_rng, spec.silos, self.silo_id)

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
        gamma = s.policy.pending
        assert gamma is not None and s.policy.t == k * spec.batch
        if s.randomizer is not None:
            message = s.randomizer.release(gamma[None, None])[0, 0].copy()
        else:
            message = gamma.copy()
        s.policy.pending = None
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
        p = s.policy
        return {
            "curve": cum[grid - 1].copy(),
            "served": int(s.served.sum()),
            "skipped_releases": len(s.skipped_releases),
            "clipped_features": int(p.clipped_features),
            "clipped_rewards": int(p.clipped_rewards),
            "psd_repairs": int(p.psd_repairs),
            "dropped_contributions": int(p.dropped_contributions),
            "max_user_visits": int(p.user_counts.max()) if p.user_counts is not None else 0,
            "feature_norm_max": float(p.feature_norm_max),
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
        s.policy.adopt(prefix)
        s.adopted = prefix_round

    def _play_until(self, t_end: int) -> None:
        s = self.state
        i = s.column
        while s.t < t_end:
            rnd = s.env.next_round()
            users = None if rnd.users is None else rnd.users[:, i : i + 1]
            mine = Round(rnd.features[:, i : i + 1], rnd.means[:, i : i + 1], rnd.noise[:, i : i + 1], users=users)
            actions = s.policy.step(mine, s.env)
            a = int(actions[0, 0])
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
        p = s.policy
        p.t = s.t
        p.local_cov[...] = 0.0
        p.local_bias[...] = 0.0
        p.last_sync_t = s.t
        if isinstance(s.randomizer, DistributedRandomizer):
            s.randomizer.skip()
        elif s.randomizer is not None:
            r = s.randomizer
            level = lowest_set_bit(k)
            r.exact[level] = r.exact[:level].sum(axis=0)
            r.noisy[level] = 0.0  # never released
            r.exact[:level] = 0.0
            r.noisy[:level] = 0.0
            r.k = k
        s.released = k
        s.skipped_releases.append(k)


def load_silo_results(state_dir: str | Path, silo_id: int) -> SiloState:
    """A silo's durable state (its own record of actions, regret, messages): for the silo's operator."""
    return load_pickle(Path(state_dir) / f"silo-{silo_id}.pkl")  # type: ignore[no-any-return]
