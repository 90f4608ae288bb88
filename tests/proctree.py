"""Helpers shared by the tests of orphaned work: the process tree from /proc, and a long run.

Not a test module (no ``test_`` prefix); the tests import it by name (pytest puts ``tests/`` on
``sys.path``).  Linux only: the tests that use it skip without /proc.
"""

from __future__ import annotations

from pathlib import Path

#: two tasks of ~20 s each: still running when their driver is killed
LONG_RUN_TOML = """
[experiment]
seed = 1
runs = 2
runs_per_task = 1
horizon = 200000

[environment]
name = "gaussian-sphere"
agents = 4
arms = 20
dim = 5

[[algorithms]]
name = "linucb-independent"
"""


def parent(pid: int) -> int:
    """The parent pid of ``pid`` from /proc; 0 if it is gone."""
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def is_descendant(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = parent(pid)
        if pid == ancestor:
            return True
    return False


def descendants(ancestor: int) -> set[int]:
    """Every live process below ``ancestor`` in the process tree (by parent pid, from /proc)."""
    return {int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and is_descendant(int(e.name), ancestor)}
