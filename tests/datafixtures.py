"""Real data sets for tests: where they are, a skip when they are not, and small look-alikes.

The library finds a data set only in the data home (``$FEDBANDITS_DATA``, else the user data
folder: :mod:`fedbandits.envs.datahome`); ``tests/conftest.py`` points ``$FEDBANDITS_DATA`` at the
project's ``../shared/data`` when that folder is beside the checkout and the variable is unset.

A test of the real numbers (query counts, dropped queries, a Lasso fit's quality) carries
:func:`needs_dataset`: marked ``real_data`` and skipped, with a one-line reason, when the data set
is absent.  The code those tests reach -- the default path through the data home, the 136- and
46-column layouts, the truncated-last-query rule, the MovieLens factorisation and clustering, the
figures that read MSLR and MovieLens -- also runs on the generated look-alikes below, with known
answers taken from the generator, so it is tested on every clone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedbandits.envs.datahome import DATA_ENV, DATASETS, dataset_path


def needs_dataset(*names: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Mark a test ``real_data`` and skip it (one-line reason) when one of ``names`` is absent."""
    missing = [n for n in names if not dataset_path(n).is_dir()]
    reason = (
        f"real data set {missing[0]} absent ({dataset_path(missing[0])}; set {DATA_ENV}); tests never download data"
        if missing
        else ""
    )

    def mark(test: Callable[..., object]) -> Callable[..., object]:
        return pytest.mark.real_data(pytest.mark.skipif(bool(missing), reason=reason)(test))

    return mark


# -- MSLR-WEB look-alike ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LtrFixture:
    """Known answers of a generated learning-to-rank folder."""

    folder: Path
    n_queries: int  # kept (after the truncated last query is dropped)
    n_docs: int
    dropped: tuple[tuple[int, int, int], ...]  # (qid, docs kept in the file, first line)
    lines: tuple[int, ...]  # per file, sorted by name


def _ltr_queries(rng: np.random.Generator, n_features: int, signal: list[int], max_label: int, docs: int):  # type: ignore[no-untyped-def]
    """(features (docs, n_features), labels (docs,)): labels from a linear score of ``signal`` columns."""
    scale = rng.uniform(0.5, 50.0, size=n_features)
    x = rng.gamma(1.5, 1.0, size=(docs, n_features)) * scale
    x[rng.random(x.shape) < 0.3] = 0.0
    w = np.zeros(n_features)
    w[[c - 1 for c in signal]] = rng.uniform(0.5, 1.5, size=len(signal))
    score = np.log1p(x) @ w + rng.normal(0.0, 1.0, size=docs)
    # MSLR-like label frequencies: half the documents irrelevant, few perfect
    cuts = np.quantile(score, np.linspace(0.5, 0.97, max_label))
    return x, np.searchsorted(cuts, score)


def _svmlight_line(label: int, qid: int, row: np.ndarray, comment: str = "") -> str:
    pairs = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
    return f"{label} qid:{qid} {pairs}{comment}"


def write_mslr_like(folder: Path, seed: int = 0) -> LtrFixture:
    """An MSLR-WEB-shaped folder (136 features, labels 0-4, CRLF): ``test.txt`` holds 21 whole
    queries; ``train.txt`` is cut after exactly 1,000 lines inside a query, as ``head -n 1000``
    would, so that query is dropped by ``truncated_last_query = "auto"``.  Labels depend on the
    title columns (3, 8, ..., 123), so a Lasso on them finds a signal."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    title = list(range(3, 124, 5))
    qid, kept_queries, kept_docs, dropped, counts = 0, 0, 0, [], []
    for name, cut in (("test.txt", None), ("train.txt", 1000)):
        lines: list[str] = []
        queries = 21 if cut is None else 10**6
        for _ in range(queries):
            if cut is not None and len(lines) >= cut:
                break
            qid += 1
            docs = int(rng.integers(12, 41))
            x, labels = _ltr_queries(rng, 136, title, 4, docs)
            first = len(lines) + 1
            lines += [_svmlight_line(int(lab), qid, row) for lab, row in zip(labels, x, strict=True)]
            if cut is not None and len(lines) > cut:  # this query is the one the cut truncates
                dropped.append((qid, cut - first + 1, first))
                lines = lines[:cut]
                break
            kept_queries += 1
            kept_docs += docs
        counts.append(len(lines))
        (folder / name).write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return LtrFixture(folder, kept_queries, kept_docs, tuple(dropped), tuple(counts))  # test.txt, train.txt


def write_letor_like(folder: Path, seed: int = 1) -> LtrFixture:
    """A LETOR 4.0 MQ2008-shaped folder: ``test.txt`` and ``vali.txt``, 46 features in [0, 1],
    labels 0-2, a ``#docid = ...`` comment on every line (LF); 12 whole queries per file."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    qid, n_docs, counts = 10_000, 0, []
    for name in ("test.txt", "vali.txt"):
        lines: list[str] = []
        for _ in range(12):
            qid += 1
            docs = int(rng.integers(8, 31))
            x, labels = _ltr_queries(rng, 46, list(range(1, 47, 3)), 2, docs)
            x = x / x.max(axis=0).clip(min=1e-9)  # LETOR's per-query min-max features
            lines += [
                _svmlight_line(int(lab), qid, row, f" #docid = GX{qid:05d}-{i:02d} inc = 1 prob = 0.5")
                for i, (lab, row) in enumerate(zip(labels, x, strict=True))
            ]
            n_docs += docs
        counts.append(len(lines))
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return LtrFixture(folder, 24, n_docs, (), tuple(counts))


# -- MovieLens look-alike ---------------------------------------------------------------------------


def write_movielens_like(folder: Path, seed: int = 2, users: int = 150, movies: int = 1100) -> Path:
    """An ml-latest-small-shaped ``ratings.csv`` (header, CRLF): ``users`` users in 4 taste groups
    (user u in group u mod 4) and ``movies`` movies in 4 genres (movie j in genre j mod 4); each user
    rates 70 random movies and every movie has at least one rating; a user likes (>= 4 stars) a
    movie of their own genre with probability 0.85 and any other with 0.15."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = {(u, int(j)) for u in range(1, users + 1) for j in rng.choice(np.arange(1, movies + 1), 70, replace=False)}
    pairs |= {((j - 1) % users + 1, j) for j in range(1, movies + 1)}
    lines = ["userId,movieId,rating,timestamp"]
    for t, (u, j) in enumerate(sorted(pairs)):
        likes = rng.random() < (0.85 if u % 4 == j % 4 else 0.15)
        stars = rng.choice([4.0, 4.5, 5.0]) if likes else rng.choice([0.5, 1.0, 2.0, 3.0, 3.5])
        lines.append(f"{u},{j},{stars:.1f},{964_980_000 + t}")
    (folder / "ratings.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return folder


# -- Open Bandit Dataset look-alike -------------------------------------------------------------------

#: items per campaign of the look-alike (the real sample: 80, 34, 46)
OBD_ARMS = {"all": 8, "men": 4, "women": 5}


def write_obd_like(folder: Path, rows: int = 40, seed: int = 3) -> Path:
    """The Open Bandit Dataset's layout (``{behavior}/{campaign}/{campaign}.csv`` and
    ``item_context.csv``): ``rows`` impressions per file; the random logger's propensity 1/K, the
    other's drawn in (0, 1]; user_feature_0 takes two values, u0 and u1."""
    rng = np.random.default_rng(seed)
    for behavior in ("random", "bts"):
        for campaign, arms in OBD_ARMS.items():
            base = folder / behavior / campaign
            base.mkdir(parents=True, exist_ok=True)
            items = ["", "item_id", "item_feature_0", "item_feature_1"]
            lines = [",".join(items)] + [f"{k},{k},{rng.normal():.6f},h{k % 2}" for k in range(arms)]
            (base / "item_context.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
            header = ["", "timestamp", "item_id", "position", "click", "propensity_score"]
            header += [f"user_feature_{j}" for j in range(4)] + [f"user-item_affinity_{k}" for k in range(arms)]
            lines = [",".join(header)]
            for i in range(rows):
                p = 1 / arms if behavior == "random" else rng.uniform(0.01, 1.0)
                affinity = ",".join(f"{v:.4f}" for v in rng.random(arms))
                lines.append(
                    f"{i},2019-11-24 00:00:{i % 60:02d}+00:00,{rng.integers(arms)},{rng.integers(1, 4)},"
                    f"{rng.integers(2)},{p},u{rng.integers(2)},a,b,c,{affinity}"
                )
            (base / f"{campaign}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


WRITERS: dict[str, Callable[[Path], object]] = {
    "movielens-latest-small": write_movielens_like,
    "mslr-web-fold1-5k": write_mslr_like,
    "letor-mq2008-fold1": write_letor_like,
    "open-bandit-dataset-small": write_obd_like,
}
assert set(WRITERS) == set(DATASETS)


def data_home_with_every_dataset(folder: Path) -> list[str]:
    """Fill ``folder`` as a data home: each data set linked from the real data home when present,
    else a generated look-alike.  Returns the names generated."""
    folder.mkdir(parents=True, exist_ok=True)
    generated = []
    for name, write in WRITERS.items():
        real = dataset_path(name)
        if real.is_dir():
            (folder / name).symlink_to(real.resolve(), target_is_directory=True)
        else:
            write(folder / name)
            generated.append(name)
    return generated
