"""Our svmlight/LETOR reader against scikit-learn's: wall time, peak memory, malformed lines.

Compares ``fedbandits.envs.svmlight.read_svmlight`` with
``sklearn.datasets.load_svmlight_file(..., query_id=True)`` (issue #19, item 4), on

(a) a synthetic file of MSLR-WEB's shape, generated under a temporary folder (deleted afterwards;
    nothing is downloaded): ``label qid:Q 1:v ... 136:v`` dense lines in MSLR's number formats
    (integer counts, 6-decimal values, negative LMIR scores), queries of geometric size (mean
    about 120, at most 908 documents).  Every parser runs in a fresh Python process; the times are
    the parse call alone (imports excluded), wall and CPU (``time.process_time``, the steadier one
    on a shared machine; speeds are file MB per CPU second); the memory is that process's peak
    resident set (``ru_maxrss``), also shown net of the resident set after the imports.  Variants:

    * ``ours, 136 cols`` / ``ours, title 25``: ``read_svmlight`` with every column / the 25
      title-stream columns (what ``columns = "auto"`` picks for MSLR), dense float32, given the
      line count as ``capacity`` as ``build_instance`` does;
    * ``sklearn f64 CSR`` / ``sklearn f32 CSR``: ``load_svmlight_file`` with the default dtype /
      ``dtype=np.float32``, a scipy CSR matrix (explicit zeros of a dense file are stored);
    * ``sklearn f32 dense 136`` / ``... title 25``: the float32 CSR matrix made dense (all columns /
      the title columns), the form the instance builder needs.

    "same" says whether a variant read the same numbers as ours (features as float32, labels, the
    qid of every row, compared by SHA-256 of the arrays).
(b) small files with one malformed line each (a non-numeric value, a missing qid, a duplicate
    feature index, NaN, ...): what each parser does with it, its error message or what it returned.

Usage::

    python benchmarks/svmlight_parser.py --quick          # 50,000 lines (61 MB), about a minute
    python benchmarks/svmlight_parser.py                  # 200,000 lines (245 MB), 4-10 minutes
    python benchmarks/svmlight_parser.py --lines 1200000  # MSLR-WEB10K Fold1 size (~1.3 GB)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file

from fedbandits.envs.svmlight import read_svmlight

N_FEATURES = 136
TITLE = list(range(3, 124, 5))
VARIANTS = (
    "ours, 136 cols",
    "ours, title 25",
    "sklearn f64 CSR",
    "sklearn f32 CSR",
    "sklearn f32 dense 136",
    "sklearn f32 dense title 25",
)


def generate(path: Path, n_lines: int, seed: int = 0) -> int:
    """Write ``n_lines`` MSLR-shaped lines to ``path``; returns the number of queries."""
    rng = np.random.default_rng(seed)
    n_rows = 5_000  # distinct feature rows, reused
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
    labels = rng.integers(0, 5, size=n_rows)
    qid = written = 0
    with open(path, "w", newline="") as fh:
        while written < n_lines:
            qid += 1
            n = int(min(rng.geometric(1 / 120), 908, n_lines - written))
            rows = rng.integers(0, n_rows, size=n)
            fh.write("".join(f"{labels[r]} qid:{qid} {bodies[r]} \n" for r in rows))
            written += n
    return qid


MEASURE = """
import hashlib, json, resource, sys, time
import numpy as np
variant, path, n_lines = sys.argv[1], sys.argv[2], int(sys.argv[3])
title = np.arange(3, 124, 5)
if variant.startswith("ours"):
    from fedbandits.envs.svmlight import read_svmlight
else:
    from sklearn.datasets import load_svmlight_file
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = peak()
start, cpu = time.perf_counter(), time.process_time()
if variant.startswith("ours"):
    cols = None if "136" in variant else title
    data = read_svmlight([path], columns=cols, truncated_last_query="keep", capacity=n_lines)
    out = data.features, data.labels, np.repeat(data.qids, np.diff(data.query_ptr))
else:
    x, y, qid = load_svmlight_file(path, dtype=np.float64 if "f64" in variant else np.float32, query_id=True)
    if "dense 136" in variant:
        x = x.toarray()
    elif "dense title" in variant:
        x = x[:, title - 1].toarray()
    out = x, y, qid
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
top = peak()
x, y, qid = out
if not isinstance(x, np.ndarray):
    x = (x if "title" not in variant else x[:, title - 1]).astype(np.float32).toarray()
digest = hashlib.sha256()
for a in (x.astype(np.float32), y.astype(np.float64), qid.astype(np.int64)):
    digest.update(np.ascontiguousarray(a).tobytes())
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mib": top, "base_mib": base, "rows": int(y.size),
                  "sha": digest.hexdigest()}))
"""


def measure(variant: str, path: Path, n_lines: int) -> dict[str, float | int | str]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, variant, str(path), str(n_lines)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_speed(path: Path, n_lines: int, repeat: int) -> None:
    """Every variant ``repeat`` times, interleaved (a slow phase of a shared machine hits all alike)."""
    runs: dict[str, list[dict[str, float | int | str]]] = {v: [] for v in VARIANTS}
    for _ in range(repeat):
        for variant in VARIANTS:
            runs[variant].append(measure(variant, path, n_lines))
    size = path.stat().st_size
    print(
        f"\n{'parser':28s} {'parse s':>8s} {'cpu s':>6s} {'MB/cpu s':>8s} {'peak MiB':>9s} {'above imports':>14s}  same"
    )
    ours: dict[str, str] = {}
    for variant in VARIANTS:
        best = min(runs[variant], key=lambda r: float(r["seconds"]))
        sha = str(best["sha"])
        key = "136" if "136" in variant or "CSR" in variant else "title"
        if variant.startswith("ours"):
            ours[key] = sha
            same = "-"
        else:
            same = "yes" if ours.get(key) == sha else "NO"
        seconds, cpu = float(best["seconds"]), float(best["cpu"])
        peak, base = float(best["peak_mib"]), float(best["base_mib"])
        print(
            f"{variant:28s} {seconds:8.2f} {cpu:6.2f} {size / 1e6 / cpu:8.1f} {peak:9.0f} {peak - base:14.0f}  {same}"
        )
    print("load average (1, 5, 15 min) at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


GOOD = "1 qid:1 1:0.5 2:0.5 3:1\n"
MALFORMED = {
    "non-numeric value": GOOD + "0 qid:1 1:abc 2:0.5 3:1\n",
    "missing qid": GOOD + "0 1:0.5 2:0.5 3:1\n",
    "duplicate index": GOOD + "0 qid:1 1:0.5 1:0.7 3:1\n",
    "decreasing indices": GOOD + "0 qid:1 2:0.5 1:0.7 3:1\n",
    "value nan": GOOD + "0 qid:1 1:nan 2:0.5 3:1\n",
    "value inf": GOOD + "0 qid:1 1:inf 2:0.5 3:1\n",
    "label nan": GOOD + "nan qid:1 1:0.5 2:0.5 3:1\n",
    "negative label": GOOD + "-1 qid:1 1:0.5 2:0.5 3:1\n",
    "index 0": GOOD + "0 qid:1 0:0.5 2:0.5 3:1\n",
    "digit separator 1_0": GOOD + "0 qid:1 1:1_0 2:0.5 3:1\n",
    "query not contiguous": GOOD + "0 qid:2 1:0.5 2:0.5 3:1\n0 qid:1 1:0.5 2:0.5 3:1\n",
    "cut mid-line '3:'": GOOD + "0 qid:1 1:0.5 2:0.5 3:",
    "cut mid-line '3:0.'": GOOD + "0 qid:1 1:0.5 2:0.5 3:0.",
}


def _ours(path: Path) -> str:
    try:
        data = read_svmlight([path], truncated_last_query="keep")
    except ValueError as exc:
        return "error: " + str(exc).removeprefix(f"{path}, ")
    rows = np.repeat(data.qids, np.diff(data.query_ptr))
    return f"accepted: X={data.features.tolist()} y={data.labels.tolist()} qid={rows.tolist()}"


def _sklearn(path: Path) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x, y, qid = load_svmlight_file(str(path), query_id=True)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"
    return f"accepted: X={x.toarray().tolist()} y={y.tolist()} qid={qid.tolist()}"


def compare_errors(folder: Path) -> None:
    print(f"\nmalformed input (a good line {GOOD.strip()!r} first):")
    for name, text in MALFORMED.items():
        path = folder / "bad.txt"
        path.write_text(text)
        print(f"* {name}\n    ours:    {_ours(path)}\n    sklearn: {_sklearn(path)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 lines")
    parser.add_argument("--lines", type=int, default=200_000, help="lines of the synthetic file (default 200,000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per parser, best time kept (default 1)")
    args = parser.parse_args()
    n_lines = 50_000 if args.quick else args.lines
    if n_lines < 1 or args.repeat < 1:
        parser.error("--lines and --repeat must be >= 1")
    with tempfile.TemporaryDirectory(prefix="fedbandits-svmlight-") as tmp:
        path = Path(tmp) / "mslr-like.txt"
        start = time.perf_counter()
        queries = generate(path, n_lines)
        print(
            f"generated {n_lines:,} lines, {queries:,} queries, {N_FEATURES} features, "
            f"{path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - start:.0f} s"
        )
        compare_speed(path, n_lines, args.repeat)
        compare_errors(Path(tmp))


if __name__ == "__main__":
    main()
