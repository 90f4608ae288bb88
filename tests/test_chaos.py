"""Chaos test of the deployment: 13 silos on loopback while a seeded schedule SIGKILLs processes.

Thirteen silos are enough for tight ``sdp-amplification`` (Lemma F.2 certifies amplification only
from N > 11.09 silos).  Two deployments, 15 synchronisations each (30 rounds in all, the issue's
minimum; CI's trial is shorter: ``ROUNDS``): ``ldp``, and ``sdp-amplification`` with the shuffler as
a process of its own.  In each, a schedule drawn from a
fixed seed SIGKILLs (no goodbye to anybody) and at once restarts:

* ``ldp``: three random silos during one round, later the server (SuperLink with its ServerApp)
  together with two random silos;
* ``sdp-amplification``: the shuffler together with two random silos, later the server together
  with two random silos.

Each kill lands a random 0-3 s after a round closed, so a silo may die before taking the next
request, while serving it, or after replying.  A killed silo rejoins once the SuperLink has counted
its old connection offline (up to 60 s: two missed heartbeats) and the server asks it again
(``app._exchange`` with ``reask``), so with a 120 s round deadline every round has every silo.

Asserted: every round closed exactly once (one "round k closed" line in the server's log across its
restarts, the rounds 1..K in its state); no silo missing from any round and no message rejected;
every message a killed silo had released is in its final state byte for byte (noise never redrawn);
the synced sums and every silo's actions are the simulator's exactly; every process of the
deployment is gone at the end (by PID: every process ever seen with the deployment's FLWR_HOME).

Reported (printed; CI runs this file with ``-s``): rounds per minute over the whole trial and over
rounds without a kill, the kills survived, and the peak memory (sum of PSS, sampled every 0.5 s) of
the server (SuperLink, SuperExec, ServerApp), of the shuffler and of the whole deployment.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from deployhelp import completed_rounds, wait_for
from fedbandits.config import loads_config
from fedbandits.federation.deployment import LocalDeployment
from fedbandits.federation.parity import compare, reference_run
from fedbandits.federation.processes import processes_under
from fedbandits.federation.server import Coordinator
from fedbandits.federation.silo import load_silo_results
from fedbandits.federation.spec import DeploySpec, make_spec
from fedbandits.sim.backends import process_alive

#: a shorter trial: FEDBANDITS_CHAOS_ROUNDS=7, the fewest that hold both kill events with a quiet round before
#: each and after the last (what CI ran until it left the trial to be run by hand: .ci/run); by default it is the
#: issue's 15 synchronisations per deployment
SILOS, ROUNDS, BATCH = 13, int(os.environ.get("FEDBANDITS_CHAOS_ROUNDS", "15")), 5
SEED = 20261125  # the kill schedule's seed
#: a killed silo needs at most 60 s (the SuperLink's heartbeat patience) + ~10 s to rejoin and answer
ROUND_TIMEOUT = 120.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="needs flwr (the deploy extra)"),
]


def _spec(protocol: str) -> DeploySpec:
    return make_spec(
        loads_config(f"""
[experiment]
seed = 7
horizon = {ROUNDS * BATCH}
[environment]
name = "gaussian-sphere"
agents = {SILOS}
arms = 20
dim = 4
[[algorithms]]
name = "fedlinucb"
batch = {BATCH}
protocol = "{protocol}"
epsilon = 5.0
delta = 0.01
""")
    )


def _pss_kib(pid: int) -> int:
    """Proportional set size (shared pages split among their users), KiB; 0 if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    found = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) if found else 0


class Sampler:
    """Every 0.5 s: the processes of the deployment (by FLWR_HOME) and their summed PSS."""

    def __init__(self, dep: LocalDeployment) -> None:
        self.home = dep.workdir / "home"
        self.seen: set[int] = set()
        self.peak = {"server": 0, "shuffler": 0, "deployment": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sums = {}
            for part, home in (
                ("server", self.home / "link"),
                ("shuffler", self.home / "shuffler"),
                ("deployment", self.home),
            ):
                pids = processes_under(home)
                self.seen.update(pids)
                sums[part] = sum(_pss_kib(p) for p in pids)
            for part, kib in sums.items():
                self.peak[part] = max(self.peak[part], kib)
            self._stop.wait(0.5)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _schedule(protocol: str, rng: np.random.Generator) -> list[tuple[int, float, list[str]]]:
    """(after round r closed, delay in s, processes to SIGKILL) -- two events, in order."""
    r1 = int(rng.integers(2, max(3, ROUNDS // 3)))
    r2 = int(rng.integers(r1 + 3, ROUNDS - 1))  # a round with no kill before each kill, and one after the last
    silos = [f"silo-{i}" for i in rng.permutation(SILOS)[:7]]
    first = silos[:3] if protocol == "ldp" else ["shuffler", *silos[:2]]
    return [(r1, float(rng.uniform(0, 3)), first), (r2, float(rng.uniform(0, 3)), ["superlink", *silos[3:5]])]


@pytest.mark.parametrize("protocol", ["ldp", "sdp-amplification"])
def test_chaos_thirteen_silos(tmp_path: Path, protocol: str) -> None:
    spec = _spec(protocol)
    rng = np.random.default_rng([SEED, ["ldp", "sdp-amplification"].index(protocol)])
    schedule = _schedule(protocol, rng)
    released: dict[int, dict[int, bytes]] = {}  # killed silo -> its released messages at the kill
    kill_rounds: set[int] = set()
    start = time.time()
    with (
        LocalDeployment(tmp_path, spec, round_timeout=ROUND_TIMEOUT, join_timeout=ROUND_TIMEOUT) as dep,
        Sampler(dep) as sampler,
    ):
        dep.start()
        for after, delay, victims in schedule:
            wait_for(lambda a=after: completed_rounds(dep) >= a, 300, f"round {after}")  # type: ignore[misc]
            time.sleep(delay)
            kill_rounds.add(completed_rounds(dep) + 1)
            for name in victims:
                dep.crash(name)
            for name in victims:  # restart in the order a careless operator would: as listed
                if name.startswith("silo-"):
                    i = int(name.removeprefix("silo-"))
                    state = load_silo_results(dep.state / name, i)  # released before any message left
                    released[i] = {k: m.tobytes() for k, m in state.messages.items()}
                    dep.start_silo(i)
                elif name == "shuffler":
                    dep.start_shuffler()
                else:
                    dep.start_superlink()
                    dep.submit()
        summary = dep.wait_done(900)
        wall = time.time() - start
    leftovers = dep.leftovers()
    survivors = sorted(p for p in sampler.seen if process_alive(p))

    # every process of the deployment is gone, restarted ones and Flower's children too
    assert leftovers == [] and survivors == [], (leftovers, survivors)
    assert summary["completed"] == ROUNDS and summary["restarts"] == 1
    assert summary["reports"] == list(range(SILOS)) and summary["rejections"] == 0
    coord = Coordinator(spec, dep.state / "server")
    assert [r.round for r in coord.state.rounds] == list(range(1, ROUNDS + 1))
    assert all(r.missing == [] and r.accepted == list(range(SILOS)) for r in coord.state.rounds), [
        (r.round, r.missing) for r in coord.state.rounds if r.missing
    ]
    log = (dep.state / "server" / "server.log").read_text()
    for k in range(1, ROUNDS + 1):  # closed exactly once, across the server's two lives
        assert len(re.findall(rf"round {k} closed:", log)) == 1, k
    # noise never redrawn: what a killed silo had released is in its final state, byte for byte
    assert released
    for i, before in released.items():
        after = load_silo_results(dep.state / f"silo-{i}", i).messages
        assert all(after[k].tobytes() == m for k, m in before.items()), i
    # parity with the simulator: every synced sum and every silo's every action
    dirs = {i: dep.state / f"silo-{i}" for i in range(SILOS)}
    assert compare(spec, reference_run(spec), coord.synced_prefixes(), dirs) == []
    if spec.shuffled:
        slog = (dep.logs / "shuffler.log").read_text()
        assert len(re.findall(r"resuming: \d+ of \d+ rounds closed", slog)) == 1
        for k in range(1, ROUNDS + 1):  # each round shuffled once, by one permutation
            assert len(re.findall(rf"round {k} closed: {SILOS} message\(s\) shuffled", slog)) == 1, k

    closed = [
        time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        for m in re.finditer(r"^(\S+ \S+),(\d+) INFO \S+ round (\d+) closed", log, re.M)
    ]
    gaps = [b - a for k, (a, b) in enumerate(itertools.pairwise(closed), start=2) if k not in kill_rounds]
    figures = {
        "protocol": protocol,
        "silos": SILOS,
        "rounds": ROUNDS,
        "kills": {f"after round {a} (+{d:.1f} s)": v for a, d, v in schedule},
        "wall_s": round(wall, 1),
        "rounds_per_minute": round(60 * ROUNDS / wall, 2),
        "rounds_per_minute_without_kills": round(60 / float(np.median(gaps)), 2),
        "peak_pss_mib": {k: round(v / 1024, 1) for k, v in sampler.peak.items()},
        "processes_seen": len(sampler.seen),
    }
    print("\nchaos figures:", json.dumps(figures))
    (tmp_path / "chaos-figures.json").write_text(json.dumps(figures, indent=2))
    assert os.getpid() not in sampler.seen
