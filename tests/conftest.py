import os
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from datafixtures import data_home_with_every_dataset
from fedbandits import plugins
from fedbandits.envs.datahome import DATA_ENV

# The library finds real data only through $FEDBANDITS_DATA or the user data folder, never relative
# to a checkout (fedbandits.envs.datahome).  The tests know the project's layout: the shared data
# folder beside the checkout serves when the variable is unset.  Without it the tests that need
# real numbers skip, and generated look-alikes cover the same code (tests/datafixtures.py).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not os.environ.get(DATA_ENV) and SHARED_DATA.is_dir():
    os.environ[DATA_ENV] = str(SHARED_DATA)


@pytest.fixture(scope="session")
def figure_data_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A data home with every data set a figure reads: the real one linked where present, else a
    generated look-alike (tests/datafixtures.py), built once.  Returns it and the names generated."""
    home = tmp_path_factory.mktemp("data")
    return home, data_home_with_every_dataset(home)


@pytest.fixture
def figure_data(figure_data_home: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """$FEDBANDITS_DATA at :func:`figure_data_home` for one test, so a test that reproduces an MSLR or
    MovieLens figure runs on every clone (its code, not the real numbers); the names generated."""
    home, generated = figure_data_home
    monkeypatch.setenv(DATA_ENV, str(home))
    return generated


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


# Property-based tests run a fixed, derandomized set of examples: the same inputs on every machine
# (CI included), so a failure reproduces; FEDBANDITS_HYPOTHESIS=explore draws fresh ones.
settings.register_profile("fixed", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("FEDBANDITS_HYPOTHESIS", "fixed"))


# The entry-point registry the tests read is fedbandits' own (plus the fake plugins a test puts on
# sys.path), whatever plugins the environment has installed: docs/extending.md has the user
# `pip install ./examples/plugin` next to fedbandits, and the tests that list names, compare the
# tables or count the audit's rows must still pass (issue #29).  Pinned before collection, as some
# test modules read the tables when they are imported.
def _distribution_key(dist: metadata.Distribution) -> tuple[str, str]:
    """A distribution's name and the folder its metadata sits in: a test's fake plugin of an
    installed plugin's name, in a temporary folder, is not the installed one."""
    name = str(dist.metadata["Name"] or "").lower().replace("_", "-")
    return name, str(dist.locate_file(""))


def installed_plugins() -> frozenset[tuple[str, str]]:
    """The installed distributions other than fedbandits that declare fedbandits entry points."""
    groups = set(plugins.GROUPS.values())
    return frozenset(
        _distribution_key(dist)
        for dist in metadata.distributions()
        if any(ep.group in groups for ep in dist.entry_points) and _distribution_key(dist)[0] != plugins.BUILTIN
    )


def pinned_entry_points(hidden: Iterable[tuple[str, str]]) -> Callable[..., metadata.EntryPoints]:
    """``importlib.metadata.entry_points(group=...)``, as fedbandits.plugins calls it, without the
    entry points of the ``hidden`` distributions."""
    hidden = frozenset(hidden)

    def entry_points(*, group: str) -> metadata.EntryPoints:
        found = metadata.entry_points(group=group)
        return metadata.EntryPoints(ep for ep in found if ep.dist is None or _distribution_key(ep.dist) not in hidden)

    return entry_points


_PINNED = pytest.MonkeyPatch()


def pytest_configure(config: pytest.Config) -> None:
    _PINNED.setattr(plugins, "entry_points", pinned_entry_points(installed_plugins()))
    plugins.reload()


def pytest_unconfigure(config: pytest.Config) -> None:
    _PINNED.undo()
    plugins.reload()


# A real PostgreSQL server (Debian's `postgresql`) for the serving silo's shared event log (issue #48):
# one throwaway server per test session, started in a temporary folder and stopped by its PID
# (fedbandits.serve.pglocal), and one new database per test.  Tests that use it skip, with the reason,
# on a machine without the server programs or psycopg (`pip install -e '.[dev]'` brings psycopg;
# `.ci/run` installs the Debian package).
@pytest.fixture(scope="session")
def postgres() -> Iterable[object]:
    pytest.importorskip("psycopg")
    from fedbandits.serve.pglocal import LocalPostgres, PostgresUnavailable

    try:
        # fsync off: a killed server keeps its commits (they are in the kernel's cache), a crashed machine need not
        server = LocalPostgres(fsync=False)
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    server.start()
    yield server
    server.close()


@pytest.fixture
def pg_url(postgres: object, request: pytest.FixtureRequest) -> str:
    """The URL of a new, empty database on the session's server."""
    import re

    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + f"_{next(_DATABASES)}"
    postgres.start()  # type: ignore[attr-defined]  # a test that stopped or killed it: running again
    return str(postgres.create_database(name))  # type: ignore[attr-defined]


_DATABASES = iter(range(10**9))
