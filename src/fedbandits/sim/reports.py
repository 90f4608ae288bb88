"""Policy reports of an experiment's tasks, merged into one report per algorithm.

Each task builds the algorithms' policies for its own runs, and each policy's
:meth:`~fedbandits.algorithms.base.Policy.report` describes those runs only: means over them,
maxima, counts.  :func:`merge_reports` combines the tasks' reports by the rules the policy class
declares in ``report_merge`` (:data:`~fedbandits.algorithms.base.MergeRule`), weighting means by
each task's number of runs, so that the merged report is the report of all runs together --
whatever the grouping of runs into tasks (up to float rounding in the means).

A key without a rule must be equal in every task (a function of the config); if it differs the
merge raises :class:`ReportMergeError` rather than keep one task's value.  Counts named
``clipped*`` and ``psd_repairs`` are summed without a rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fedbandits.algorithms.base import MergeRule, Policy


class ReportMergeError(RuntimeError):
    """Task reports that cannot be merged: an internal inconsistency of a policy's report."""


def default_rule(key: str) -> MergeRule | None:
    """The rule of a key its class does not declare: sums for clipping/repair counts, else none."""
    return "sum" if key.startswith("clipped") or key == "psd_repairs" else None


def merge_reports(
    reports: Sequence[Mapping[str, object]],
    weights: Sequence[int],
    policy: type[Policy] = Policy,
    label: str = "",
) -> dict[str, object]:
    """One report from the reports of tasks of ``weights`` runs each, by ``policy.report_merge``.

    ``label`` names the algorithm in errors.  A single report is returned unchanged.
    """
    if len(reports) != len(weights) or not reports:
        raise ValueError(f"need one weight per report and at least one report, got {len(reports)} and {len(weights)}")
    if any(w <= 0 for w in weights):
        raise ValueError(f"weights must be positive run counts, got {list(weights)}")
    who = f"algorithm {label or policy.name or policy.__name__!r} ({policy.__name__})"
    if len(reports) == 1:
        return dict(reports[0])
    keys = list(reports[0])
    for i, rep in enumerate(reports[1:], start=1):
        if set(rep) != set(keys):
            diff = sorted(set(rep).symmetric_difference(keys))
            raise ReportMergeError(f"{who}: task {i}'s report has other keys than task 0's: {diff}")
    merged: dict[str, object] = {}
    derived = []
    for key in keys:
        values = [rep[key] for rep in reports]
        rule = policy.report_merge.get(key) or default_rule(key)
        if rule == "derived":
            derived.append(key)
            continue
        try:
            merged[key] = _merge_values(rule, values, weights)
        except ReportMergeError as exc:
            hint = f"; add a rule to {policy.__name__}.report_merge" if rule is None else ""
            raise ReportMergeError(f"{who}: report key {key!r}: {exc}{hint}") from None
        except (TypeError, ValueError) as exc:
            raise ReportMergeError(f"{who}: report key {key!r} cannot be merged by rule {rule!r}: {exc}") from None
    merged = policy.finish_merged_report(merged)
    missing = [key for key in derived if key not in merged]
    if missing or set(merged) != set(keys):
        raise ReportMergeError(
            f"{who}: {policy.__name__}.finish_merged_report must recompute exactly the derived keys "
            f"{derived}; missing {missing}, unexpected {sorted(set(merged) - set(keys))}"
        )
    return {key: merged[key] for key in keys}


def _merge_values(rule: MergeRule | None, values: list[object], weights: Sequence[int]) -> object:
    if rule is None or rule == "same":
        for v in values[1:]:
            if not _equal(v, values[0]):
                what = "has no merge rule" if rule is None else "is declared the same in every task ('same')"
                raise ReportMergeError(f"{what} but differs between tasks: {values[0]!r} vs {v!r}")
        return values[0]
    if rule == "sum":
        if all(isinstance(v, int) for v in values):
            return sum(values)  # type: ignore[arg-type]
        return math.fsum(_floats(values))
    if rule == "mean":
        return _weighted_mean(_floats(values), weights)
    if rule in ("max", "min"):
        nums = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        if len(nums) < len(values):
            return math.nan
        return max(nums) if rule == "max" else min(nums)  # type: ignore[type-var]
    if rule == "max-elementwise":
        return np.maximum.reduce(_same_shape(values, None)).tolist()
    if rule == "mean-series":
        arrays = _same_shape(values, np.float64)
        if all(a.size == 0 for a in arrays):
            return []
        if arrays[0].ndim != 2 or arrays[0].shape[1] != 2:
            raise ValueError(f"expected rows [t, value], got shape {arrays[0].shape}")
        times = [[row[0] for row in v] for v in values]  # type: ignore[attr-defined]
        if any(t != times[0] for t in times):
            raise ReportMergeError(f"the series' times differ between tasks: {times[0]} vs {times[1:]}")
        columns = np.stack([a[:, 1] for a in arrays], axis=1)  # (rows, tasks)
        return [[t, _weighted_mean(list(map(float, row)), weights)] for t, row in zip(times[0], columns, strict=True)]
    raise ValueError(f"unknown merge rule {rule!r}")


def _floats(values: list[object]) -> list[float]:
    return [float(v) for v in values]  # type: ignore[arg-type]


def _weighted_mean(values: list[float], weights: Sequence[int]) -> float:
    terms = [w * v for w, v in zip(weights, values, strict=True)]
    total = math.fsum(terms) if all(math.isfinite(x) for x in terms) else sum(terms)
    return total / sum(weights)


def _same_shape(values: list[object], dtype: type | None) -> list[np.ndarray]:
    arrays = [np.asarray(v, dtype=dtype) for v in values]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ReportMergeError(f"shapes differ between tasks: {[a.shape for a in arrays]}")
    return arrays


def _equal(a: object, b: object) -> bool:
    """Equality of report values; NaN equals NaN (a NaN computed from the config is still the same)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b)
