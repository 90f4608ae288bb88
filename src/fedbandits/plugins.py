"""How algorithms, protocols and environments are registered: Python entry points, one mechanism.

Every name usable in a config is an entry point of one of three groups, built-in or third-party:

* ``fedbandits.algorithms`` -> an :class:`Entry` whose factory builds a policy;
* ``fedbandits.protocols`` -> a :class:`ProtocolEntry` whose factory builds a protocol;
* ``fedbandits.environments`` -> an :class:`Entry` whose factory builds an environment.

fedbandits declares its own entries in its ``pyproject.toml``; a plugin package declares its own the
same way (``docs/extending.md``)::

    [project.entry-points."fedbandits.algorithms"]
    fed-thompson = "fedbandits_example.thompson:ENTRY"

The tables are loaded on first use (:func:`load`) and checked: the object must be an entry of the
group's type, its name the entry point's, its parameters a frozen dataclass whose every field has a
default.  A plugin that fails (it does not import, a check fails, its name is a built-in's or another
plugin's) is recorded as a :class:`BrokenPlugin` with a one-line reason naming it, never raised:
the built-ins and the other plugins stay usable, ``fedbandits list`` shows it, and a config that
names it gets the reason as its error.  A built-in that fails raises: that is a bug of fedbandits.

This module sits below every other room (standard library only): the algorithms read the protocol
table from here, the registry reads all three.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

#: the distribution whose entry points are the built-ins
BUILTIN = "fedbandits"
#: kind -> entry-point group
GROUPS = {
    "algorithm": "fedbandits.algorithms",
    "protocol": "fedbandits.protocols",
    "environment": "fedbandits.environments",
}
#: what the privacy auditor may observe of a private protocol's ``transcript`` (``audit privacy``):
#: every silo's released ``messages``; the shuffled batch (``server_view``); the decoded ``sum``
AUDIT_VIEWS = ("messages", "shuffled", "aggregate")
#: how a real federation (``fedbandits deploy``, ``fedbandits serve``) carries a silo's release to the
#: analyzer: straight to the server, masked by secure aggregation, or through a shuffler party
CARRIERS = ("direct", "masked", "shuffled")


def _one_line(text: object, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True)
class NoParams:
    """A component without parameters."""


@dataclass(frozen=True)
class Entry:
    """One registered name: what ``fedbandits list`` shows, what a config table is validated into,
    and how the simulator builds it.

    ``params`` is a frozen dataclass whose every field has a default (a config may leave any key
    out) and whose ``__post_init__`` raises ``ValueError("<field> must be ..., got ...")`` on a bad
    value (the config turns it into a one-line error naming the table).  ``factory`` is called as
    ``factory(params, ctx)`` for an algorithm (``ctx`` a :class:`fedbandits.registry.PolicyContext`)
    and ``factory(params, rngs)`` for an environment (one Generator per run).
    """

    name: str
    description: str
    params: type
    factory: Callable[..., Any]
    #: the class the factory builds, for algorithms (its ``report_merge`` rules merge reports over tasks)
    policy: type | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError (one line) if a field is unusable."""
        if not isinstance(self.name, str) or not self.name or self.name.split() != [self.name]:
            raise ValueError(f"name must be a non-empty string without spaces, got {self.name!r}")
        if not isinstance(self.description, str):
            raise ValueError(f"description of {self.name!r} must be a string, got {type(self.description).__name__}")
        check_params(self.params)
        if not callable(self.factory):
            raise ValueError(f"factory of {self.name!r} must be callable, got {self.factory!r}")
        if self.policy is not None and not isinstance(self.policy, type):
            raise ValueError(f"policy of {self.name!r} must be a class or None, got {self.policy!r}")

    def parameters(self) -> list[tuple[str, object, str]]:
        """(name, default, help) of every parameter, in declaration order."""
        out = []
        for f in dataclasses.fields(self.params):
            default = f.default if f.default is not MISSING else None
            out.append((f.name, default, str(f.metadata.get("help", ""))))
        return out


@dataclass(frozen=True)
class ProtocolEntry(Entry):
    """A synchronisation protocol: ``factory(calibration, ctx)`` builds it (``calibration`` is None
    for a non-private protocol).

    A private protocol also gives ``calibrate(params, *, horizon, agents, dim)``, which turns the
    algorithm's parameters (``params.privacy_spec()``, ``params.batch``, ...) into the calibration its
    factory gets, raising ValueError when the request cannot be met; and ``audit_view``, what of its
    ``transcript`` the privacy auditor observes (one of :data:`AUDIT_VIEWS`).

    Its ability, read wherever a real federation chooses a protocol (so a new protocol is its module
    plus its entry): ``carried``, how a real federation carries a silo's release (one of
    :data:`CARRIERS`; None: the simulator only).
    """

    private: bool = False
    calibrate: Callable[..., Any] | None = None
    audit_view: str | None = None
    carried: str | None = None

    def check(self) -> None:
        super().check()
        if not isinstance(self.private, bool):
            raise ValueError(f"private of {self.name!r} must be true or false, got {self.private!r}")
        if self.carried is not None and self.carried not in CARRIERS:
            raise ValueError(
                f"carried of {self.name!r} must be one of {', '.join(map(repr, CARRIERS))} or None, "
                f"got {self.carried!r}"
            )
        if self.private:
            if not callable(self.calibrate):
                raise ValueError(f"private protocol {self.name!r} needs a callable calibrate, got {self.calibrate!r}")
            if self.audit_view not in AUDIT_VIEWS:
                raise ValueError(
                    f"audit_view of private protocol {self.name!r} must be one of "
                    f"{', '.join(map(repr, AUDIT_VIEWS))}, got {self.audit_view!r}"
                )
        elif self.calibrate is not None or self.audit_view is not None:
            raise ValueError(f"non-private protocol {self.name!r} takes no calibrate or audit_view")


def check_params(cls: object) -> None:
    """Raise ValueError unless ``cls`` is a frozen dataclass whose every field has a default."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"params must be a frozen dataclass, got {cls!r}")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ValueError(f"params {cls.__name__} must be a frozen dataclass (@dataclass(frozen=True))")
    missing = [
        f.name for f in dataclasses.fields(cls) if f.init and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ValueError(f"params {cls.__name__}: every field needs a default, missing for {missing}")


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin entry point that could not be registered, and why."""

    kind: str
    name: str
    distribution: str
    value: str
    reason: str

    def message(self) -> str:
        return (
            f"plugin {self.kind} {self.name!r} (entry point {self.name} = {self.value} of {self.distribution}) "
            f"is broken: {self.reason}"
        )


@dataclass(frozen=True)
class Catalog:
    """One group, loaded: the usable entries (built-ins first, in declaration order), the
    distribution each comes from, and the broken plugins."""

    kind: str
    entries: dict[str, Entry]
    origin: dict[str, str]
    broken: tuple[BrokenPlugin, ...] = field(default=())

    def reason(self, name: str) -> str | None:
        """Why a config cannot use ``name``, if a broken plugin of that name explains it."""
        for plugin in self.broken:
            if plugin.name == name:
                return plugin.message()
        return None


def _distribution(ep: EntryPoint) -> tuple[str, str]:
    """(normalized name, 'name version') of the distribution that declares ``ep``."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", "an unknown distribution"
    name = str(dist.metadata["Name"] or dist.name)
    return name.lower().replace("_", "-"), f"{name} {dist.version}"


def _load_entry(ep: EntryPoint, kind: str) -> Entry:
    """The checked entry of ``ep``; raises ValueError (one line) saying what is wrong."""
    try:
        obj = ep.load()
    except Exception as exc:
        raise ValueError(f"cannot load {ep.value}: {type(exc).__name__}: {_one_line(exc)}") from None
    expected = ProtocolEntry if kind == "protocol" else Entry
    if not isinstance(obj, expected):
        raise ValueError(f"{ep.value} is a {type(obj).__name__}, not a fedbandits.plugins.{expected.__name__}")
    if obj.name != ep.name:
        raise ValueError(f"{ep.value} is named {obj.name!r}, not {ep.name!r} as its entry point")
    try:
        obj.check()
    except ValueError as exc:
        raise ValueError(_one_line(exc)) from None
    return obj


#: the order ``fedbandits list`` shows the built-ins in (build backends write entry points sorted by
#: name, not as declared); a built-in not named here comes after them, by name
BUILTIN_ORDER = {
    "algorithm": (
        "linucb-independent",
        "linucb-super",
        "fedlinucb",
        "fedlinucb-async",
        "feducb",
        "feducb-decentralized",
        "cdp-fclub-dc",
        "fclub-dc",
        "fclub",
        "homo",
        "homo-dc",
        "club",
        "sclub",
        "linucb-per-user",
        "hetofedbandit",
    ),
    "protocol": ("none", "ldp", "ldp-prefix", "sdp-amplification", "sdp-vector-sum", "distributed-dp"),
    "environment": (
        "gaussian-sphere",
        "gap-instance",
        "uniform-cube",
        "movielens",
        "movielens-clusters",
        "learning-to-rank",
        "data-files",
        "heterogeneous-clients",
        "clustered-synthetic",
    ),
}


def _declared_order(kind: str, name: str) -> tuple[int, str]:
    order = BUILTIN_ORDER[kind]
    return (order.index(name), "") if name in order else (len(order), name)


@functools.cache
def _scan(kind: str) -> tuple[dict[str, EntryPoint], tuple[tuple[EntryPoint, str], ...]]:
    """The ``kind`` group's entry points, not loaded: the built-ins by name (in
    :data:`BUILTIN_ORDER`) and the plugins with their distribution's label."""
    group = GROUPS[kind]
    builtins: list[EntryPoint] = []
    plugins: list[tuple[EntryPoint, str]] = []
    for ep in entry_points(group=group):
        dist, label = _distribution(ep)
        if dist == BUILTIN:
            builtins.append(ep)
        else:
            plugins.append((ep, label))
    if not builtins:
        raise RuntimeError(
            f"the installed metadata of fedbandits declares no {group!r} entry points: reinstall it "
            "(pip install -e . in a checkout) so its built-in names are registered"
        )
    builtins.sort(key=lambda ep: _declared_order(kind, ep.name))
    return {ep.name: ep for ep in builtins}, tuple(plugins)


@functools.cache
def builtin(kind: str, name: str) -> Entry:
    """The built-in entry ``name`` of ``kind``, loaded alone: only its own module is imported (a
    Flower ClientApp, started for every message, imports the algorithm and environment it runs and
    no other).  Raises KeyError if fedbandits declares no such name, RuntimeError if it is broken."""
    ep = _scan(kind)[0][name]
    try:
        return _load_entry(ep, kind)
    except ValueError as exc:  # a bug of fedbandits itself: never hidden
        raise RuntimeError(
            f"built-in {kind} {ep.name!r} ({ep.value}): {exc} (if it names a moved module, the installed "
            "metadata is stale: pip install -e . in a checkout)"
        ) from None


@functools.cache
def load(kind: str) -> Catalog:
    """The ``kind`` group (``"algorithm"``, ``"protocol"``, ``"environment"``), every entry loaded and
    checked once: what listing the names needs (one name alone: :func:`builtin`)."""
    declared, plugins = _scan(kind)
    entries: dict[str, Entry] = {name: builtin(kind, name) for name in declared}
    origin = dict.fromkeys(entries, BUILTIN)
    broken: list[BrokenPlugin] = []
    for ep, label in plugins:
        if ep.name in entries:
            owner = origin[ep.name]
            reason = (
                f"its name clashes with the built-in {kind} {ep.name!r} (the built-in is kept)"
                if owner == BUILTIN
                else f"its name is already registered by {owner}"
            )
            broken.append(BrokenPlugin(kind, ep.name, label, ep.value, reason))
            continue
        try:
            entries[ep.name] = _load_entry(ep, kind)
            origin[ep.name] = label
        except ValueError as exc:
            broken.append(BrokenPlugin(kind, ep.name, label, ep.value, str(exc)))
    return Catalog(kind, entries, origin, tuple(broken))


def reload() -> None:
    """Forget the loaded tables: the next use scans the entry points again (after installing a plugin
    into a running interpreter, or in tests)."""
    load.cache_clear()
    builtin.cache_clear()
    _scan.cache_clear()
    importlib.invalidate_caches()


E = TypeVar("E", bound=Entry)


class Table(Mapping[str, E], Generic[E]):
    """A read-only name -> entry mapping over one group, loaded on first use (so importing the
    registry scans no entry points, and plugins may import fedbandits freely): a built-in name alone
    imports its own module only; listing, or a plugin's name, loads the whole group."""

    def __init__(self, kind: str) -> None:
        if kind not in GROUPS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, GROUPS))}, got {kind!r}")
        self.kind = kind

    @property
    def catalog(self) -> Catalog:
        return load(self.kind)

    def __getitem__(self, name: str) -> E:
        if isinstance(name, str) and name in _scan(self.kind)[0]:
            return builtin(self.kind, name)  # type: ignore[return-value]
        return self.catalog.entries[name]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return iter(self.catalog.entries)

    def __len__(self) -> int:
        return len(self.catalog.entries)

    def __repr__(self) -> str:
        return f"Table({self.kind!r}: {', '.join(self)})"

    @property
    def broken(self) -> tuple[BrokenPlugin, ...]:
        return self.catalog.broken

    def origin(self, name: str) -> str:
        """``"fedbandits"`` for a built-in, else the plugin's distribution and version."""
        return self.catalog.origin[name]

    def unknown(self, name: object, what: str) -> str:
        """The one-line error for a name that is not in the table: a broken plugin's reason, or
        the valid names."""
        reason = self.catalog.reason(name) if isinstance(name, str) else None
        if reason is not None:
            return reason
        return f"{what} must be one of {', '.join(map(repr, self))}, got {name!r}"


ALGORITHMS: Table[Entry] = Table("algorithm")
PROTOCOLS: Table[ProtocolEntry] = Table("protocol")
ENVIRONMENTS: Table[Entry] = Table("environment")
