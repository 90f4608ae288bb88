"""Boundary checks shared by configs, environments and policies.

Every check raises ``ValueError`` with a message that names the parameter, the
valid range and the value received, e.g. ``"horizon must be an integer >= 1, got 0"``.
Checks never modify their inputs.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer{_range_text(low, high)}, got {value!r}")
    ivalue = int(value)
    if (low is not None and ivalue < low) or (high is not None and ivalue > high):
        raise ValueError(f"{name} must be an integer{_range_text(low, high)}, got {ivalue}")
    return ivalue


def check_float(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as ``float`` if it is a finite real in the given interval."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(
            f"{name} must be a finite number{_interval_text(low, high, low_open, high_open)}, got {value!r}"
        )
    fvalue = float(value)
    too_low = low is not None and (fvalue <= low if low_open else fvalue < low)
    too_high = high is not None and (fvalue >= high if high_open else fvalue > high)
    if too_low or too_high:
        raise ValueError(f"{name} must be{_interval_text(low, high, low_open, high_open)}, got {fvalue}")
    return fvalue


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def check_array(
    name: str,
    value: object,
    shape: tuple[int, ...],
    *,
    dtype: type | np.dtype | None = None,
) -> np.ndarray:
    """Return ``value`` as an array of exactly ``shape`` with only finite entries.

    ``dtype`` (if given) is the dtype the array is converted to; conversion of
    a non-numeric input is reported as an error naming ``name``.
    """
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape {shape}: {exc}") from None
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} must be finite, got {bad} NaN or infinite entries")
    return arr


def _range_text(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


def _interval_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high}"
    return ""
