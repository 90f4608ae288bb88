"""Modules whose body runs at their first use: heavy dependencies of code paths a process may never take.

Why: the deployment starts a new ClientApp process for every message (docs/deployment.md), and
each one imports the whole protocol stack.  scipy's optimizers and special functions are only
needed to *calibrate* noise, which a silo does once per deployment (its validated spec is cached
in its state folder), so importing them eagerly cost every message about 0.25 CPU-s of 1.9.

    optimize = lazy_module("scipy.optimize")   # a module object now, scipy.optimize's code later

This is the standard library's mechanism (:class:`importlib.util.LazyLoader`): the module is in
``sys.modules`` at once, and its code runs at the first attribute access.  A module somebody
already imported is returned as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, loaded at its first attribute access (its parent packages are imported now)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
