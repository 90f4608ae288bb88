"""Time and peak memory of preparing a learning-to-rank instance of the full MSLR-WEB10K shape.

Generates (under a temporary folder, deleted afterwards; nothing is committed or downloaded) a
synthetic svmlight folder shaped like MSLR-WEB10K Fold1: train/vali/test.txt with 1.2 M
documents in about 9,800 queries of up to 908 documents, 136 dense features in MSLR's number
formats (about 1.4 GB).  Then, in a fresh process each, prepares the instance cold (hash, stream
parse, Lasso, compressed cache write) and again from the disk cache, printing the wall time and
the peak resident memory (ru_maxrss) of each.

    python benchmarks/ltr_prepare.py                  # full size (about 2 minutes, 1.4 GB of disk)
    python benchmarks/ltr_prepare.py --scale 0.05     # a quick check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FULL_LINES = {"train.txt": 723_412, "vali.txt": 235_259, "test.txt": 241_521}  # MSLR-WEB10K Fold1
N_FEATURES = 136


def generate(folder: Path, scale: float, seed: int = 0) -> tuple[int, int]:
    """Write the synthetic Fold1 folder; returns (bytes, queries)."""
    rng = np.random.default_rng(seed)
    n_rows = 20_000  # distinct feature rows, reused: writing, not drawing, is the cost to mimic
    ints = rng.poisson(3, size=(n_rows, N_FEATURES))
    floats = rng.exponential(5.0, size=(n_rows, N_FEATURES))
    kind = np.zeros(N_FEATURES, dtype=int)  # 0 integer counts, 1 decimals, 2 negative LMIR scores
    for lo, hi in ((15, 20), (45, 70), (85, 95), (100, 110), (129, 130), (135, 136)):
        kind[lo:hi] = 1
    kind[110:125] = 2
    bodies = [
        " ".join(
            f"{j + 1}:{ints[i, j]}" if kind[j] == 0 else f"{j + 1}:{(1 if kind[j] == 1 else -10) * floats[i, j]:.6f}"
            for j in range(N_FEATURES)
        )
        for i in range(n_rows)
    ]
    signal = ints[:, 2] + ints[:, 7]  # relevance depends on two title features
    labels = np.clip((signal - signal.mean()) / signal.std() + rng.normal(0, 1, n_rows) + 0.5, 0, 4).astype(int)
    fold = folder / "Fold1"
    fold.mkdir(parents=True)
    qid = 0
    for name, full in FULL_LINES.items():
        n_lines = max(1, int(full * scale))
        with open(fold / name, "w", newline="") as fh:
            written = 0
            while written < n_lines:
                qid += 1
                n = int(min(rng.geometric(1 / 120), 908, n_lines - written))
                rows = rng.integers(0, n_rows, size=n)
                fh.write("".join(f"{labels[r]} qid:{qid} {bodies[r]} \n" for r in rows))
                written += n
    return sum(p.stat().st_size for p in fold.glob("*.txt")), qid


MEASURE = """
import json, resource, sys, time
from fedbandits.envs import ltr_instance
root, columns, cache = sys.argv[1:4]
start = time.perf_counter()
inst = ltr_instance.build_instance(ltr_instance.resolve_files(root), columns=columns, cache_dir=cache)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": round(seconds, 2),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "docs": inst.n_docs, "queries": inst.n_queries, "dim": inst.dim,
                  "cache_hit": inst.report["cache"]["hit"]}))
"""


def measure(root: Path, columns: str, cache: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(root), columns, str(cache)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full line count (default 1)")
    parser.add_argument("--columns", default="title", help="column preset (title, body, all)")
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    with tempfile.TemporaryDirectory(prefix="fedbandits-ltr-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        size, queries = generate(root / "data", args.scale)
        print(f"generated {size / 1e9:.2f} GB, {queries} queries in {time.perf_counter() - start:.0f} s")
        for label in ("cold", "from cache"):
            result = measure(root / "data", args.columns, root / "cache")
            print(f"prepare ({label}, columns={args.columns}): {json.dumps(result)}")


if __name__ == "__main__":
    main()
