"""Results of an experiment, their summary, and their files.

A results folder holds::

    config.toml            the resolved configuration (re-runnable as is)
    summary.json           one entry per algorithm: final regret mean/std, communication, time, report
    regret_curves.csv      algorithm,run,t,cumulative_regret   (group pseudo-regret on the time grid)
    per_agent_regret.csv   algorithm,run,agent,cumulative_regret  (at the horizon)
    runs.csv               algorithm,run,final_regret,sync_rounds,messages,bytes_sent
    regret.png             regret curves (mean and spread over runs) and time-averaged regret

All of it is plain text (TOML, JSON, CSV) apart from the figure.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from fedbandits.algorithms.fedlinucb import RETURNING_NOT_COVERED
from fedbandits.config import Config, ConfigError, load_config


class TranscriptArrays(TypedDict):
    """One run's recorded releases: ``sync (K,)``, ``messages (K, M, P)``, ``sigma (P,)``;
    ``distributed-dp`` adds ``sum (K, P)`` and ``present (K, M)``."""

    sync: np.ndarray
    messages: np.ndarray
    sigma: np.ndarray
    sum: NotRequired[np.ndarray]
    present: NotRequired[np.ndarray]


#: a run that clips more than this share of its features or of its rewards gets a warning
#: (:meth:`Results.clipping_warnings`): beyond a few percent, clipping changes a noticeable part of
#: what the learner sees -- a bias, whatever it does to the regret (raising a bound costs noise:
#: docs/bounds.md, "Clipping bounds", measures both on the synthetic instances)
CLIP_WARNING_SHARE = 0.05


class ClippingWarning(UserWarning):
    """An algorithm clipped more than :data:`CLIP_WARNING_SHARE` of its features or rewards."""


class PrivacyUnitWarning(UserWarning):
    """A private algorithm protects interactions while its users return: a user is not covered as a whole."""


#: the counts of a clipping report: the denominator, then the clipped features and rewards
CLIP_COUNTS = ("observations", "clipped_features", "clipped_rewards")


def clipped_shares(report: Mapping[str, Any]) -> tuple[float, float] | None:
    """(clipped features, clipped rewards) as shares of the observations checked against the bounds,
    or None for a report without clipping counts (nothing released, or no ``observations`` count)."""
    n = report.get("observations")
    if "clipped_features" not in report or "clipped_rewards" not in report or not n:
        return None
    return report["clipped_features"] / n, report["clipped_rewards"] / n


def clipped_text(summary: Mapping[str, Any]) -> str:
    """The table's ``clipped x / r`` cell: percentages of the observations, the bare counts when a
    report gives no ``observations`` (a plugin's), '-' for an algorithm that clips nothing."""
    shares = clipped_shares(summary)
    if shares is not None:
        return " / ".join(_percent(share) for share in shares)
    if "clipped_features" in summary and "clipped_rewards" in summary:
        return f"{summary['clipped_features']} / {summary['clipped_rewards']}"
    return "-"


def _percent(share: float) -> str:
    """A share as a percentage that never rounds a clipped datum to 0 nor a clipped-nothing to < 0.1%."""
    if share == 0:
        return "0%"
    if share < 0.001:
        return "<0.1%"
    return f"{100 * share:.1f}%"


#: transcript arrays some protocols add (see :class:`TranscriptArrays`)
TRANSCRIPT_EXTRAS = ("sum", "present")


@dataclass
class AlgorithmResult:
    name: str
    label: str
    curves: np.ndarray  # (R, G) cumulative group pseudo-regret on the grid
    per_agent: np.ndarray  # (R, M) cumulative per-agent pseudo-regret at the horizon
    sync_rounds: np.ndarray  # (R,)
    messages: np.ndarray  # (R,)
    bytes_sent: np.ndarray  # (R,)
    seconds: float = math.nan
    report: dict[str, Any] = field(default_factory=dict)
    #: (run index, {"sync": (K,), "messages": (K, M, P), "sigma": (P,)}) when recorded
    transcripts: list[tuple[int, TranscriptArrays]] = field(default_factory=list)

    @property
    def final_regret(self) -> np.ndarray:
        return self.curves[:, -1]

    def summary(self) -> dict[str, Any]:
        final = self.final_regret
        runs = final.size
        return {
            "label": self.label,
            "algorithm": self.name,
            "runs": runs,
            "final_regret_mean": float(final.mean()),
            "final_regret_std": float(final.std(ddof=1)) if runs > 1 else 0.0,
            "per_agent_regret_mean": float(self.per_agent.mean()),
            "sync_rounds": float(self.sync_rounds.mean()),
            "messages": float(self.messages.mean()),
            "bytes_sent": float(self.bytes_sent.mean()),
            "wall_seconds": self.seconds,
            **self.report,
        }


@dataclass
class Results:
    config: Config
    grid: np.ndarray  # (G,) rounds at which curves are recorded
    algorithms: dict[str, AlgorithmResult]
    wall_seconds: float = math.nan
    env_seconds: float = math.nan
    workers_cpu: int = 1
    #: tasks of this run; how many were loaded from a checkpoint (``--resume``) instead of run, and the
    #: compute time those had taken when they ran (one core)
    tasks: int = 0
    resumed_tasks: int = 0
    resumed_seconds: float = 0.0

    @property
    def compute_seconds(self) -> float:
        """Time spent in the time loop, summed over tasks (the environment's rounds + every algorithm's
        steps; setup and merging are left out, a few percent at small scale), loaded tasks included:
        what the run costs on one core, whatever the workers and whether it was resumed."""
        return self.env_seconds + sum(a.seconds for a in self.algorithms.values())

    def summary(self) -> dict[str, Any]:
        exp = self.config.experiment
        return {
            "experiment": exp.name,
            "environment": self.config.environment.name,
            "runs": exp.runs,
            "horizon": exp.horizon,
            "agents": self.config.environment.params.agents,
            "wall_seconds": self.wall_seconds,
            "environment_seconds": self.env_seconds,
            "tasks": self.tasks,
            "resumed_tasks": self.resumed_tasks,
            "resumed_seconds": self.resumed_seconds,
            "algorithms": [a.summary() for a in self.algorithms.values()],
        }

    def table(self) -> str:
        """The summary as an aligned text table (what the CLI prints)."""
        head = (
            "algorithm",
            "regret(T) mean",
            "std",
            "per-agent",
            "syncs",
            "MB sent",
            "privacy",
            "eps spent",
            "clipped x / r",
            "seconds",
        )
        rows = [head]
        for s in self.summary()["algorithms"]:
            protocol = s.get("protocol", "-")
            spent = s.get("epsilon_spent")
            if protocol in ("-", "none"):
                spent_text = "-"
            else:
                target = s.get("epsilon", float("nan"))
                relation = ">" if spent > target * (1 + 1e-9) else "<="  # type: ignore[operator]
                spent_text = f"{spent:.4g} {relation} target {target:.4g}"
                if s.get("guarantee") != "formal":  # the reason is in summary.json's guarantee_reason
                    spent_text += ": NO FORMAL GUARANTEE"
            privacy = protocol if protocol in ("-", "none") else f"{protocol}/{s.get('calibration', '?')}"
            rows.append(
                (
                    s["label"],
                    f"{s['final_regret_mean']:.2f}",
                    f"{s['final_regret_std']:.2f}",
                    f"{s['per_agent_regret_mean']:.2f}",
                    f"{s['sync_rounds']:.0f}",
                    f"{s['bytes_sent'] / 1e6:.3f}",
                    privacy,
                    spent_text,
                    clipped_text(s),
                    f"{s['wall_seconds']:.2f}",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def clipping_warnings(
        self, threshold: float = CLIP_WARNING_SHARE, entries: Mapping[str, str] | None = None
    ) -> list[str]:
        """One line per algorithm that clipped more than ``threshold`` of its features or of its
        rewards, naming the bound to raise in its ``[[algorithms]]`` entry (what the CLI prints and
        :func:`fedbandits.run` warns).  Float rounding is not clipping
        (:data:`fedbandits.core.clipping.ROUNDING`): float32 features of norm 1 neither count nor warn.

        ``entries`` maps a run label to the label of the user's entry it was made from (the frontier
        runs one entry at several epsilons, all with its bounds): those warn once per entry, on
        their counts summed."""
        groups: dict[str, list[Any]] = {}
        for alg in self.config.algorithms:
            groups.setdefault((entries or {}).get(alg.label, alg.label), []).append(alg)
        lines = []
        for label, algs in groups.items():
            reports = [self.algorithms[a.label].report for a in algs]
            if any(clipped_shares(r) is None for r in reports):
                continue
            n, features, rewards = (sum(r[k] for r in reports) for k in CLIP_COUNTS)
            largest = max(r.get("feature_norm_max", math.inf) for r in reports)
            over = []
            feature_bound = getattr(algs[0].params, "feature_bound", math.nan)
            if features / n > threshold:
                seen = f", the largest norm {largest:.6g}" if math.isfinite(largest) else ""
                text = f"{_percent(features / n)} of its features (feature_bound = {feature_bound:g}{seen})"
                over.append(("feature_bound", text))
            if rewards / n > threshold:
                bound = getattr(algs[0].params, "reward_bound", math.nan)
                offset = getattr(algs[0].params, "reward_offset", 0.0)
                kept = f"reward_bound = {bound:g}" + (f", after reward_offset = {offset:g}" if offset else "")
                over.append(("reward_bound", f"{_percent(rewards / n)} of its rewards ({kept})"))
            if over:
                runs = f" (its {len(algs)} variants together)" if len(algs) > 1 else ""
                lines.append(
                    f"[[algorithms]] entry {label!r} clipped {' and '.join(text for _, text in over)} of "
                    f"{int(n):,} observations{runs}: raise its {' and '.join(b for b, _ in over)} to clip less, "
                    "at the cost of more noise (docs/bounds.md, 'Clipping bounds')"
                )
        return lines

    def privacy_unit_warnings(self) -> list[str]:
        """One line per private algorithm that protects interactions on an instance whose users return
        (its report's ``privacy_unit`` is :data:`~fedbandits.algorithms.fedlinucb.RETURNING_NOT_COVERED`, with
        ``max_user_visits``): what the CLI prints and
        :func:`fedbandits.run` warns."""
        lines = []
        for alg in self.config.algorithms:
            report = self.algorithms[alg.label].report
            if report.get("privacy_unit") == RETURNING_NOT_COVERED:
                lines.append(
                    f"[[algorithms]] entry {alg.label!r} protects each interaction, but its users return (one user "
                    f"visited a silo up to {report.get('max_user_visits')} times): a returning user is not covered "
                    "as a whole; set privacy_unit = 'user' and max_contributions (docs/privacy.md, 'User-level "
                    "privacy')"
                )
        return lines

    # -- files -----------------------------------------------------------------------------
    def save(self, out: str | Path) -> Path:
        import tomli_w

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.toml").write_text(tomli_w.dumps(self.config.to_dict()), encoding="utf-8")
        (out / "summary.json").write_text(json.dumps(self.summary(), indent=2) + "\n", encoding="utf-8")
        with open(out / "regret_curves.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["algorithm", "run", "t", "cumulative_regret"])
            for lab, res in self.algorithms.items():
                for r, curve in enumerate(res.curves):
                    w.writerows((lab, r, int(t), repr(float(v))) for t, v in zip(self.grid, curve, strict=True))
        with open(out / "per_agent_regret.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["algorithm", "run", "agent", "cumulative_regret"])
            for lab, res in self.algorithms.items():
                for r, row in enumerate(res.per_agent):
                    w.writerows((lab, r, i, repr(float(v))) for i, v in enumerate(row))
        self._save_transcripts(out)
        with open(out / "runs.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["algorithm", "run", "final_regret", "sync_rounds", "messages", "bytes_sent"])
            for lab, res in self.algorithms.items():
                for r in range(res.final_regret.size):
                    w.writerow(
                        [
                            lab,
                            r,
                            repr(float(res.final_regret[r])),
                            int(res.sync_rounds[r]),
                            int(res.messages[r]),
                            int(res.bytes_sent[r]),
                        ]
                    )
        return out

    def _save_transcripts(self, out: Path) -> None:
        """``transcript/<algorithm>/run_<r>.npz`` for every algorithm whose messages were recorded.

        Each file holds ``sync (K,)`` (release index k), ``messages (K, M, P)`` (what silo i
        released at sync k, before any shuffling: the packed upper triangle of its covariance
        p-sum -- or prefix sum for ``ldp-prefix`` -- followed by its bias p-sum, noise included)
        and ``sigma (P,)`` (the noise standard deviation of every packed entry).  For
        ``distributed-dp``, ``messages`` are the masked residues modulo 2^bits (uint64) that the
        secure aggregation receives, ``sum (K, P)`` the server's decoded node sums and ``present
        (K, M)`` which silos' messages arrived; ``sigma`` bounds the std of one silo's share.
        """
        for index, res in enumerate(self.algorithms.values()):
            if not res.transcripts:
                continue
            folder = out / "transcript" / f"{index + 1:02d}-{_slug(res.label)}"
            folder.mkdir(parents=True, exist_ok=True)
            for run, data in res.transcripts:
                np.savez_compressed(folder / f"run_{run:04d}.npz", **data)

    @classmethod
    def load(cls, folder: str | Path) -> Results:
        """Read a results folder written by :meth:`save`.

        Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the folder and
        the file for a damaged one.
        """
        folder = Path(folder)
        for name in ("config.toml", "summary.json", "regret_curves.csv", "per_agent_regret.csv", "runs.csv"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder} is not a results folder: {name} is missing")

        def damaged(name: str, why: object) -> ValueError:
            return ValueError(f"{folder} is not a valid results folder: {name}: {why}")

        try:
            config = load_config(folder / "config.toml")
        except ConfigError as exc:
            raise damaged("config.toml", exc) from None
        try:
            summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
            by_label = {s["label"]: s for s in summary["algorithms"]}
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise damaged("summary.json", exc) from None

        curves: dict[str, dict[int, list[tuple[int, float]]]] = {}
        for row in _csv_rows(folder, "regret_curves.csv", damaged):
            curves.setdefault(row["algorithm"], {}).setdefault(int(row["run"]), []).append(
                (int(row["t"]), float(row["cumulative_regret"]))
            )
        agents: dict[str, dict[int, list[float]]] = {}
        for row in _csv_rows(folder, "per_agent_regret.csv", damaged):
            agents.setdefault(row["algorithm"], {}).setdefault(int(row["run"]), []).append(
                float(row["cumulative_regret"])
            )
        comm: dict[str, list[tuple[int, float, float]]] = {}
        for row in _csv_rows(folder, "runs.csv", damaged):
            comm.setdefault(row["algorithm"], []).append(
                (int(row["sync_rounds"]), float(int(row["messages"])), float(int(row["bytes_sent"])))
            )

        algorithms = {}
        grid = np.zeros(0, dtype=np.int64)
        for alg in config.algorithms:
            lab = alg.label
            for name, table in (("regret_curves.csv", curves), ("per_agent_regret.csv", agents), ("runs.csv", comm)):
                if lab not in table:
                    raise damaged(name, f"no rows for algorithm {lab!r}")
            runs = curves[lab]
            grid = np.array([t for t, _ in runs[min(runs)]])
            entry = dict(by_label.get(lab, {}))
            try:
                curve_array = np.array([[v for _, v in runs[r]] for r in sorted(runs)], dtype=np.float64)
                agent_array = np.array([agents[lab][r] for r in sorted(agents[lab])], dtype=np.float64)
            except ValueError as exc:  # ragged rows
                raise damaged("regret_curves.csv / per_agent_regret.csv", exc) from None
            algorithms[lab] = AlgorithmResult(
                name=alg.name,
                label=lab,
                curves=curve_array,
                per_agent=agent_array,
                sync_rounds=np.array([s for s, _, _ in comm[lab]], dtype=np.int64),
                messages=np.array([m for _, m, _ in comm[lab]], dtype=np.float64),
                bytes_sent=np.array([b for _, _, b in comm[lab]], dtype=np.float64),
                seconds=float(entry.get("wall_seconds", math.nan)),
                report={k: v for k, v in entry.items() if k not in _SUMMARY_KEYS},
            )
        return cls(
            config=config,
            grid=grid,
            algorithms=algorithms,
            wall_seconds=float(summary.get("wall_seconds", math.nan)),
            env_seconds=float(summary.get("environment_seconds", math.nan)),
            tasks=int(summary.get("tasks", 0)),
            resumed_tasks=int(summary.get("resumed_tasks", 0)),
            resumed_seconds=float(summary.get("resumed_seconds", 0.0)),
        )


def _csv_rows(folder: Path, name: str, damaged: Callable[[str, object], ValueError]) -> list[dict[str, str]]:
    """All rows of a results CSV; a malformed file raises the ``damaged`` error."""
    try:
        with open(folder / name, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:  # convert once here so bad values are reported with the file name
            for key, value in row.items():
                if key != "algorithm":
                    float(value)
        return rows
    except (csv.Error, ValueError, TypeError) as exc:
        raise damaged(name, exc) from None


_SUMMARY_KEYS = {
    "label",
    "algorithm",
    "runs",
    "final_regret_mean",
    "final_regret_std",
    "per_agent_regret_mean",
    "sync_rounds",
    "messages",
    "bytes_sent",
    "wall_seconds",
}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-") or "algorithm"
