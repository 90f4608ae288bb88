"""What server and silos agree on before the first message: the deployed algorithm and its constants.

A deployment runs *one* run (index ``run``) of *one* ``fedlinucb`` entry of an ordinary
fedbandits config, with the ``none`` (non-private), ``ldp`` (silo-level LDP, Algorithm 2),
``sdp-amplification`` (Algorithm 2 with a shuffler party) or ``distributed-dp`` (noise shares
under secure aggregation, :mod:`fedbandits.crypto.secure_aggregation`) protocol.  Every party derives
everything else -- the number of silos M, the number of synchronisations K = T // B, the packed
message width P, the calibrated noise, the ridge regulariser -- from the config with exactly the
code the simulator uses, and pins the config by a hash that every message carries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from fedbandits.algorithms.fedlinucb import FedLinUCBParams
from fedbandits.config import Config, ConfigError, config_from_dict
from fedbandits.core.files import atomic_write_bytes
from fedbandits.envs.files import read_data_file
from fedbandits.online.setup import AGENT_MECHANISMS, AgentSetup
from fedbandits.plugins import CARRIERS
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.discrete_gaussian import SECRET_SHARES_SAMPLER, SecretNoise
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.privacy.guarantee import not_covering_adaptivity
from fedbandits.privacy.mechanisms import packed_width
from fedbandits.registry import ENVIRONMENTS, PROTOCOLS, carried_protocols
from fedbandits.sim.seeding import env_rngs


def shown(value: object) -> str:
    """A value from a peer's message, for an error message or the log: its repr (so a newline or a
    control character cannot forge a log line), shortened to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class DeploySpec:
    """The deployed algorithm: config, chosen entry, run index and derived constants."""

    config: Config
    label: str
    algorithm_index: int
    run: int

    # -- derived -----------------------------------------------------------------------------
    @property
    def params(self) -> FedLinUCBParams:
        return self.config.algorithms[self.algorithm_index].params  # type: ignore[no-any-return]

    @property
    def noise_stream(self) -> int:
        """The index of the deployed entry's privacy-noise stream (its ``noise_stream``, else its
        position), the simulator's for the same entry: :func:`fedbandits.sim.seeding.noise_rngs`."""
        return self.config.noise_stream(self.algorithm_index)

    @property
    def silos(self) -> int:
        return int(self.config.environment.params.agents)

    @property
    def horizon(self) -> int:
        return self.config.experiment.horizon

    @property
    def batch(self) -> int:
        return self.params.batch

    @property
    def releases(self) -> int:
        """K: synchronisations in the run (one every B rounds, none after the last full batch)."""
        return self.horizon // self.batch

    @property
    def private(self) -> bool:
        return self.params.private

    @property
    def shuffled(self) -> bool:
        """Whether the silos' messages reach the server only through the shuffler."""
        return PROTOCOLS[self.params.protocol].carried == "shuffled"

    @property
    def masked(self) -> bool:
        """Whether the silos' messages are masked residues summed by secure aggregation."""
        return PROTOCOLS[self.params.protocol].carried == "masked"

    @property
    def noise_seed(self) -> int:
        exp = self.config.experiment
        return exp.seed if exp.noise_seed is None else exp.noise_seed

    def dim(self) -> int:
        dim = getattr(self.config.environment.params, "dim", None)
        if not dim:  # data-driven environments learn d from their data (data-files: dim = 0)
            dim = self.build_env().dim
        return int(dim)

    def width(self) -> int:
        return packed_width(self.dim())

    @cached_property
    def setup(self) -> AgentSetup:
        """The deployed entry's set-up, the one the online agent and ``serve`` use: calibration,
        lambda, noise scales and the silo's randomizer come from it, never derived again here."""
        return AgentSetup.for_entry(self.config, self.algorithm_index, self.dim(), shuffler=True)

    def calibration(self) -> NoiseCalibration | DistributedCalibration | None:
        return self.setup.calibration

    def distributed(self) -> DistributedCalibration:
        """The calibration of a ``distributed-dp`` deployment."""
        cal = self.calibration()
        assert isinstance(cal, DistributedCalibration)
        return cal

    def regularizer(self) -> float:
        """lambda, exactly as the simulator's fedlinucb factory chooses it (:func:`fedbandits.registry.calibrated`)."""
        return self.setup.reg

    def secret_noise(self) -> SecretNoise | None:
        """The secret (``os``) noise of a deployed silo: an exact discrete Gaussian on a grid,
        calibrated on its own to meet (epsilon, delta) by zCDP accounting of what is sampled
        (:mod:`fedbandits.privacy.discrete_gaussian`); None without privacy, and for distributed-dp
        (its shares are exact discrete Gaussians by design)."""
        return self.setup.secret_noise()

    def privacy_report(self) -> dict[str, object]:
        """The calibration (what ``derived`` trial noise spends, as in the simulator) and the secret
        noise a silo draws by default; the guarantee is withdrawn for a non-lazy configuration."""
        cal = self.calibration()
        report: dict[str, object] = {"protocol": self.params.protocol, **(cal.report() if cal is not None else {})}
        secret = self.secret_noise()
        if secret is not None:
            report.update(secret.report())
            if not self.params.lazy:
                report = not_covering_adaptivity(report)
        if self.masked:
            report["secret_noise_sampler"] = (
                f"{SECRET_SHARES_SAMPLER}; secure aggregation by pairwise masking (Bonawitz et al. 2017)"
            )
        return report

    def build_env(self):  # type: ignore[no-untyped-def]
        env_cfg = self.config.environment
        return ENVIRONMENTS[env_cfg.name].factory(env_cfg.params, env_rngs(self.config.experiment.seed, [self.run]))

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "label": self.label, "run": self.run}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """sha256 of the canonical spec: every message carries it; a mismatch is rejected."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()


def make_spec(config: Config, label: str | None = None, run: int = 0) -> DeploySpec:
    """Choose the deployed entry of ``config`` and check that a deployment can run it."""
    if isinstance(run, bool) or not isinstance(run, int) or not 0 <= run < config.experiment.runs:
        raise ConfigError(f"run must be an integer in [0, runs = {config.experiment.runs}), got {run!r}")
    candidates = [i for i, a in enumerate(config.algorithms) if a.name == "fedlinucb"]
    if label is not None:
        matches = [i for i, a in enumerate(config.algorithms) if a.label == label]
        if not matches:
            raise ConfigError(f"no algorithm labelled {label!r}; labels: {[a.label for a in config.algorithms]}")
        index = matches[0]
        if config.algorithms[index].name != "fedlinucb":
            raise ConfigError(f"algorithm {label!r} is {config.algorithms[index].name!r}; only fedlinucb deploys")
    elif len(candidates) == 1:
        index = candidates[0]
    elif not candidates:
        raise ConfigError("the config has no fedlinucb algorithm to deploy")
    else:
        labels = [config.algorithms[i].label for i in candidates]
        raise ConfigError(f"the config has several fedlinucb entries {labels}; choose one with --algorithm LABEL")
    params = config.algorithms[index].params
    # the protocols a deployment runs, by their catalog entries' ``carried``: straight to the server
    # (none, silo-level LDP: Algorithm 2), masked by secure aggregation (distributed DP), through a
    # shuffler party (shuffle DP by amplification, :mod:`fedbandits.federation.shuffler`)
    if PROTOCOLS[params.protocol].carried is None:
        raise ConfigError(
            f"protocol {params.protocol!r} does not deploy; deployable protocols: "
            f"{', '.join(carried_protocols(*CARRIERS))} "
            "(sdp-vector-sum's shuffled integer messages are not deployed: see docs/deployment.md)"
        )
    if params.mechanism not in AGENT_MECHANISMS:  # a silo releases through the online agent's randomizer
        raise ConfigError(
            f"mechanism {params.mechanism!r} does not deploy; the deployment releases "
            f"{' or '.join(map(repr, AGENT_MECHANISMS))} (docs/mechanisms.md)"
        )
    if config.environment.params.agents < 1:
        raise ConfigError("the environment needs at least one agent (silo)")
    return DeploySpec(_absolute_data_paths(config), config.algorithms[index].label, index, run)


def _absolute_data_paths(config: Config) -> Config:
    """``data-files`` paths made absolute (relative to the current folder, as the simulator reads
    them): Flower runs each silo's ClientApp in a folder of its own.  K and d left to the files
    (0) are read from the first file here, once, so that the spec every party receives states
    them and no silo ever opens another silo's file to learn them."""
    env = config.environment
    paths = getattr(env.params, "paths", None)
    if env.name != "data-files" or not paths:
        return config
    changes: dict[str, Any] = {"paths": tuple(str(Path(p).resolve()) for p in paths)}
    if not env.params.dim or not env.params.arms:
        try:
            _, arms, dim = read_data_file(changes["paths"][0]).features.shape
        except (OSError, ValueError) as exc:
            raise ConfigError(f"environment data-files: {exc}") from None
        changes.update(arms=env.params.arms or int(arms), dim=env.params.dim or int(dim))
    params = dataclasses.replace(env.params, **changes)
    return dataclasses.replace(config, environment=dataclasses.replace(env, params=params))


def spec_from_json(text: str) -> DeploySpec:
    data = json.loads(text)
    if not isinstance(data, dict) or set(data) != {"config", "label", "run"}:
        raise ConfigError("a deployment spec is a JSON object with keys config, label, run")
    return make_spec(config_from_dict(data["config"]), data["label"], data["run"])


def cached_spec_from_json(text: str, cache: Path) -> DeploySpec:
    """:func:`spec_from_json`, remembered in ``cache`` (a file in the party's own state folder).

    Flower starts a new ClientApp process for every message, and validating a spec runs the
    noise calibration (with dp-accounting's import, most of a ClientApp's CPU time).  The cache
    holds the SHA-256 of the exact text it validated: any other text is validated afresh, and
    the digest a caller pins is the spec's own, as before.
    """
    key = hashlib.sha256(text.encode()).hexdigest()
    try:
        cached = load_pickle(cache)
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):  # none yet, or not a cache
        cached = None
    if isinstance(cached, tuple) and len(cached) == 2 and cached[0] == key and isinstance(cached[1], DeploySpec):
        return cached[1]
    spec = spec_from_json(text)
    save_pickle(cache, (key, spec))
    return spec


def save_pickle(path: Path, obj: object) -> None:
    atomic_write_bytes(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


#: modules whose classes a durable state file written by an earlier version may name (old -> new):
#: the cryptography moved below both transports (issue #45)
MOVED_MODULES = {
    f"fedbandits.federation.{name}": f"fedbandits.crypto.{name}"
    for name in ("secure_aggregation", "double_masking", "signing")
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def load_pickle(path: Path) -> Any:
    """A durable state file (classes that moved since it was written are found at their new place)."""
    with open(path, "rb") as f:
        return _Unpickler(f).load()


def finite_float(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)
