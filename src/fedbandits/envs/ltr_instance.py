"""A prepared learning-to-rank bandit instance: feature columns, preprocessing, the Lasso theta*, disk cache.

Flow: ``svmlight.read_svmlight`` -> :func:`build_instance` (here) -> :class:`LtrInstance` -> ``ltr.LearningToRank``.

Feature columns (option ``columns``; indices are the files' 1-based feature indices)
-----------------------------------------------------------------------------------
MSLR-WEB10K/30K has 136 features (Microsoft's feature list): 1-125 are 25 feature groups, each
over the 5 streams in the order body, anchor, title, url, whole document (covered query term
number, ratio, stream length, IDF, sum/min/max/mean/variance of term frequency, the same five
of stream-length-normalised tf and of tf*idf, boolean model, vector space model, BM25,
LMIR.ABS, LMIR.DIR, LMIR.JM), and 126-136 are 11 document-level features (URL slashes, URL
length, inlinks, outlinks, PageRank, SiteRank, QualityScore, QualityScore2, query-url clicks,
url clicks, url dwell time).  So the title stream is columns 3, 8, ..., 123 and the body
stream 1, 6, ..., 121, 25 each.  The paper's d = 57 (title) and 78 (body) add up to 135 and
match no union of streams plus document features that the feature list would single out
(57 = 2 x 25 + 7, 78 = 3 x 25 + 3, with an unexplained split of the 11 document features
and one feature left out), so they cannot be reproduced.  The presets are therefore:

* ``"title"``: the 25 title-stream features (3, 8, ..., 123) -- d = 25;
* ``"body"``: the 25 body-stream features (1, 6, ..., 121) -- d = 25;
* ``"all"``: every feature index present in the files (136 for MSLR, 46 for LETOR 4.0);
* ``"auto"`` (default): ``"title"`` for a 136-feature MSLR file, ``"all"`` for anything else.

LETOR 4.0 (MQ2007/MQ2008, 46 features) has the same stream order in its features 1-40 (8
groups of 5: TF, IDF, TF*IDF, DL, BM25, LMIR.ABS/DIR/JM), so ``"title"`` = 3, 8, ..., 38 and
``"body"`` = 1, 6, ..., 36 (d = 8) there; other layouts need ``"all"`` or explicit columns.  The
layout is read from the largest feature index of the first data line.  Explicit columns are a
comma-separated list of indices and ranges, e.g. ``"3,8,13-15,126-136"`` (or a list of ints).

Instance construction (defaults in :class:`fedbandits.envs.ltr.LearningToRankParams`)
-------------------------------------------------------------------------------------
1. Parse the chosen columns of every file (float32), dropping truncated queries (see
   :mod:`fedbandits.envs.svmlight`).
2. Per column: signed log, ``sign(v) log(1 + |v|)`` (MSLR counts, lengths and PageRank span up
   to 2e8; LMIR scores are negative), then min-max scaling to [0, 1] over all documents (a
   constant column becomes 0).  Then every vector is divided by the largest row norm (times
   1 + 2^-20, so float32 rounding cannot exceed 1): ``||x|| <= 1`` exactly, and the largest
   document norm is 1.  One global scale keeps the relative sizes of documents (a per-row
   normalisation would not).
3. Labels are rescaled to [0, 1] by dividing by the largest label (MSLR 0-4, LETOR 0-2).
4. ``sklearn.linear_model.Lasso(alpha=lasso_alpha, fit_intercept=False)`` is fitted on all
   documents (float64, Gram matrix precomputed); theta* = its coefficients (float32).  No
   intercept: LinUCB's model ``E[r] = <x, theta*>`` has none.  The in-sample R^2 is reported.
5. Expected reward of a document: ``clip(<x, theta*>, 0, 1)`` computed in float64 from the
   float32 numbers, stored as float32.  The clip keeps expected rewards in the reward bound;
   where it acts the instance is not exactly linear, so the report gives the fraction of
   documents it changes, the largest change and the number of queries whose best document it
   changes (the data sets of docs/data.md: MSLR title 0%; MSLR body 0.8%, at most 0.05; LETOR MQ2008 all
   columns 7.8%, at most 0.09; never a query's best document -- only the worst ones, whose
   predicted relevance is slightly negative).

The split of the queries over agents and the rounds are the environment's
(:mod:`fedbandits.envs.ltr`).

Disk cache
----------
The prepared instance (features, expected rewards, labels, theta*, query index, report) is
cached as a compressed ``.npz`` in ``cache_dir`` (default ``~/.cache/fedbandits``; ``""``
disables it) keyed by the SHA-256 of each input file's content (with its name and size) plus
columns, lasso_alpha, the truncation rule and a format version.  Hashing is a separate streaming
pass (SHA-256 runs at ~1.7 GB/s; 1.5-1.9 s including the read for a 1.47 GB MSLR-sized folder)
that also counts lines, so the row buffer is allocated once; it is cheap next to parsing (~30 s)
and exact where size + mtime + a sampled hash would not be.  No file is ever held in memory.
Cache files are written atomically (temporary file + rename); an unreadable one is rebuilt with
a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.datahome import require_dataset
from fedbandits.envs.svmlight import (
    MAX_FEATURE_INDEX,
    TRUNCATION_RULES,
    SvmlightData,
    _summary_dict,
    first_data_width,
    read_svmlight,
)

#: the data set an empty ``path`` reads, an MSLR-WEB10K Fold 1 sample (:mod:`fedbandits.envs.datahome`)
DEFAULT_DATASET = "mslr-web-fold1-5k"
DEFAULT_CACHE_DIR = "~/.cache/fedbandits"
COLUMN_PRESETS = ("auto", "title", "body", "all")
STREAMS = ("body", "anchor", "title", "url", "whole document")
#: number of features -> (name, number of stream features: groups of 5 in STREAMS order)
LAYOUTS = {136: ("MSLR-WEB", 125), 46: ("LETOR 4.0", 40)}
CACHE_FORMAT = 1
_COLUMN_INDEX = re.compile(r"[0-9]+\Z")


# -- columns -----------------------------------------------------------------------------------


def parse_columns(spec: object) -> str:
    """Canonical form of a ``columns`` value: a preset name or sorted ``"i,j,k"`` (1-based).

    Accepts a preset, a string of comma-separated indices and ``a-b`` ranges, or a sequence of
    ints; raises ``ValueError`` otherwise.
    """
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text in COLUMN_PRESETS:
            return text
        items: list[int] = []
        for part in text.split(","):
            part = part.strip()
            lo, dash, hi = part.partition("-")
            if not _COLUMN_INDEX.match(lo) or (dash and not _COLUMN_INDEX.match(hi)):
                raise ValueError(
                    f"columns must be one of {', '.join(map(repr, COLUMN_PRESETS))} or 1-based feature indices "
                    f"and ranges like '3,8,13-15', got {spec!r}"
                )
            a, b = int(lo), int(hi) if dash else int(lo)
            if b < a:
                raise ValueError(f"columns: empty range {part!r} in {spec!r}")
            items.extend(range(a, b + 1))
        values = items
    elif isinstance(spec, Sequence) and not isinstance(spec, bytes):
        values = [check_int("columns entry", v) for v in spec]
    else:
        raise ValueError(f"columns must be a preset name, an index list string or a list of ints, got {spec!r}")
    if not values:
        raise ValueError("columns must name at least one feature")
    if min(values) < 1 or max(values) > MAX_FEATURE_INDEX:
        raise ValueError(f"columns are 1-based feature indices in [1, {MAX_FEATURE_INDEX}], got {spec!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"columns must not repeat an index, got {spec!r}")
    return ",".join(str(v) for v in sorted(values))


def stream_columns(stream: str, n_features: int) -> np.ndarray:
    """1-based indices of one stream's features in the MSLR-WEB (136) or LETOR 4.0 (46) layout."""
    if n_features not in LAYOUTS:
        raise ValueError(
            f"the {stream!r} preset needs the MSLR-WEB (136 features) or LETOR 4.0 (46) layout, but the first data "
            f"line's largest feature index is {n_features}; use columns = 'all' or explicit indices"
        )
    block = LAYOUTS[n_features][1]
    return np.arange(STREAMS.index(stream) + 1, block + 1, len(STREAMS), dtype=np.int64)


def resolve_columns(spec: str, n_features: int) -> tuple[np.ndarray | None, str]:
    """(1-based columns or None for every feature, preset actually used) for a canonical spec."""
    if spec == "auto":
        spec = "title" if n_features == 136 else "all"
    if spec == "all":
        return None, spec
    if spec in ("title", "body"):
        return stream_columns(spec, n_features), spec
    return np.array([int(v) for v in spec.split(",")], dtype=np.int64), "explicit"


# -- instance ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LtrInstance:
    """A prepared learning-to-rank bandit instance (arrays read-only; see the module docstring).

    features (n_docs, d) float32, ||row|| <= 1; means (n_docs,) float32 expected rewards in
    [0, 1]; labels (n_docs,) float32 rescaled to [0, 1]; theta (d,) float32; query q's
    documents are rows ``query_ptr[q]:query_ptr[q+1]``; columns: the 1-based file columns.
    """

    features: np.ndarray
    means: np.ndarray
    labels: np.ndarray
    theta: np.ndarray
    query_ptr: np.ndarray
    qids: np.ndarray
    query_file: np.ndarray
    columns: np.ndarray
    report: dict[str, Any] = field(compare=False)

    @property
    def dim(self) -> int:
        return int(self.theta.size)

    @property
    def n_queries(self) -> int:
        return int(self.qids.size)

    @property
    def n_docs(self) -> int:
        return int(self.means.size)

    def query_sizes(self) -> np.ndarray:
        return np.diff(self.query_ptr)


_ARRAYS = ("features", "means", "labels", "theta", "query_ptr", "qids", "query_file", "columns")


def resolve_files(path: str, files: str = "") -> list[Path]:
    """Input files: ``path`` itself, or ``files`` (a glob) inside the folder ``path``.

    Empty ``path``: the MSLR sample in the data home (:func:`fedbandits.envs.datahome.require_dataset`).
    Empty ``files``: every ``*.txt`` in the folder, or ``Fold1/*.txt`` when the folder holds none
    but has a ``Fold1`` subfolder (an MSLR-WEB10K/30K root: each fold holds every query once).
    Sorted by path.
    """
    root = (require_dataset(DEFAULT_DATASET) if path == "" else Path(path).expanduser()).resolve()
    if root.is_file():
        if files:
            raise ValueError(f"files ({files!r}) is a glob inside a folder, but path {root} is a file")
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such file or folder")
    if files:
        found = sorted(p for p in root.glob(files) if p.is_file())
        if not found:
            raise FileNotFoundError(f"{root}: no file matches {files!r}")
        return found
    found = sorted(p for p in root.glob("*.txt") if p.is_file())
    if not found and (root / "Fold1").is_dir():
        found = sorted(p for p in (root / "Fold1").glob("*.txt") if p.is_file())
    if not found:
        raise FileNotFoundError(f"{root}: no *.txt files (nor Fold1/*.txt); pass files = a glob")
    return found


def file_digest(path: Path, block: int = 1 << 22) -> tuple[str, int]:
    """(SHA-256 of the content, number of lines) of ``path``, in one streaming pass."""
    digest = hashlib.sha256()
    lines = 0
    last = b"\n"
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return digest.hexdigest(), lines + (last != b"\n")


def build_instance(
    files: Sequence[str | Path],
    *,
    columns: str = "auto",
    lasso_alpha: float = 1e-4,
    truncated_last_query: str = "auto",
    cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
    chunk_bytes: int = 1 << 22,
) -> LtrInstance:
    """Prepare (or load from the disk cache) the instance of ``files``; see the module docstring."""
    t0 = time.perf_counter()
    paths = [Path(f).expanduser().resolve() for f in files]
    if not paths:
        raise ValueError("no input files")
    spec = parse_columns(columns)
    alpha = check_float("lasso_alpha", lasso_alpha, low=0.0, low_open=True)
    check_choice("truncated_last_query", truncated_last_query, TRUNCATION_RULES)
    width = 0
    for p in paths:
        width = first_data_width(p)
        if width:
            break
    cols, preset = resolve_columns(spec, width)
    digests = [file_digest(p) for p in paths]
    shas = [d[0] for d in digests]
    key_data = {
        "format": CACHE_FORMAT,
        "files": [[p.name, p.stat().st_size, s] for p, s in zip(paths, shas, strict=True)],
        "columns": "all" if cols is None else cols.tolist(),
        "lasso_alpha": repr(alpha),
        "truncated_last_query": truncated_last_query,
    }
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()
    cache_file = None
    if cache_dir not in (None, ""):
        cache_file = Path(str(cache_dir)).expanduser() / f"ltr-{key[:40]}.npz"
        inst = _load_cached(cache_file, key)
        if inst is not None:
            inst.report["files"] = [{**f, "file": str(p)} for f, p in zip(inst.report["files"], paths, strict=True)]
            inst.report["cache"] = {"file": str(cache_file), "hit": True}
            inst.report["prepare_seconds"] = time.perf_counter() - t0
            return inst
    data = read_svmlight(
        paths,
        columns=cols,
        truncated_last_query=truncated_last_query,
        chunk_bytes=chunk_bytes,
        capacity=sum(d[1] for d in digests),
    )
    layout = LAYOUTS.get(width, ("other", 0))[0]
    if preset in ("title", "body") and data.max_feature_index > width:
        raise ValueError(
            f"the {preset!r} preset assumes the {layout} layout ({width} features, from the first data line), "
            f"but the files have feature index {data.max_feature_index}; use columns = 'all' or explicit indices"
        )
    if preset == "explicit" and int(data.columns.max()) > data.max_feature_index:
        raise ValueError(
            f"column {int(data.columns.max())} requested but no line has a feature index above {data.max_feature_index}"
        )
    inst = _prepare(data, alpha, truncated_last_query)
    inst.report.update(
        {
            "column_preset": preset,
            "layout": layout,
            "files": [
                {**_summary_dict(f), "sha256": s, "bytes": p.stat().st_size}
                for f, s, p in zip(data.files, shas, paths, strict=True)
            ],
            "cache": {"file": None if cache_file is None else str(cache_file), "hit": False},
        }
    )
    if cache_file is not None:
        _save_cached(cache_file, key, inst)
    inst.report["prepare_seconds"] = time.perf_counter() - t0
    return inst


def _prepare(data: SvmlightData, alpha: float, truncation: str) -> LtrInstance:
    if data.n_queries == 0:
        raise ValueError("the files hold no (complete) query")
    if data.features.shape[1] == 0:
        raise ValueError("the files hold no feature values")
    label_max = float(data.labels.max())
    if not label_max > 0:
        raise ValueError("every relevance label is 0: nothing to learn")
    x = data.features  # float32, transformed in place column by column
    for j in range(x.shape[1]):
        col = x[:, j].astype(np.float64)
        col = np.sign(col) * np.log1p(np.abs(col))
        lo, hi = float(col.min()), float(col.max())
        x[:, j] = (col - lo) / (hi - lo) if hi > lo else 0.0
    max_norm = float(np.sqrt(_rows(x, lambda b: np.einsum("ij,ij->i", b, b)).max()))
    if max_norm > 0:
        x *= np.float32(1.0 / (max_norm * (1.0 + 2.0**-20)))
    norms = np.sqrt(_rows(x, lambda b: np.einsum("ij,ij->i", b, b)))
    if norms.max() > 1.0:  # cannot happen with the 2^-20 margin; kept as a hard guarantee
        x /= np.float32(norms.max() * (1.0 + 2.0**-20))
        norms = np.sqrt(_rows(x, lambda b: np.einsum("ij,ij->i", b, b)))
    y = data.labels / label_max
    coef, lasso = _fit_lasso(x, y, alpha)
    theta = coef.astype(np.float32)
    theta_64 = theta.astype(np.float64)
    raw = _rows(x, lambda b: b @ theta_64)
    means = np.clip(raw, 0.0, 1.0).astype(np.float32)
    sizes = np.diff(data.query_ptr)
    best_raw = np.maximum.reduceat(raw, data.query_ptr[:-1])
    n = y.size
    values, counts = np.unique(data.labels, return_counts=True)
    report: dict[str, Any] = {
        "dim": int(theta.size),
        "columns": data.columns.tolist(),
        "queries": int(data.n_queries),
        "docs": int(n),
        "docs_per_query": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
        "label_max": label_max,
        "label_counts": {f"{v:g}": int(c) for v, c in zip(values, counts, strict=True)},
        "truncated_last_query": truncation,
        "dropped_queries": [d.__dict__ for d in data.dropped],
        "lasso": lasso,
        "theta_norm": float(np.linalg.norm(theta.astype(np.float64))),
        "expected_reward": {
            "mean": float(means.mean()),
            "max": float(means.max()),
            "clipped_below_0": float(np.mean(raw < 0.0)),
            "clipped_above_1": float(np.mean(raw > 1.0)),
            "clip_largest_change": float(np.max(np.abs(raw - np.clip(raw, 0.0, 1.0)))),
            "queries_whose_best_is_clipped": int(np.count_nonzero((best_raw < 0.0) | (best_raw > 1.0))),
            "r2_vs_labels": _r2(y, means.astype(np.float64)),
            "best_minus_mean_per_query": float(
                np.mean(
                    np.maximum.reduceat(means, data.query_ptr[:-1])
                    - np.add.reduceat(means, data.query_ptr[:-1]) / sizes
                )
            ),
        },
        "feature_norm": {"max": float(norms.max()), "median": float(np.median(norms))},
        "preprocessing": "sign(v)*log1p(|v|), min-max to [0,1] per column, / (max row norm * (1 + 2^-20))",
    }
    arrays = {
        "features": x,
        "means": means,
        "labels": y.astype(np.float32),
        "theta": theta,
        "query_ptr": data.query_ptr,
        "qids": data.qids,
        "query_file": data.query_file,
        "columns": data.columns,
    }
    return _freeze(arrays, report)


def _rows(x: np.ndarray, fn: Any, block: int = 1 << 16) -> np.ndarray:
    """``fn`` of float64 copies of blocks of rows of ``x``, concatenated (bounded extra memory)."""
    parts = [fn(x[i : i + block].astype(np.float64)) for i in range(0, x.shape[0], block)]
    return np.concatenate(parts) if parts else np.zeros(0)


def _freeze(arrays: dict[str, np.ndarray], report: dict[str, Any]) -> LtrInstance:
    for a in arrays.values():
        a.flags.writeable = False
    return LtrInstance(**arrays, report=report)


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else float("nan")


def _fit_lasso(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, dict[str, Any]]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import Lasso

    x64 = np.asfortranarray(x, dtype=np.float64)  # the one full float64 copy (sklearn fits in float64)
    model = Lasso(alpha=alpha, fit_intercept=False, precompute=True, copy_X=False, max_iter=100_000, tol=1e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x64, y)
    coef = np.asarray(model.coef_, dtype=np.float64)
    resid = y - x64 @ coef
    del x64
    info = {
        "alpha": alpha,
        "r2": _r2(y, y - resid),
        "nonzero": int(np.count_nonzero(coef)),
        "residual_sd": float(resid.std()),
        "n_iter": int(model.n_iter_),
        "converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught),
    }
    return coef, info


def _load_cached(path: Path, key: str) -> LtrInstance | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("key") != key:
                return None
            arrays = {name: z[name] for name in _ARRAYS}
    except Exception as exc:  # a corrupt or foreign cache file: rebuild it
        warnings.warn(f"ignoring unreadable cache file {path}: {exc}", RuntimeWarning, stacklevel=3)
        return None
    return _freeze(arrays, meta["report"])


def _save_cached(path: Path, key: str, inst: LtrInstance) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        meta = json.dumps({"key": key, "report": inst.report})
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, meta=np.array(meta), **{name: getattr(inst, name) for name in _ARRAYS})
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache folder must not stop a run
        warnings.warn(f"could not write cache file {path}: {exc}", RuntimeWarning, stacklevel=3)
