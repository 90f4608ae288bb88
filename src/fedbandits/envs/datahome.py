"""Where the real data sets live when a config gives no ``path``.

The folder of data set ``name`` is ``<data home>/<name>``, and the data home is, first that applies:

1. ``$FEDBANDITS_DATA``: a folder holding the data sets under their usual folder names
   (``movielens-latest-small``, ``mslr-web-fold1-5k``, ``letor-mq2008-fold1``,
   ``open-bandit-dataset-small``);
2. the user data folder ``$XDG_DATA_HOME/fedbandits`` (``~/.local/share/fedbandits`` when
   ``XDG_DATA_HOME`` is unset, empty or relative, as the XDG base-directory rules say).

An explicit ``path`` in the environment's config comes before both; the loaders ask here only
for an empty one.  The answer never depends on where the package or a checkout sits, and nothing
is downloaded: a missing data set raises :class:`MissingDataSet` with one line that says where to
get it and where to put it.  A relative ``$FEDBANDITS_DATA`` is relative to the working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: environment variable naming the data home
DATA_ENV = "FEDBANDITS_DATA"


@dataclass(frozen=True)
class DataSet:
    """A data set the environments read by default: its folder name, what it is and how to get it."""

    name: str
    what: str
    #: where to download it from
    source: str
    #: which of its files go into the folder
    files: str


DATASETS = {
    d.name: d
    for d in (
        DataSet(
            "movielens-latest-small",
            "MovieLens ml-latest-small, GroupLens",
            "download ml-latest-small.zip from https://grouplens.org/datasets/movielens/",
            "the files it holds (ratings.csv is read)",
        ),
        DataSet(
            "mslr-web-fold1-5k",
            "an MSLR-WEB10K sample, Microsoft Research",
            "download MSLR-WEB10K from https://www.microsoft.com/en-us/research/project/mslr/",
            "the first 5,000 lines of Fold1/train.txt and of Fold1/test.txt",
        ),
        DataSet(
            "letor-mq2008-fold1",
            "LETOR 4.0 MQ2008 Fold 1, Microsoft Research Asia",
            "download MQ2008 from https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/",
            "Fold1/test.txt and Fold1/vali.txt",
        ),
        DataSet(
            "open-bandit-dataset-small",
            "the Open Bandit Dataset's small sample, ZOZO Research (Saito et al. 2021)",
            "download open_bandit_dataset.zip from https://research.zozo.com/data.html (the small sample is "
            "also in the zr-obp repository, obd/)",
            "its random/ and bts/ folders, as shipped",
        ),
    )
}


class MissingDataSet(FileNotFoundError):
    """A data set the config reads by default is not in the data home (the message is one line)."""


def data_home() -> Path:
    """The folder that holds the data sets (see the module docstring); it need not exist."""
    chosen = os.environ.get(DATA_ENV, "")
    if chosen:
        return Path(chosen).expanduser().absolute()
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "fedbandits"


def dataset_path(name: str) -> Path:
    """Where data set ``name`` is, or belongs: ``data_home() / name`` (not checked)."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}")
    return data_home() / name


def require_dataset(name: str) -> Path:
    """The folder of data set ``name``; :class:`MissingDataSet` (one line) when it is not there."""
    folder = dataset_path(name)
    if folder.is_dir():
        return folder
    data = DATASETS[name]
    if os.environ.get(DATA_ENV):
        home = f"${DATA_ENV}/{name}"
    else:
        home = f"the user data folder; export {DATA_ENV}=DIR to use DIR/{name} instead"
    raise MissingDataSet(
        f"data set {name} ({data.what}) not found: {data.source} and put {data.files} in {folder}/ "
        f"({home}), or set the environment's path to your copy"
    )


def check_required_data(params: object) -> None:
    """:func:`require_dataset` for every data set an environment's ``params`` declare they read from
    the data folder (``params.required_data()``, where the class has it): lets a driver refuse a
    missing data set before anything runs, rather than when that environment is first built."""
    required = getattr(params, "required_data", None)
    for name in required() if callable(required) else ():
        require_dataset(name)
