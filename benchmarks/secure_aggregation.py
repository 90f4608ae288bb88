"""What secure aggregation against a cheating server costs (issue #32; docs/deployment.md).

``--micro`` (default): per silo and per round, at M = 3, 13 and 50 silos, P = 230 residues (d = 20),
the CPU seconds and the bytes of

* *pairwise*: pairwise masks alone (one X25519 agreement and one mask per other member; the
  server adds), the all-present masking the serving silos ran until issue #45 and the floor of any
  pairwise masking;
* *double masking*: :mod:`fedbandits.crypto.double_masking` (mask with a fresh self-mask and
  its encrypted Shamir shares; sign the survivor list; check t signatures, decrypt M - 1 shares and
  answer the unmask step), and the server's part (check M signatures, rebuild M self-masks, sum);

and the key set-up of an epoch (advertise, check every member's certificate and signature).  Bytes
are the protocol's own fields (keys, blobs, signatures, residues), before Flower's framing; the
request bytes a silo receives are counted separately from those it sends.

``--deployed``: a local Flower deployment of 3 silos (``deploy local``'s processes on this host),
``distributed-dp``, T = 240, B = 20 (12 rounds); prints the median and range of the seconds between
the server's "round k closed" log lines.  Run it with ``PYTHONPATH`` at an older checkout's ``src``
to time the previous protocol the same way (docs/deployment.md gives both).

Usage::

    python benchmarks/secure_aggregation.py              # micro, about 20 s
    python benchmarks/secure_aggregation.py --deployed   # about 3 minutes
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from fedbandits.config import loads_config
from fedbandits.federation.spec import make_spec

BITS, WIDTH, CONTEXT = 48, 230, b"benchmark"


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The smallest of ``repeat`` timings of ``fn()`` (seconds): the least disturbed run."""
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return min(out)


def micro(folder: Path, m: int, repeat: int) -> dict[str, float]:
    # imported here: --deployed also runs against checkouts older than these modules
    from fedbandits.crypto.double_masking import MaskingServer, MaskingSilo, secure_threshold
    from fedbandits.crypto.secure_aggregation import _agree, keypair, prg
    from fedbandits.federation.certs import trial_signing

    signing = trial_signing(folder, m)
    authority, ids = signing[0][1], [identity for identity, _ in signing]
    x = np.random.default_rng(0).integers(0, 1 << BITS, size=(m, WIDTH)).astype(np.uint64)
    out: dict[str, float] = {}

    # pairwise masks alone, all present: silo 0's agreement and mask with each other member
    own, others = keypair()[0], [keypair()[1] for _ in range(m - 1)]

    def pairwise() -> np.ndarray:
        y = x[0].copy()
        for j, public in enumerate(others, start=1):
            y = y + prg(_agree(own, public, b"mask|0|%d" % j), 1, WIDTH, BITS)
        return y & np.uint64((1 << BITS) - 1)

    out["pairwise_silo_s"] = _best(pairwise, repeat)
    out["pairwise_up_bytes"] = WIDTH * 8

    # double masking: epoch set-up
    server = MaskingServer(CONTEXT, BITS, WIDTH, authority)
    silos = [MaskingSilo(i, BITS, WIDTH, CONTEXT, ids[i], authority) for i in range(m)]
    adverts = {s.silo: s.advertise(1) for s in silos}
    roster2 = server.publish(adverts, secure_threshold(m, 0))
    t0 = time.process_time()
    silos[0].join(roster2)
    out["join_silo_s"] = time.process_time() - t0
    for s in silos[1:]:
        s.join(roster2)
    advert = adverts[0]
    out["advert_up_bytes"] = len(advert.c_public) + len(advert.s_public) + len(advert.cert) + len(advert.signature)
    out["roster_down_bytes"] = m * out["advert_up_bytes"]

    # one round, timed step by step for silo 0 (a fresh round number per repetition)
    times = {"mask": [], "sign": [], "unmask": [], "server": []}  # type: ignore[var-annotated]
    for r in range(1, repeat + 1):
        server.open_round(r)
        t0 = time.process_time()
        msg0 = silos[0].mask(r, x[0])
        times["mask"].append(time.process_time() - t0)
        server.accept(0, 1, r, msg0)
        for s in silos[1:]:
            server.accept(s.silo, 1, r, s.mask(r, x[s.silo]))
        survivors = server.close_messages()
        t0 = time.process_time()
        sig0 = silos[0].sign_survivors(r, survivors)
        times["sign"].append(time.process_time() - t0)
        t_server = time.process_time()
        server.accept_signature(0, sig0)
        for s in silos[1:]:
            server.accept_signature(s.silo, s.sign_survivors(r, survivors))
        t_server = time.process_time() - t_server
        sigs = dict(server.signatures)
        t0 = time.process_time()
        reveal0 = silos[0].unmask(r, survivors, [], sigs, server.shares_for(0))
        times["unmask"].append(time.process_time() - t0)
        reveals = {s.silo: s.unmask(r, survivors, [], sigs, server.shares_for(s.silo)) for s in silos[1:]}
        reveals[0] = reveal0
        t0 = time.process_time()
        total = server.total(reveals)
        times["server"].append(t_server + time.process_time() - t0)
        assert np.array_equal(total, x.sum(axis=0, dtype=np.uint64) & np.uint64((1 << BITS) - 1))
    for key, values in times.items():
        out[f"double_{key}_s"] = min(values)
    out["double_silo_s"] = out["double_mask_s"] + out["double_sign_s"] + out["double_unmask_s"]
    blob = len(next(iter(msg0.blobs.values())))
    # a round where nobody dropped: up, the message, its shares and commitment, then the reveal (m shares);
    # down, the unmask request's list and the shares addressed to the silo (a missing silo adds a
    # signature up, the survivor list down twice and the signatures down)
    out["double_up_bytes"] = WIDTH * 8 + (m - 1) * blob + 32 + m * 66
    out["double_down_bytes"] = 8 * m + (m - 1) * blob
    return out


def run_micro(repeat: int) -> None:
    print(f"per silo and round, P = {WIDTH} residues of {BITS} bits; CPU seconds (best of {repeat}) and bytes")
    print(
        "| M | pairwise: silo CPU | double masking: silo CPU (mask + sign if a silo is missing + unmask) | "
        "server CPU per round | bytes up, pairwise -> double | bytes down (extra) | "
        "epoch set-up: join CPU, roster bytes |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in (3, 13, 50):
        with tempfile.TemporaryDirectory() as tmp:
            r = micro(Path(tmp), m, repeat)
        print(
            f"| {m} | {r['pairwise_silo_s'] * 1e3:.2f} ms | {r['double_silo_s'] * 1e3:.2f} ms "
            f"({r['double_mask_s'] * 1e3:.2f} + {r['double_sign_s'] * 1e3:.2f} + {r['double_unmask_s'] * 1e3:.2f}) | "
            f"{r['double_server_s'] * 1e3:.1f} ms | {r['pairwise_up_bytes']:,.0f} -> {r['double_up_bytes']:,.0f} | "
            f"{r['double_down_bytes']:,.0f} | {r['join_silo_s'] * 1e3:.1f} ms, {r['roster_down_bytes']:,.0f} |"
        )


CONFIG = """
[experiment]
seed = 1
horizon = 240
[environment]
name = "gaussian-sphere"
agents = 3
arms = 20
dim = 5
[[algorithms]]
name = "fedlinucb"
batch = 20
protocol = "distributed-dp"
epsilon = 5.0
delta = 0.01
"""


def run_deployed() -> None:
    from fedbandits.federation.deployment import LocalDeployment

    spec = make_spec(loads_config(CONFIG))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        with LocalDeployment(Path(tmp), spec, round_timeout=60, join_timeout=120) as dep:
            dep.start()
            summary = dep.wait_done(1200)
        wall = time.time() - started
        log = (Path(tmp) / "state" / "server" / "server.log").read_text()
    stamps = [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(r"^(\S+ \S+) INFO .*round \d+ closed", log, re.MULTILINE)
    ]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    print(
        f"{summary['completed']} rounds; seconds between rounds: median {statistics.median(gaps):.1f} "
        f"(min {min(gaps):.1f}, max {max(gaps):.1f}); whole trial {wall:.0f} s"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployed", action="store_true", help="time a local 3-silo Flower deployment instead")
    p.add_argument("--repeat", type=int, default=7, help="repetitions per micro timing (best is kept)")
    args = p.parse_args()
    if args.deployed:
        run_deployed()
    else:
        run_micro(args.repeat)


if __name__ == "__main__":
    main()
