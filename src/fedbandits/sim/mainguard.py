"""A local pool's workers re-run the caller's main script: a script that starts one needs the main guard.

The local pool starts its workers from a fork server (``spawn`` where there is none), and
multiprocessing prepares every such worker by running the caller's main script again, as the
module ``__mp_main__`` (the multiprocessing guide, "Safe importing of main module").  A script
that calls ``fedbandits.run(..., workers=2)`` outside ``if __name__ == "__main__":`` would start
the experiment again in every worker, which dies while it starts: a BrokenProcessPool after pages
of tracebacks.  Nothing in multiprocessing's documented API stops that re-run for these start
methods (``fork`` does not re-run it, but it copies a process that may run threads, which the
pool avoids, and Windows has no fork), so the call is refused instead, before any process starts
(:func:`check_main_guard`):

* in the script's own process: when the script will be re-run (a file run as ``python
  script.py`` or a module run as ``python -m module``, not an interactive session, ``python -c``
  or a package's ``__main__``; the rules of ``multiprocessing.spawn``) and its top level, running
  now, is at a line outside the guard (read from the script's syntax tree), a ValueError in one
  line that shows the guard;
* in a worker that re-runs the script anyway (a guard this check cannot see, e.g. ``__name__``
  reassigned): one line on stderr and the worker exits, before it starts processes of its own;
  the pool then reports a worker that ended abruptly, in one line too.
"""

from __future__ import annotations

import ast
import inspect
import sys
import tokenize
from pathlib import Path
from types import FrameType

GUARD = 'if __name__ == "__main__":'


def check_main_guard(workers: int) -> None:
    """Refuse ``workers`` > 1 local processes started from a main script's unguarded top level."""
    if workers <= 1:
        return
    main = sys.modules.get("__main__")
    rerun = sys.modules.get("__mp_main__")
    frames = list(_module_frames())
    if rerun is not None and rerun is not main and any(frame.f_globals is vars(rerun) for frame in frames):
        # a worker re-running the script (multiprocessing makes __mp_main__ an alias of __main__
        # in every other process, and of the re-run script once it has run): an exception here would
        # print pages of traceback before the worker exits, so say it in one line and exit
        # one write of the whole line: print() writes the text and its newline apart, and two workers'
        # lines then interleave on the shared stderr
        sys.stderr.write(
            f"fedbandits: error: a worker process re-ran the main script and reached workers = {workers} again: "
            f"put the script's work under `{GUARD}`\n"
        )
        sys.stderr.flush()
        raise SystemExit(1)
    path = _rerun_script(main)
    if path is None:
        return
    for frame in frames:
        if frame.f_globals is vars(main) and Path(frame.f_code.co_filename).resolve() == path:
            line = frame.f_lineno
            guarded = _guarded_lines(path)
            if guarded is not None and not any(first <= line <= last for first, last in guarded):
                raise ValueError(
                    f"workers = {workers} starts processes that re-run the script {path.name}, and its line {line} "
                    f"would start them again in each: put that line under `{GUARD}` (or use workers = 1)"
                )


def _module_frames() -> list[FrameType]:
    """The frames running a module's top level, innermost first."""
    frames = []
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            frames.append(frame)
        frame = frame.f_back
    return frames


def _rerun_script(main: object) -> Path | None:
    """The file of ``__main__`` that multiprocessing runs again in a spawned or fork-server worker,
    or None where it runs none (``multiprocessing.spawn.get_preparation_data`` and ``prepare``)."""
    if main is None:
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None  # a package's or a zip archive's __main__: never re-run
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or (name is None and Path(file).stem == "ipython"):
        return None
    return Path(file).resolve()


def _guarded_lines(path: Path) -> list[tuple[int, int]] | None:
    """Line ranges of ``path`` that run only when ``__name__ == "__main__"``; None if unreadable."""
    try:
        with tokenize.open(path) as f:
            tree = ast.parse(f.read(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    ranges = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        kind = _is_main(node.test)
        branch = node.body if kind is True else node.orelse if kind is False else []
        if branch:
            ranges.append((branch[0].lineno, branch[-1].end_lineno or branch[-1].lineno))
    return ranges


def _is_main(test: ast.expr) -> bool | None:
    """True for a test that holds only in the main script (``__name__ == "__main__"``, either way
    round, or a conjunction with it), False for ``__name__ != "__main__"``, None for anything else."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(_is_main(value) is True for value in test.values) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        sides = [test.left, test.comparators[0]]
        name = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
        main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
        if name and main:
            if isinstance(test.ops[0], ast.Eq):
                return True
            if isinstance(test.ops[0], ast.NotEq):
                return False
    return None
