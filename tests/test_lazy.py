"""core.lazy: a module's body runs at its first use, and the deployment's ClientApp path runs none
of scipy's heavy modules (every message starts a new process that imports it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedbandits.core.lazy import lazy_module


def test_a_lazy_module_runs_at_its_first_attribute_access(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lazy_probe_mod.py").write_text("import builtins\nbuiltins.lazy_probe_ran = True\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe_mod", raising=False)
    import builtins

    monkeypatch.setattr(builtins, "lazy_probe_ran", False, raising=False)
    module = lazy_module("lazy_probe_mod")
    assert builtins.lazy_probe_ran is False  # type: ignore[attr-defined]
    assert module.VALUE == 42
    assert builtins.lazy_probe_ran is True  # type: ignore[attr-defined]
    assert lazy_module("lazy_probe_mod") is sys.modules["lazy_probe_mod"]
    monkeypatch.delitem(sys.modules, "lazy_probe_mod")


def test_an_unknown_module_is_refused_at_once() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        lazy_module("no_such_module_here")


def test_the_silo_app_imports_no_scipy_solver() -> None:
    pytest.importorskip("flwr")
    code = (
        "import sys, fedbandits.federation.client_app\n"
        "print(sorted(m for m in sys.modules if m.startswith(('scipy.optimize.', 'scipy.sparse.', 'scipy.special.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_clientapp_imports_the_silos_side_only() -> None:
    """Flower starts a ClientApp process for every message: it must not load the server's side of the
    app (coordinator, results, the shuffler party, the service) nor the simulator's runner and
    backends (fedbandits.sim imports its modules on use)."""
    pytest.importorskip("flwr")
    code = (
        "import sys, fedbandits.federation.client_app\n"
        "print(sorted(m for m in sys.modules if m in {\n"
        "    'fedbandits.federation.server', 'fedbandits.federation.server_app', 'fedbandits.federation.shuffler',\n"
        "    'fedbandits.federation.deployment_results', 'fedbandits.sim.runner', 'fedbandits.sim.backends',\n"
        "    'fedbandits.sim.results'} or m.startswith('fedbandits.serve')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_serving_silos_clientapp_loads_no_model_code() -> None:
    """The serving silos' ClientApp (a process per message, on the host that answers users) only
    forwards requests to the silo's service: no config, registry, agent or coordinator."""
    pytest.importorskip("flwr")
    pytest.importorskip("httpx")
    code = (
        "import sys, fedbandits.federation.serving_client_app\n"
        "print(sorted(m for m in sys.modules if m.startswith('fedbandits')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = ["fedbandits", "fedbandits._version", "fedbandits.federation", "fedbandits.federation.serving_client_app"]
    assert out.strip() == str(sorted([*modules, "fedbandits.serve", "fedbandits.serve.links"]))


def test_importing_the_silo_side_scans_no_plugin_entry_points() -> None:
    """The protocol table loads the entry points on first use; importing the deployment's spec and the
    online agent (every ClientApp process does) must not use it, so plugins may import fedbandits and
    no message pays for the scan (a module-level AGENT_PROTOCOLS once did, issue #45's set-up step)."""
    code = (
        "import fedbandits.plugins as p\n"
        "calls = []\n"
        "load = p.load\n"
        "p.load = lambda kind: calls.append(kind) or load(kind)\n"
        "import fedbandits.federation.spec, fedbandits.online\n"
        "print(calls)\n"
        "import fedbandits.online as online\n"
        "print(online.AGENT_PROTOCOLS)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "('none', 'ldp', 'distributed-dp')"]


def test_the_clientapp_imports_no_algorithm_or_environment_it_does_not_run() -> None:
    """The registry's built-in entries live beside their classes, and a name is looked up alone: a
    ClientApp, importing its module, loads no algorithm or environment module beyond the silo's own
    learner (FedLinUCB) and the data-files environment a silo may read (issue #45)."""
    pytest.importorskip("flwr")
    code = (
        "import json, sys, fedbandits.federation.client_app\n"
        "print(json.dumps([m for m in sys.modules if m.startswith(('fedbandits.algorithms.', 'fedbandits.envs.'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    others = {"cluster_catalog", "fclub", "club", "feducb", "feducb_decentralized", "hetofedbandit", "async_fedlinucb"}
    assert not loaded & {f"fedbandits.algorithms.{name}" for name in others}, sorted(loaded)
    assert not loaded & {f"fedbandits.envs.{name}" for name in ("movielens", "ltr", "clustered", "heterogeneous")}
