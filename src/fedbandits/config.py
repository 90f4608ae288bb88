"""Validated experiment configuration, loaded from TOML or a dict.

A config has three parts::

    [experiment]          # seed, runs, horizon, and optional noise_seed, runs_per_task, grid_points, name
    [environment]         # name = "gaussian-sphere" | "gap-instance" | ...  plus its parameters
    [[algorithms]]        # one table per algorithm: name, optional label and noise_stream, its parameters

An algorithm without a ``label`` is labelled by :func:`default_label` (its name, and for a private
one its protocol and epsilon).  Unknown tables or keys are errors.  Every error is a
:class:`ConfigError` whose message names the offending field (e.g. ``algorithms[2].batch``) and
its valid range.  The same object drives the CLI, the Python API and the reproduction registry.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from fedbandits.core.validation import check_int
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, Entry, Table


class ConfigError(ValueError):
    """A configuration value, key or file is invalid."""


@dataclass(frozen=True)
class ExperimentConfig:
    seed: int = field(default=0, metadata={"help": "master seed; run r uses SeedSequence(seed, spawn_key=(r,...))"})
    runs: int = field(default=1, metadata={"help": "independent runs R >= 1"})
    horizon: int = field(default=1000, metadata={"help": "rounds T >= 1"})
    noise_seed: int | None = field(
        default=None, metadata={"help": "seed of the privacy noise only (default: from seed)"}
    )
    runs_per_task: int | None = field(
        default=None, metadata={"help": "runs simulated together in one task (default: max(1, 128 // agents))"}
    )
    grid_points: int = field(default=200, metadata={"help": "points of the saved regret curves, >= 2"})
    name: str = field(default="experiment", metadata={"help": "a name for the results"})

    def __post_init__(self) -> None:
        check_int("seed", self.seed, low=0)
        check_int("runs", self.runs, low=1)
        check_int("horizon", self.horizon, low=1)
        if self.noise_seed is not None:
            check_int("noise_seed", self.noise_seed, low=0)
        if self.runs_per_task is not None:
            check_int("runs_per_task", self.runs_per_task, low=1)
        check_int("grid_points", self.grid_points, low=2)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")


@dataclass(frozen=True)
class ComponentConfig:
    """An environment or algorithm: its registry name, a label and validated parameters.

    ``noise_stream`` (algorithms only): the index ``a`` of the privacy-noise stream
    ``SeedSequence(noise_seed, spawn_key=(r, 1, a))`` the entry draws from; None (not stated) is
    the entry's 0-based position in ``[[algorithms]]`` (see :meth:`Config.noise_stream`).  Fixing
    it lets a config that drops other entries replay this entry's noise exactly.
    """

    name: str
    label: str
    params: Any
    noise_stream: int | None = None

    def to_dict(self) -> dict[str, Any]:
        # None is "resolved automatically" (TOML has no null): leaving the key out reads back the same
        stream = {} if self.noise_stream is None else {"noise_stream": self.noise_stream}
        return {
            "name": self.name,
            "label": self.label,
            **stream,
            **{k: v for k, v in asdict(self.params).items() if v is not None},
        }


@dataclass(frozen=True)
class Config:
    experiment: ExperimentConfig
    environment: ComponentConfig
    algorithms: tuple[ComponentConfig, ...]

    def with_experiment(self, **changes: Any) -> Config:
        """A copy with some ``[experiment]`` fields replaced (validated)."""
        try:
            return replace(self, experiment=replace(self.experiment, **changes))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"experiment: {exc}") from None

    def noise_stream(self, index: int) -> int:
        """The privacy-noise stream of algorithm entry ``index``: its ``noise_stream``, else ``index``."""
        stated = self.algorithms[index].noise_stream
        return index if stated is None else stated

    def runs_per_task(self) -> int:
        if self.experiment.runs_per_task is not None:
            return self.experiment.runs_per_task
        return max(1, 128 // self.environment.params.agents)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that :func:`config_from_dict` turns back into an equal Config."""
        exp = {k: v for k, v in asdict(self.experiment).items() if v is not None}
        env = self.environment.to_dict()
        env.pop("label")
        return {"experiment": exp, "environment": env, "algorithms": [a.to_dict() for a in self.algorithms]}


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    return loads_config(text, source=str(path))


def loads_config(text: str, source: str = "<string>") -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"malformed TOML in {source}: {exc}") from None
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("a config must be a table (dict)")
    unknown = set(data) - {"experiment", "environment", "algorithms"}
    if unknown:
        raise ConfigError(
            f"unknown top-level key(s) {sorted(unknown)}; valid: 'experiment', 'environment', 'algorithms'"
        )
    experiment = _build_dataclass("experiment", ExperimentConfig, _table(data, "experiment", required=False))
    env_table = _table(data, "environment", required=True)
    environment = _build_component("environment", env_table, ENVIRONMENTS, allow_label=False)
    algs = data.get("algorithms")
    if not isinstance(algs, list) or not algs:
        raise ConfigError("algorithms: at least one [[algorithms]] table is required")
    algorithms = tuple(
        _build_component(f"algorithms[{i + 1}]", _as_table(f"algorithms[{i + 1}]", t), ALGORITHMS, allow_label=True)
        for i, t in enumerate(algs)
    )
    for i, alg in enumerate(algorithms):
        check = getattr(alg.params, "check_compatible", None)
        if check is not None:
            try:
                # data-driven environments only know their dimension once the data is read
                # (no `dim`, or data-files' dim = 0: "from the files")
                dim = getattr(environment.params, "dim", None) or None
                check(horizon=experiment.horizon, agents=environment.params.agents, dim=dim)
            except ValueError as exc:
                raise ConfigError(f"algorithms[{i + 1}] ({alg.name}): {exc}") from None
        user_ids = getattr(environment.params, "user_ids", None)
        if getattr(alg.params, "privacy_unit", "interaction") == "user" and user_ids is False:
            raise ConfigError(
                f"algorithms[{i + 1}].privacy_unit: 'user' needs user ids, and environment {environment.name!r} "
                "carries none as configured (gaussian-sphere: set returning_users > 0)"
            )
    labels = [a.label for a in algorithms]
    duplicates = sorted({lab for lab in labels if labels.count(lab) > 1})
    if duplicates:
        raise ConfigError(f"algorithms: labels must be unique, repeated: {duplicates} (set `label` to tell them apart)")
    config = Config(experiment, environment, algorithms)
    _check_noise_streams(config)
    return config


def _check_noise_streams(config: Config) -> None:
    """Two entries drawing the same privacy noise would be silently correlated: refuse it."""
    owner: dict[int, int] = {}
    for i in range(len(config.algorithms)):
        stream = config.noise_stream(i)
        if stream in owner:
            raise ConfigError(
                f"algorithms[{i + 1}].noise_stream must be an integer >= 0 used by no other entry, got {stream}: "
                f"the stream of algorithms[{owner[stream] + 1}] (an entry without noise_stream uses its 0-based "
                "position); entries sharing a stream would draw the same privacy noise"
            )
        owner[stream] = i


def _table(data: dict[str, Any], key: str, *, required: bool) -> dict[str, Any]:
    if key not in data:
        if required:
            raise ConfigError(f"{key}: the [{key}] table is required")
        return {}
    return _as_table(key, data[key])


def _as_table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
    return dict(value)


def _build_component(
    where: str, table: dict[str, Any], registry: Table[Entry], *, allow_label: bool
) -> ComponentConfig:
    name = table.pop("name", None)
    if not isinstance(name, str) or name not in registry:
        # a broken plugin of that name: its reason (fedbandits.plugins), else the valid names
        raise ConfigError(registry.unknown(name, f"{where}.name"))
    label = table.pop("label", None) if allow_label else name
    if label is not None and (not isinstance(label, str) or not label):
        raise ConfigError(f"{where}.label must be a non-empty string, got {label!r}")
    stream = table.pop("noise_stream", None) if allow_label else None
    if stream is not None:
        try:
            stream = check_int(f"{where}.noise_stream", stream, low=0)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    params = _build_dataclass(f"{where} ({name})", registry[name].params, table)
    return ComponentConfig(name, default_label(name, params) if label is None else label, params, stream)


def is_private(params: Any) -> bool:
    """An algorithm's parameters promise privacy: they have an ``epsilon`` and, if they have a
    ``private`` switch (FedLinUCB's follows its protocol, FedUCB's is a field), it is on."""
    return hasattr(params, "epsilon") and bool(getattr(params, "private", True))


def default_label(name: str, params: Any, *, epsilon: bool = True) -> str:
    """The label of an ``[[algorithms]]`` entry that states none: its name, and for a private entry
    (:func:`is_private`) its protocol (if it has one), ``eps=<epsilon>`` and a mechanism other than
    its default: ``fedlinucb``, ``fedlinucb ldp eps=1``, ``fedlinucb distributed-dp eps=1
    factorized``, ``feducb eps=1``, ``cdp-fclub-dc eps=300``.  ``epsilon=False`` leaves out the
    epsilon (a frontier's line, which runs the entry at many).  Labels must still be unique: two
    entries with the same default label are refused, as two with the same stated label are."""
    if not is_private(params):
        return name
    words = [name]
    protocol = getattr(params, "protocol", None)
    if isinstance(protocol, str):
        words.append(protocol)
    if epsilon:
        words.append(f"eps={params.epsilon:g}")
    mechanism = getattr(params, "mechanism", None)
    if isinstance(mechanism, str) and mechanism != _field_default(params, "mechanism"):
        words.append(mechanism)
    return " ".join(words)


def algorithm_label(entry: dict[str, Any], where: str = "algorithm") -> str:
    """The label an ``[[algorithms]]`` table (a dict shaped like the TOML) gets when read: its
    ``label``, else :func:`default_label` of its validated parameters (a ConfigError if invalid)."""
    return _build_component(where, dict(entry), ALGORITHMS, allow_label=True).label


def _field_default(params: Any, name: str) -> Any:
    if is_dataclass(params):
        for f in fields(params):
            if f.name == name:
                return f.default
    return None


def _build_dataclass(where: str, cls: type, table: dict[str, Any]) -> Any:
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {valid}")
    try:
        return cls(**table)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def as_config(source: Config | dict[str, Any] | str | Path) -> Config:
    """A validated Config from a Config, a dict shaped like the TOML, or a TOML file's path."""
    if isinstance(source, Config):
        return source
    if isinstance(source, dict):
        return config_from_dict(source)
    if isinstance(source, str | Path):
        return load_config(source)
    raise ConfigError(f"config must be a Config, a dict or a TOML file's path, got {type(source).__name__}")
