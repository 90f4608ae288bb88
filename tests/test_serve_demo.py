"""``fedbandits serve demo``: its embedded config (private for real, both lines treated alike), the
story it tells (federation pays at the demo's 20 silos, not at the 3 of --flower: in the simulator, on
two seeds), its final screen's statistics and verdicts, and one short run end to end."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from fedbandits.config import config_from_dict, load_config
from fedbandits.online import AgentSetup
from fedbandits.serve.demo import DEMO_CONFIG, demo_config
from fedbandits.serve.demo_report import Estimate, learning_curve, regret_table, verdict
from fedbandits.serve.demo_traffic import private_bounds
from fedbandits.sim.runner import run_experiment


def test_the_embedded_config_is_private_for_real_and_treats_both_lines_alike():
    """The federated entry is distributed-dp (secure aggregation) with the streaming banded release at
    epsilon = 1: a serving silo runs it (no 'none' passed off as private), its guarantee has no horizon;
    the lone entry was offered the same reward offset, and the traffic clips only the private line's
    rewards, to the bounds its silos enforce."""
    config = load_config(DEMO_CONFIG)
    fed = AgentSetup.from_config(config, "fed")
    assert fed.private and fed.masked and fed.streaming and fed.releases is None
    assert fed.calibration is not None and fed.calibration.epsilon == 1.0 and fed.calibration.delta == 1e-5
    assert fed.silos == 20
    alone = AgentSetup.from_config(config, "alone")
    assert not alone.federated and not alone.private
    assert alone.params.reward_offset == fed.params.reward_offset == 0.5
    assert private_bounds(config) == (0.0, 1.0)  # [c - B, c + B]: the gaussian-sphere's expected rewards
    # --silos gives a federation of another size, still valid (--flower's 3)
    _, small, protocol = demo_config(None, False, 3)
    assert small.environment.params.agents == 3 and protocol == "distributed-dp"
    with pytest.raises(ValueError, match="--silos must be an integer >= 1"):
        demo_config(None, False, 0)


def second_half_regret(agents: int, seed: int, runs: int = 4) -> dict[str, np.ndarray]:
    """The simulator on the embedded config (its horizon: 480 users per silo, the default 2 minutes at
    4 users/s): pseudo-regret per user over the second half, per run."""
    config = load_config(DEMO_CONFIG)
    data = config.to_dict()
    data["environment"]["agents"] = agents
    data["experiment"].update(seed=seed, runs=runs)

    res = run_experiment(config_from_dict(data), workers=1)
    grid = res.grid
    half = int(np.searchsorted(grid, grid[-1] // 2))
    out = {}
    for label, r in res.algorithms.items():
        out[label] = (r.curves[:, -1] - r.curves[:, half]) / ((grid[-1] - grid[half]) * agents)
    return out


@pytest.mark.parametrize("seed", [2026, 7])
def test_the_story_federation_pays_at_20_silos_and_not_at_3(seed):
    """The demo's claim, on two seeds of the simulator (4 runs each; the serving demo adds reward delays
    and wall-clock syncs, measured in docs/serving.md): at the embedded 20 silos the federated line's
    second-half pseudo-regret per user is under 0.6x the lone silos' (measured 0.22x and 0.29x on seeds
    2026 and 7; 0.23x and 0.32x with 8 runs: the threshold leaves twice the largest), and at --flower's
    3 silos the lone silos win (measured 2.2x and 3.2x: asserted > 1.5x).  A demo config whose
    federation stopped paying fails the first: on seed 2026, `ldp` in place of `distributed-dp` gives
    2.1x, uncentred rewards (c = 0, B = 1) 1.03x; undoing the noise split alone does not (0.29x)."""
    big = second_half_regret(20, seed)
    assert big["fed"].mean() < 0.6 * big["alone"].mean(), big
    small = second_half_regret(3, seed)
    assert small["fed"].mean() > 1.5 * small["alone"].mean(), small


def test_an_estimate_is_the_mean_with_its_95_percent_normal_interval():
    e = Estimate.of(np.array([0.1, 0.3, 0.2, 0.4]))
    # sd (ddof 1) of the four values is 0.1291; 1.96 x 0.1291 / 2 = 0.1265
    assert e.mean == pytest.approx(0.25) and e.half == pytest.approx(0.12652, abs=1e-5) and e.n == 4
    assert str(e) == "0.250 [0.123, 0.377]" and e.signed() == "+0.250 [+0.123, +0.377]"
    assert Estimate.of(np.array([])).n == 0 and str(Estimate.of(np.array([]))) == "-"
    assert math.isinf(Estimate.of(np.array([0.2])).half)  # one user: no interval


def served(fed_regret, alone_regret, steps=60, silos=10, seed=0, noise=0.05):
    """Choices of both lines for ``steps`` x ``silos`` users whose pseudo-regret at step s is
    ``fed_regret(s)`` / ``alone_regret(s)`` plus the same user's noise (paired: same arms)."""
    rng = np.random.default_rng(seed)
    chosen = {"federated": [], "alone": []}
    for step in range(steps):
        for silo in range(silos):
            shared = noise * rng.random()
            chosen["federated"].append((step, silo, 0.0, fed_regret(step) + shared))
            chosen["alone"].append((step, silo, 0.0, alone_regret(step) + shared))
    return chosen


def test_the_learning_curve_windows_partition_the_users_and_pair_them():
    chosen = served(lambda s: 0.5 / (1 + s), lambda s: 0.2)
    del chosen["alone"][:5]  # five users the lone line never served (a failed request): unpaired
    curve, half = learning_curve(chosen, windows=6)
    assert [(w.first, w.last) for w in curve] == [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, 60)]
    assert sum(w.federated.n for w in curve) == 600 and sum(w.alone.n for w in curve) == 595
    assert curve[0].difference.n == 95 and (half.first, half.last, half.difference.n) == (30, 60, 300)
    # the shared per-user noise cancels in the paired difference: its interval is far narrower (per-user sd
    # about 0.0146 for the federated line -- U(0, 0.05) noise and the curve -- against 0.0024 for the curve
    # alone in the difference: 0.16x; asserted < 0.25x)
    assert half.difference.half < 0.25 * half.federated.half


def test_the_verdict_says_which_line_wins_and_why():
    """Each case constructed so that its 95% interval is far from 0 (differences of 0.1 or 0.15 against
    intervals of about +-0.004 over 300 users) or exactly 0 (identical lines)."""
    wins = served(lambda s: 0.5 if s < 20 else 0.05, lambda s: 0.2)  # behind at first, then ahead for good
    curve, half = learning_curve(wins)
    text = verdict(curve, half, 10)
    assert text.startswith("verdict: federation pays off") and "from about 20 users per silo on" in text
    assert f"{half.federated.mean / half.alone.mean:.2f}x the lone silos'" in text  # about 0.075 / 0.225
    loses = served(lambda s: 0.3, lambda s: 0.2 if s < 10 else 0.15)
    text = verdict(*learning_curve(loses), 10)
    assert text.startswith("verdict: the silos alone win at this traffic") and "has not yet outweighed" in text
    assert "after 60 users per silo" in text
    late = served(lambda s: 0.5 if s < 50 else 0.05, lambda s: 0.2)  # ahead only in the last window
    text = verdict(*learning_curve(late), 10)
    assert text.startswith("verdict: the silos alone win") and "ahead since about 50 users per silo" in text
    tie = served(lambda s: 0.2, lambda s: 0.2)
    assert verdict(*learning_curve(tie), 10).startswith("verdict: no difference resolved")
    assert verdict(*learning_curve({}), 10) == "verdict: too few users served to compare the two lines"
    # no round closed (a short --flower run): whatever the numbers, federation was never tried
    assert verdict(*learning_curve(wins), 10, synced=False).startswith("verdict: no sync round closed in this run")
    table = regret_table(wins, 10)
    assert table[-2].strip().startswith("second half") and table[-1] == verdict(*learning_curve(wins), 10)


@pytest.mark.slow
def test_a_short_demo_runs_and_stops_every_process(tmp_path):
    """`fedbandits serve demo --silos 3 --seconds 8`: it exits 0, prints the table and a verdict, and
    leaves no process marked with its work folder."""
    work = tmp_path / "demo"
    cmd = [sys.executable, "-m", "fedbandits.cli", "serve", "demo", "--silos", "3", "--seconds", "8"]
    out = subprocess.run([*cmd, "--workdir", str(work)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("demo: 3 federated silos (distributed-dp, sync every 5 s")
    assert any(line.strip().startswith("second half") for line in lines)
    assert any(line.startswith("verdict: ") for line in lines), out.stdout
    assert lines[-1].startswith("sync: ") and "epsilon 1.000 for every release ever made" in lines[-1]
    assert "refused or failed: none" in out.stdout, out.stdout
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert not left, left


@pytest.mark.slow
def test_a_short_demo_with_replicas_kills_one_and_stops_every_process_and_its_database(tmp_path, postgres):
    """`fedbandits serve demo --replicas 2 --silos 3 --seconds 12` (docs/serving.md's block, shorter):
    each federated silo served by 2 replicas on a throwaway PostgreSQL server, replica 0 of silo 0
    killed half-way and restarted; it exits 0, says so, and leaves no process of its own and no
    PostgreSQL server behind (``postgres``: the session's server, so that the machine has one)."""
    work = tmp_path / "demo"
    servers = set(subprocess.run(["pgrep", "-f", "fedbandits-pg-"], capture_output=True, text=True).stdout.split())
    cmd = [sys.executable, "-m", "fedbandits.cli", "serve", "demo", "--replicas", "2", "--silos", "3"]
    cmd += ["--seconds", "12"]
    out = subprocess.run([*cmd, "--workdir", str(work)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("demo: 3 federated silos (2 replicas each) (distributed-dp"), lines[0]
    assert any(line.startswith("verdict: ") for line in lines), out.stdout
    assert lines[-3].startswith("replicas: 2 per federated silo on one PostgreSQL database each"), out.stdout
    assert "SIGKILL after 6 s of traffic, restarted on the log" in lines[-1], out.stdout
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert not left, left
    now = set(subprocess.run(["pgrep", "-f", "fedbandits-pg-"], capture_output=True, text=True).stdout.split())
    assert now <= servers, now - servers  # the demo's own server is gone


def test_a_silos_replicas_take_its_requests_in_turn_and_a_refused_connection_goes_to_the_next():
    """``--replicas``: the traffic's client sends each request to the silo's next replica, and one whose
    connection is refused (a killed replica) is skipped, so only requests in flight to it fail."""
    import asyncio

    from fedbandits.serve.demo_traffic import SiloClient

    async def run() -> tuple[list[bytes], list[bytes]]:
        async def answer(name: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                length = int(
                    next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
                )
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(name), name))
                await writer.drain()
            writer.close()

        servers = [await asyncio.start_server(lambda r, w, n=n: answer(n, r, w), "127.0.0.1", 0) for n in (b"a", b"b")]
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        client = SiloClient(",".join(f"http://127.0.0.1:{p}" for p in ports), "token")
        first = [(await client.post("/v1/decisions", b"{}"))[1] for _ in range(4)]
        servers[0].close()  # replica "a" is gone: its port refuses connections
        await servers[0].wait_closed()
        for conn in client.idle[0]:  # and its connections with it, as a killed process's are
            conn.writer.close()
        client.idle[0].clear()
        then = [(await client.post("/v1/decisions", b"{}"))[1] for _ in range(4)]
        client.close()
        servers[1].close()
        return first, then

    first, then = asyncio.run(run())
    assert first == [b"a", b"b", b"a", b"b"] and then == [b"b"] * 4
