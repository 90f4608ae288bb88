"""What the pages say is what happens: the generated pages are current, and every command and code
block of the README and docs/ runs, or says on the page why it does not.

A block is a fenced ``bash``, ``console``, ``python`` or ``toml`` block. The line above its fence may
carry a marker:

- none: it runs in the default suite (a ``toml`` block is parsed; the others run, and must succeed);
- ``<!-- check: slow -->``: it needs data, an extra or more than a minute, and runs in CI's docs step
  (``pytest -m slow tests/test_docs.py``), after every extra is installed;
- ``<!-- check: skip REASON -->``: it cannot run as written (a template with your own hosts and files,
  an excerpt, hours of compute); the reason is shown under ``-rs``.

Commands run in a scratch folder laid out like a clone (``examples``, ``src``, ``benchmarks``,
``scripts`` and ``docs`` linked from this checkout, ``../shared`` when the checkout has it), so what a
block writes (``results/...``) lands there. ``pip install`` steps are not repeated: the suite's
environment has the extras (CI installs them before the docs step; ``.ci/run`` runs the README's
set-up commands verbatim on a fresh clone).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("bash", "console", "python", "toml")
MARKER = re.compile(r"^<!-- check: (slow|skip (.+)) -->$")
#: seconds a default-suite block may take (the page promises about a minute at most)
FAST_TIMEOUT = 120
SLOW_TIMEOUT = 900


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    text: str
    marker: str  # "run", "slow" or "skip"
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[Path]:
    generated = {ROOT / "docs" / name for name in _generator().PAGES}
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if p not in generated]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        start = re.match(r"^```(\w*)", lines[i])
        if not start:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if start.group(1) in LANGUAGES:
            above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = MARKER.match(above.strip())
            marker, reason = ("run", "") if not mark else ("slow", "") if mark.group(1) == "slow" else ("skip", mark[2])
            rel = str(path.relative_to(ROOT))
            out.append(Block(rel, i + 1, start.group(1), "\n".join(lines[i + 1 : end]), marker, reason))
        i = end + 1
    return out


def commands(block: Block) -> str:
    """The shell script of a bash or console block: a console block's ``$`` lines and their continuations."""
    lines = block.text.splitlines()
    if block.language == "console":
        kept, going = [], False
        for line in lines:
            if line.startswith("$ ") or going:
                kept.append(line[2:] if line.startswith("$ ") else line)
                going = line.rstrip().endswith("\\")
        lines = kept
    script = []
    for line in lines:
        line = re.sub(r"^\s*(python3 -m )?pip install \S+( \S+)*?( && |\s*(#.*)?$)", "", line)  # the env has the extras
        if line.strip():
            script.append(line)
    return "\n".join(script)


ALL = [b for page in pages() for b in blocks_of(page)]


def _param(block: Block):
    marks = [pytest.mark.slow] if block.marker == "slow" else []
    return pytest.param(block, id=block.id, marks=marks)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    work = tmp_path / "main"
    work.mkdir()
    for name in ("examples", "src", "benchmarks", "scripts", "docs"):
        (work / name).symlink_to(ROOT / name)
    if (ROOT.parent / "shared").is_dir():
        (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    return work


@pytest.mark.parametrize("block", [_param(b) for b in ALL])
def test_block(block: Block, scratch: Path) -> None:
    if block.marker == "skip":
        pytest.skip(f"{block.id}: {block.reason}")
    if block.language == "toml":
        tomllib.loads(block.text)  # a config excerpt must at least be valid TOML
        return
    if block.language == "python":
        (scratch / "block.py").write_text(block.text, encoding="utf-8")
        argv = [sys.executable, "block.py"]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", commands(block)]
    env = dict(os.environ, MPLBACKEND="Agg", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    timeout = SLOW_TIMEOUT if block.marker == "slow" else FAST_TIMEOUT
    done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{block.id} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_every_page_has_blocks_found_and_markers_understood() -> None:
    """A misspelt marker would silently run (or not run) a block: every ``<!-- check`` comment must parse."""
    for page in pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("<!-- check"):
                assert MARKER.match(line.strip()), f"{page.relative_to(ROOT)}:{number}: unknown marker {line!r}"
    assert len(ALL) >= 30  # the README and docs held 36 such blocks when this test was written


def test_console_and_pip_lines_become_the_commands_meant() -> None:
    text = "$ pip install ./examples/plugin   # beside it\n$ fedbandits list \\\n    --x\nout"
    block = Block("x.md", 1, "console", text, "run")
    assert commands(block) == "fedbandits list \\\n    --x"
    text = "python3 -m pip install -e '.[serve]' && fedbandits serve demo --seconds 30"
    block = Block("x.md", 1, "bash", text, "run")
    assert commands(block) == "fedbandits serve demo --seconds 30"


def test_generated_pages_are_current() -> None:
    """docs/index.md (from the README) and docs/reference/ (from the parser, the registry and the public names)."""
    stale = _generator().stale_pages()
    assert stale == [], f"stale generated pages {stale}: run python scripts/gen_docs.py"
