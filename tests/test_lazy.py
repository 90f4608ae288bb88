"""core.lazy: a module's body runs at its first use, and the deployment's ClientApp path runs none
of scipy's heavy modules (every message starts a new process that imports it)."""

from __future__ import annotations

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
        "import sys, fedbandits.federation.app\n"
        "print(sorted(m for m in sys.modules if m.startswith(('scipy.optimize.', 'scipy.sparse.', 'scipy.special.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
