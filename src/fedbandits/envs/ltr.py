"""Learning-to-rank bandit instances from MSLR-WEB / LETOR files (Zhou & Chowdhury 2023, section 6).

Queries are the contexts, their judged documents the arms, and a Lasso fitted to the relevance
labels is the true parameter theta*.  The paper's construction (section 6 and appendix H):
"train a lasso regression model on title features [d = 57] (body features, d = 78) to predict
relevances, take this model as theta*, divide the queries equally into M = 10 agents".

This module holds the environment (:class:`LearningToRankParams`, :class:`LearningToRank`) and the
per-process instance memo (:func:`load_instance`).  Flow: :mod:`fedbandits.envs.svmlight` reads
and validates the files (format, truncated last query) -> :mod:`fedbandits.envs.ltr_instance`
prepares the instance (feature columns, preprocessing, the Lasso theta*, disk cache) -> here the
queries are dealt to agents and rounds are sampled.

Agents
------
Query i (in file order, files sorted by name) belongs to agent ``i mod M``: every query in
exactly one agent, agent sizes differ by at most one, and every agent gets queries from every
file.  Fewer queries than agents is an error.

Rounds: each run's Generator draws, for every agent, one query uniformly from the agent's
queries and a uniformly random ordered sample of K of its documents without replacement (all
agents at once: one ``argsort`` of random keys offset by the agent index).  A query with n < K
documents offers all n in random order and then repeats them cyclically (documents
1..n, 1..n, ...).  A duplicate has the same features and expected reward as its original, so
it changes neither the best expected reward (pseudo-regret) nor which documents can be chosen;
it only gives index-based tie-breaking more copies.  The offered rows are kept in
``last_docs`` (R, M, K) and the drawn queries in ``last_queries`` (R, M).

Sampled reward: ``expected reward + reward_noise_sd * N(0, 1)``, not clipped.  The Gaussian
noise is unbiased and sub-Gaussian (the model LinUCB and the papers' regret bounds assume), so
pseudo-regret computed from the expected rewards is the regret of the reward process.  Clipping
the sample to [0, 1] would bias it near 0 and 1 (most documents have expected reward near 0),
and the rescaled true label is not ``<x, theta*>`` in expectation (R^2 ~ 0.1) and could not be
expressed through ``rewards(means, noise)``, which never learns which document was chosen.
Private protocols clip rewards to their own bound anyway.  ``reward_noise_sd = 0`` gives
deterministic rewards; the report lists the Lasso's residual standard deviation, the noise
level of the real labels around the model, as a reference value.

Caching
-------
The prepared instance is built once per process and shared by all runs (key: resolved files
with size and mtime, columns, lasso_alpha, truncated_last_query); on disk it is cached by
:func:`fedbandits.envs.ltr_instance.build_instance` (see that module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry, require_extra
from fedbandits.envs.ltr_instance import (
    DEFAULT_CACHE_DIR,
    DEFAULT_DATASET,
    LtrInstance,
    build_instance,
    parse_columns,
    resolve_files,
)
from fedbandits.envs.svmlight import TRUNCATION_RULES

# -- instances of this process -----------------------------------------------------------------


_INSTANCES: dict[tuple[Any, ...], LtrInstance] = {}


def load_instance(params: LearningToRankParams) -> LtrInstance:
    """The instance of ``params``, prepared once per process (see the module docstring)."""
    paths = resolve_files(params.path, params.files)
    stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)
    key = (stamp, params.columns, params.lasso_alpha, params.truncated_last_query)
    inst = _INSTANCES.get(key)
    if inst is None:
        inst = build_instance(
            paths,
            columns=params.columns,
            lasso_alpha=params.lasso_alpha,
            truncated_last_query=params.truncated_last_query,
            cache_dir=params.cache_dir,
        )
        _INSTANCES[key] = inst
    return inst


def clear_cache() -> None:
    """Forget every instance prepared in this process (the disk cache is left alone)."""
    _INSTANCES.clear()


# -- environment -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearningToRankParams:
    path: str = field(
        default="",
        metadata={
            "help": "svmlight/LETOR file or folder (e.g. MSLR-WEB10K); empty = mslr-web-fold1-5k in "
            "$FEDBANDITS_DATA (default ~/.local/share/fedbandits)"
        },
    )
    files: str = field(
        default="",
        metadata={"help": "glob inside the folder; empty = *.txt (or Fold1/*.txt for an MSLR root folder)"},
    )
    columns: str = field(
        default="auto",
        metadata={
            "help": "'title' / 'body' (MSLR: the 25 features of that stream), 'all', 'auto' (title for MSLR, "
            "else all) or 1-based indices like '3,8,13-15'"
        },
    )
    agents: int = field(default=10, metadata={"help": "number of agents M >= 1; query i belongs to agent i mod M"})
    arms: int = field(
        default=10, metadata={"help": "documents per agent per round K >= 1 (short queries repeat documents)"}
    )
    lasso_alpha: float = field(default=1e-4, metadata={"help": "Lasso penalty > 0 of the fit that defines theta*"})
    reward_noise_sd: float = field(
        default=0.1, metadata={"help": "sd >= 0 of the Gaussian noise added to the expected reward (not clipped)"}
    )
    truncated_last_query: str = field(
        default="auto",
        metadata={"help": "'auto' (drop a file's last query if it looks cut), 'drop' (always) or 'keep'"},
    )
    cache_dir: str = field(
        default=DEFAULT_CACHE_DIR, metadata={"help": "folder of the prepared-instance cache; empty = no disk cache"}
    )

    def required_data(self) -> tuple[str, ...]:
        """Data sets read from the data folder (:mod:`fedbandits.envs.datahome`): the MSLR sample if no ``path``."""
        return (DEFAULT_DATASET,) if self.path == "" else ()

    def __post_init__(self) -> None:
        for name in ("path", "files", "cache_dir"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")
        object.__setattr__(self, "columns", parse_columns(self.columns))
        check_int("agents", self.agents, low=1)
        check_int("arms", self.arms, low=1)
        check_float("lasso_alpha", self.lasso_alpha, low=0.0, low_open=True)
        check_float("reward_noise_sd", self.reward_noise_sd, low=0.0)
        check_choice("truncated_last_query", self.truncated_last_query, TRUNCATION_RULES)
        require_extra("sklearn", "data", "environment 'learning-to-rank' (the Lasso fit of theta*)")

    #: whether rounds carry user ids (what user-level privacy needs): queries are not attributed to users
    user_ids = False


class LearningToRank(Environment):
    """Learning to rank (Zhou & Chowdhury 2023, sec. 6): queries are contexts, documents arms, theta* a Lasso.

    See the module docstrings: this one for the agents and the sampling, ``ltr_instance`` for the columns and
    the preprocessing, ``svmlight`` for the data format.
    """

    name = "learning-to-rank"
    feature_bound = 1.0
    reward_range = (0.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: LearningToRankParams) -> None:
        inst = load_instance(params)
        super().__init__(rngs, params.agents, params.arms, inst.dim)
        if inst.n_queries < self.n_agents:
            raise ValueError(f"{inst.n_queries} queries cannot be split over {self.n_agents} agents (need >= 1 each)")
        self.params = params
        self.instance = inst
        self.theta = inst.theta  # (d,), shared by every run
        self.noise_sd: float = params.reward_noise_sd
        m, k = self.n_agents, self.n_arms
        owner = np.arange(inst.n_queries) % m
        #: query indices of agent m: ``agent_queries[agent_start[m] : agent_start[m] + agent_count[m]]``
        self.agent_queries = np.argsort(owner, kind="stable")
        self.agent_count = np.bincount(owner, minlength=m)
        self.agent_start = np.cumsum(self.agent_count) - self.agent_count
        self._agent_offset = np.arange(m, dtype=np.float64)
        self._slots = np.arange(k, dtype=np.int64)
        shape = (self.n_runs, m, k)
        #: documents (rows of ``instance.features``) offered in the last round, (R, M, K)
        self.last_docs = np.zeros(shape, dtype=np.int64)
        #: query index each agent drew in the last round, (R, M)
        self.last_queries = np.zeros((self.n_runs, m), dtype=np.int64)
        self._features = np.empty((*shape, self.dim), dtype=np.float32)
        self._means = np.empty(shape, dtype=np.float32)
        self._noise = np.empty((self.n_runs, m))

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(queries (M,), documents (M, K)) of one run's round."""
        ptr = self.instance.query_ptr
        queries = self.agent_queries[self.agent_start + rng.integers(0, self.agent_count)]
        start = ptr[queries]
        size = ptr[queries + 1] - start
        seg = np.cumsum(size) - size
        # one random permutation per agent: sort keys u/2 + m (u uniform), grouped by agent m
        keys = rng.random(int(size.sum()))
        keys *= 0.5
        keys += np.repeat(self._agent_offset, size)
        order = np.argsort(keys, kind="stable")
        pos = seg[:, None] + self._slots[None, :] % size[:, None]
        docs = start[:, None] + (order[pos] - seg[:, None])
        return queries, docs

    def next_round(self) -> Round:
        x, mu = self.instance.features, self.instance.means
        for r, rng in enumerate(self.rngs):
            queries, docs = self._draw(rng)
            self.last_queries[r] = queries
            self.last_docs[r] = docs
            np.take(x, docs, axis=0, out=self._features[r], mode="clip")
            np.take(mu, docs, out=self._means[r], mode="clip")
            rng.standard_normal(out=self._noise[r])
        return Round(self._features, self._means, self._noise)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Expected reward plus ``reward_noise_sd`` times the round's standard normal (not clipped)."""
        return means + self.noise_sd * noise

    def instance_report(self) -> dict[str, Any]:
        """The prepared instance's report plus this environment's agent split."""
        owner_sizes = self.agent_count.tolist()
        return {
            **self.instance.report,
            "agents": self.n_agents,
            "arms": self.n_arms,
            "reward_noise_sd": self.noise_sd,
            "queries_per_agent": owner_sizes,
            "queries_with_fewer_docs_than_arms": int(np.count_nonzero(self.instance.query_sizes() < self.n_arms)),
        }

    def describe(self) -> dict[str, object]:
        rep = self.instance.report
        return {
            **super().describe(),
            "path": str(Path(rep["files"][0]["file"]).parent) if rep.get("files") else "",
            "columns": self.params.columns,
            "lasso_alpha": self.params.lasso_alpha,
            "reward_noise_sd": self.noise_sd,
            "queries": self.instance.n_queries,
            "docs": self.instance.n_docs,
            "lasso_r2": rep["lasso"]["r2"],
        }


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = env_entry(LearningToRank, LearningToRankParams)
