"""The online agent's boundary: every input checked before anything changes, one error naming the field.

Checks are cheap by design (a shape, a dtype, one finiteness pass): they run on every decision.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

#: the longest user id a string may be (an integer id is any integer >= 0)
MAX_USER_ID = 256
#: the first integer id with more than MAX_USER_ID digits
_TOO_LONG = 10**MAX_USER_ID


class AgentError(ValueError):
    """An input the agent refuses (the message names the field); nothing changed."""


class ExpiredDecision(AgentError):
    """A reward for a decision that expired (refused, counted as a late reward)."""


class AlreadyRewarded(AgentError):
    """A second reward for a decision (refused)."""


def numeric(value: object) -> bool:
    """Whether ``value`` reads as a real numeric array (a bool array counts, as numpy casts it)."""
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def check_features(features: Any, dim: int) -> np.ndarray:
    """The candidate arms ``(K, d)``, K >= 1, as C-contiguous float32 (what the scorer multiplies)."""
    try:
        if getattr(features, "dtype", None) == np.float32:
            x = np.ascontiguousarray(features)
        else:
            with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused below
                x = np.ascontiguousarray(features, dtype=np.float32)
    except (TypeError, ValueError):
        raise AgentError(f"features must be a numeric array (K, d = {dim}), got {type(features).__name__}") from None
    if x.ndim != 2 or x.shape[1] != dim or x.shape[0] < 1:
        raise AgentError(f"features must have shape (K, d = {dim}) with K >= 1 arms, got {x.shape}")
    if not np.isfinite(x).all():
        raise AgentError("features must be finite (float32 range), got NaN or infinite entries")
    return x


def check_reward(name: str, value: object, bound: float | None, offset: float = 0.0) -> float:
    """A finite reward, within [offset - bound, offset + bound] if a bound is enforced (the config's
    reward_offset c and reward_bound B: the rewards y with y - c in [-B, B])."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise AgentError(f"{name} must be a finite number, got {value!r:.80}")
    y = float(value)
    if y != y or y in (float("inf"), float("-inf")):
        raise AgentError(f"{name} must be a finite number, got {y}")
    if bound is not None and not -bound <= y - offset <= bound:
        where = "reward_bound" if offset == 0.0 else "reward_offset +- reward_bound"
        raise AgentError(f"{name} must be in [{offset - bound:g}, {offset + bound:g}] (the config's {where}), got {y}")
    return y


def check_logs(features: Any, arms: Any, rewards: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Logged decisions for ``partial_fit``: the chosen rows ``(n, d)`` float64 and the rewards ``(n,)``
    (only shaped here; each reward is checked with :func:`check_reward` by the agent)."""
    x = np.asarray(features, dtype=np.float64) if numeric(features) else None
    if x is None or x.ndim not in (2, 3) or x.shape[-1] != dim or x.shape[0] < 1:
        shape = getattr(x, "shape", None)
        raise AgentError(f"features must be a numeric array (n, K, d) or (n, d) with d = {dim}, got {shape}")
    n = x.shape[0]
    if not np.isfinite(x).all():
        raise AgentError("features must be finite, got NaN or infinite entries")
    if x.ndim == 3 or arms is not None:
        a = np.asarray(arms) if numeric(arms) else None
        limit = x.shape[1] if x.ndim == 3 else None
        if a is None or a.shape != (n,) or a.dtype.kind not in "iu" or (a < 0).any() or (limit and (a >= limit).any()):
            bound = f"in [0, K = {limit})" if limit else ">= 0"
            raise AgentError(f"arms must be {n} integers {bound}, got {arms!r:.80}")
        if x.ndim == 3:
            x = x[np.arange(n), a]
    y = np.asarray(rewards, dtype=np.float64) if numeric(rewards) else None
    if y is None or y.shape != (n,):
        raise AgentError(f"rewards must be {n} numbers, got {rewards!r:.80}")
    return x, y


def check_prefix(prefix: Any, width: int, dim: int) -> np.ndarray:
    """A synced prefix: ``width`` = d(d+1)/2 + d finite numbers, float64."""
    p = np.asarray(prefix, dtype=np.float64) if numeric(prefix) else None
    if p is None or p.shape != (width,) or not np.isfinite(p).all():
        raise AgentError(f"prefix must be {width} finite numbers (d(d+1)/2 + d, d = {dim}), got {prefix!r:.80}")
    return p


def user_key(name: str, value: object, secret: bytes) -> str:
    """The key an agent counts a user's contributions under: a keyed digest (BLAKE2b keyed with the
    agent's ``secret``) of the id -- an integer >= 0 or a non-empty string of at most
    :data:`MAX_USER_ID` characters, compared as text: 7 and "7" are one user.  The raw ids are never
    stored, and without the secret a digest cannot be matched to an id by enumerating ids."""
    if isinstance(value, bool) or not isinstance(value, int | str | np.integer):
        raise AgentError(f"{name} must be an integer >= 0 or a string, got {value!r:.80}")
    if not isinstance(value, str):
        if int(value) < 0:
            raise AgentError(f"{name} must be an integer >= 0 or a string, got {int(value)}")
        if int(value) >= _TOO_LONG:
            raise AgentError(f"{name} must be 1 to {MAX_USER_ID} characters long (an integer below 10^{MAX_USER_ID})")
    text = value if isinstance(value, str) else str(int(value))
    if not 1 <= len(text) <= MAX_USER_ID:
        raise AgentError(f"{name} must be 1 to {MAX_USER_ID} characters long, got {len(text)}")
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16, key=secret).hexdigest()
