"""The Python API from a script (#29): the README's snippet runs as pasted with workers = 2, and a
script that calls it outside ``if __name__ == "__main__":`` gets one line showing the guard, before
any process starts, instead of a BrokenProcessPool after pages of tracebacks.

Each script runs in a fresh interpreter (the guard is about the interpreter's main script), in a
temporary folder; PYTHONPATH passes through, so the scripts import the checkout under test.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedbandits.sim.mainguard import GUARD, _guarded_lines

README = Path(__file__).resolve().parents[1] / "docs" / "running.md"  # the README's "## Python" section, moved


def readme_snippet(index: int = 0) -> str:
    """The ``index``-th ```python block under the README's "## Python" heading, verbatim."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) > index, f"fewer than {index + 1} ```python blocks under ## Python in docs/running.md"
    return blocks[index]


def _run_script(folder: Path, name: str, source: str, *module: str) -> subprocess.CompletedProcess[str]:
    (folder / name).write_text(source, encoding="utf-8")
    command = [sys.executable, *(["-m", *module] if module else [name])]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


def test_the_readme_snippet_runs_as_pasted_with_two_workers(tmp_path: Path) -> None:
    """The README's snippet, unchanged, as a script: exit 0, its table printed, and its results
    from two tasks (a config of one task runs in the caller's process and would start no worker)."""
    snippet = readme_snippet()
    assert "workers=2" in snippet  # the case reported in #29: a pool of worker processes
    proc = _run_script(tmp_path, "snippet.py", snippet)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (summary_path,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["tasks"] == 2 and summary["runs"] == 4
    for entry in summary["algorithms"]:
        assert f"{entry['label']} {entry['final_regret_mean']} " in proc.stdout  # the snippet's own lines


def test_the_readme_agent_snippet_runs_as_pasted(tmp_path: Path) -> None:
    """The README's online-agent snippet, unchanged, as a script: three silos decide, are rewarded,
    release and adopt one synced prefix, and the saved state loads with every decision counted."""
    snippet = readme_snippet(1)
    assert "fedbandits.Agent" in snippet
    proc = _run_script(tmp_path, "agent.py", snippet)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert (status["decisions"], status["rewarded"], status["syncs"], status["adopted"]) == (10, 10, 1, 1)
    assert status["noise_source"] == "os" and status["guarantee"] == "formal"  # secret noise by default
    assert status["clipped"] == 0  # the snippet's features have norm 1
    assert (tmp_path / "silo-0.npz").is_file()


UNGUARDED = """\
import os
from pathlib import Path

import fedbandits

config = fedbandits.quickstart_config()
try:
    fedbandits.run(config, workers=2, horizon=400, out="out")
except ValueError as exc:
    print(exc)
children = [p for p in Path("/proc").iterdir() if p.name.isdigit() and (p / "stat").exists()]
mine = []
for p in children:
    try:
        if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
            mine.append(p.name)
    except (OSError, IndexError, ValueError):
        pass
print("child processes:", len(mine))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts child processes in /proc (Linux)")
def test_an_unguarded_script_gets_one_line_before_any_process_starts(tmp_path: Path) -> None:
    """The call at line 8 of the script, outside the guard: refused in one line that shows the
    guard; no child process (not even the fork server) and no results folder."""
    proc = _run_script(tmp_path, "unguarded.py", UNGUARDED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "workers = 2 starts processes that re-run the script unguarded.py, and its line 8 would start them "
        f"again in each: put that line under `{GUARD}` (or use workers = 1)",
        "child processes: 0",
    ]
    assert not (tmp_path / "out").exists()


def test_an_unguarded_module_run_with_dash_m_is_refused_too(tmp_path: Path) -> None:
    """``python -m name`` re-runs the module by name in each worker: the same one line, exit 1."""
    source = "import fedbandits\n\nfedbandits.run(fedbandits.quickstart_config(), workers=2, horizon=400)\n"
    proc = _run_script(tmp_path, "unguarded_module.py", source, "unguarded_module")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "ValueError: workers = 2 starts processes that re-run the script unguarded_module.py, and its line 3 "
        f"would start them again in each: put that line under `{GUARD}` (or use workers = 1)"
    )


SNEAKY = """\
import sys

import fedbandits
from fedbandits.sim.checkpoint import TaskFailedError

__name__ = "__main__"  # defeats the guard in the workers, where the script runs as __mp_main__
if __name__ == "__main__":
    try:
        fedbandits.run(fedbandits.quickstart_config(), workers=2, horizon=400)
    except TaskFailedError as exc:
        print(exc)
        sys.exit(3)
"""


def test_a_worker_that_re_runs_the_script_anyway_stops_in_one_line(tmp_path: Path) -> None:
    """A guard the check cannot see through (``__name__`` reassigned): each worker that reaches the
    call again says so in one line and exits; the caller gets one line too, no traceback."""
    proc = _run_script(tmp_path, "sneaky.py", SNEAKY)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert proc.stdout.startswith("a worker process ended abruptly (killed, out of memory, or it failed while starting")
    assert "Traceback" not in proc.stderr
    worker_line = (
        "fedbandits: error: a worker process re-ran the main script and reached workers = 2 again: "
        f"put the script's work under `{GUARD}`"
    )
    assert worker_line in proc.stderr.splitlines()


GUARDS = """\
import fedbandits                                   # 1
if __name__ == "__main__":                          # 2
    a = 1                                           # 3
if "__main__" == __name__ and True:                 # 4
    b = 1                                           # 5
if __name__ != "__main__":                          # 6
    c = 1                                           # 7
else:                                               # 8
    d = (                                           # 9
        1)                                          # 10
if __name__ == "__main__" or True:                  # 11
    e = 1                                           # 12
if False:                                           # 13
    pass                                            # 14
elif __name__ == "__main__":                        # 15
    f = 1                                           # 16
"""


def test_the_guarded_lines_of_a_script(tmp_path: Path) -> None:
    """Only the lines that run under ``__name__ == "__main__"`` count: either way round, in a
    conjunction, the ``else`` of ``!=``, an ``elif``; never an ``or`` (it runs in a worker too)."""
    path = tmp_path / "guards.py"
    path.write_text(textwrap.dedent(GUARDS))
    assert sorted(_guarded_lines(path) or []) == [(3, 3), (5, 5), (9, 10), (16, 16)]
    path.write_text("def broken(:\n")
    assert _guarded_lines(path) is None  # unreadable: nothing is refused (the workers' check remains)
