"""The memory a simulation will hold, estimated from the validated config before anything is allocated.

A task simulates R runs of M agents together: ``runs_per_task`` runs, or fewer in the last task
(all of them when the config has fewer runs than ``runs_per_task``).  Per round the environment holds
at least the contexts, a float32 array (R, M, K, d); every learner that keeps one ridge state per
agent (``linucb-independent``, ``fedlinucb``, ``feducb``, ``feducb-decentralized``) holds at least
its Gram matrix and inverse, two float64 arrays (R, M, d, d); a factorized release adds the
batches its silos keep (:func:`_factorized_bytes`).  The estimate counts only these arrays, so
it is a lower bound of what a task needs: a config it refuses cannot run.  ``workers`` tasks run
at once locally: the estimate counts the largest ones.

Available memory is MemAvailable of /proc/meminfo (Linux) unless a bound is given
(``--max-memory``); where neither is known nothing is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from fedbandits.config import Config
from fedbandits.privacy.factorization import default_band
from fedbandits.privacy.mechanisms import packed_width
from fedbandits.sim.task import task_chunks

#: learners with a ridge state per agent: Gram matrix and inverse, float64 (R, M, d, d) each
PER_AGENT_STATE = ("linucb-independent", "fedlinucb", "feducb", "feducb-decentralized")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """'512M', '8G', '1.5T' or a number of bytes; ValueError naming the accepted forms."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"--max-memory must be a positive size such as 512M, 8G or 1.5T, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _size(config: Config, name: str) -> int:
    value = getattr(config.environment.params, name, 0)
    return int(value) if isinstance(value, int) and value > 0 else 1  # unknown until the data is read


def task_runs(config: Config) -> list[int]:
    """The runs each task of ``config`` holds, in task order: ``runs_per_task`` each, the last the rest."""
    return [len(runs) for runs in task_chunks(config)]


def task_bytes(config: Config, runs: int | None = None) -> int:
    """Estimated bytes a task of ``runs`` runs of ``config`` holds (default: its largest task; see the
    module docstring)."""
    runs = max(task_runs(config)) if runs is None else runs
    agents = _size(config, "agents")
    arms, dim = _size(config, "arms"), _size(config, "dim")
    contexts = runs * agents * arms * dim * 4
    learners = sum(alg.name in PER_AGENT_STATE for alg in config.algorithms)
    return contexts + learners * 2 * runs * agents * dim * dim * 8 + _factorized_bytes(config, runs, agents, dim)


def _factorized_bytes(config: Config, runs: int, agents: int, dim: int) -> int:
    """A factorized release keeps every silo's last ``band`` batches, float64 (band, R, M, P), the
    server's summed messages (K, R, P), and with ``ldp-prefix`` every silo's messages (K, R, M, P)."""
    width = packed_width(dim)
    total = 0
    for alg in config.algorithms:
        if getattr(alg.params, "mechanism", "tree") != "factorized":
            continue
        releases = config.experiment.horizon // alg.params.batch
        silo_copies = default_band(releases) + (releases if alg.params.protocol == "ldp-prefix" else 0)
        total += (silo_copies * agents + releases) * runs * width * 8
    return total


def export_bytes(config: Config, rounds: int) -> int:
    """Bytes ``data export`` holds: every round of one run, features and expected rewards, float32
    (M, rounds, K, d + 1), plus the environment's own contexts of one round (1, M, K, d)."""
    agents, arms, dim = _size(config, "agents"), _size(config, "arms"), _size(config, "dim")
    return agents * rounds * arms * (dim + 1) * 4 + agents * arms * dim * 4


def check_export_memory(config: Config, rounds: int, limit: int | None = None) -> int:
    """As :func:`check_memory` for ``data export``: one line naming the sizes and the estimate."""
    need = export_bytes(config, rounds)
    _refuse_above(need, limit, "the export", f"{rounds} rounds, {_sizes(config)}", "lower --rounds or the sizes")
    return need


def _sizes(config: Config) -> str:
    env = config.environment.params
    return ", ".join(f"{name} = {getattr(env, name)}" for name in ("agents", "arms", "dim") if hasattr(env, name))


def _refuse_above(need: int, limit: int | None, what: str, detail: str, advice: str) -> None:
    """ValueError in one line if ``need`` bytes exceed ``limit`` (default: the available memory)."""
    bound = limit if limit is not None else available_bytes()
    if bound is not None and need > bound:
        source = "--max-memory" if limit is not None else "available memory"
        raise ValueError(
            f"{what} would hold at least {_human(need)} ({detail}), more than the {_human(bound)} of {source}: {advice}"
        )


def _tasks(held: list[int]) -> str:
    """'2 task(s) of 12 runs', or with a partial task '2 task(s): 1 of 12 runs, 1 of 5 runs'."""

    def runs(n: int) -> str:
        return f"{n} run" if n == 1 else f"{n} runs"

    sizes = sorted(set(held), reverse=True)
    if len(sizes) == 1:
        return f"{len(held)} task(s) of {runs(sizes[0])}"
    return f"{len(held)} task(s): " + ", ".join(f"{held.count(n)} of {runs(n)}" for n in sizes)


def available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, or None where it cannot be read."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(r"^MemAvailable:\s+([0-9]+) kB", text, flags=re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_memory(config: Config, parallel: int = 1, limit: int | None = None) -> int:
    """Raise ValueError (one line: the sizes and the estimate) if ``parallel`` tasks cannot fit.

    The ``parallel`` largest tasks of ``config`` (at most all of them) are counted with the runs
    each really holds.  ``limit``: a bound in bytes (``--max-memory``); default the machine's
    available memory.  Returns the estimate.
    """
    held = sorted(task_runs(config), reverse=True)[: max(1, parallel)]
    need = sum(task_bytes(config, runs) for runs in held)
    detail = f"{_tasks(held)}, {_sizes(config)}, {len(config.algorithms)} algorithm(s)"
    _refuse_above(need, limit, "the simulation", detail, "lower the sizes, runs_per_task or --workers")
    return need
