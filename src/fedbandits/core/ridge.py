"""Batched ridge-regression state: the statistics every LinUCB-type learner keeps.

For a batch of learners (leading shape ``batch``, e.g. ``(R, M)`` for R runs of
M agents) the state holds

* ``gram (*batch, d, d)``  V = lambda*I + sum_s x_s x_s^T (+ any synced/noisy matrix added),
* ``inv  (*batch, d, d)``  V^{-1}, kept by Sherman-Morrison on rank-1 updates and
  recomputed from a Cholesky factor whenever a whole matrix is added or set,
* ``bias (*batch, d)``     u = sum_s x_s y_s (+ synced vector),

so that theta-hat = V^{-1} u.  All arrays are float64.
"""

from __future__ import annotations

import numpy as np

from fedbandits.core.validation import check_array, check_float, check_int


class RidgeState:
    """Ridge statistics for a batch of independent learners."""

    def __init__(self, batch_shape: tuple[int, ...], dim: int, reg: float) -> None:
        self.dim = check_int("dim", dim, low=1)
        self.reg = check_float("reg", reg, low=0.0, low_open=True)
        self.batch_shape = tuple(check_int("batch_shape entry", b, low=1) for b in batch_shape)
        eye = np.eye(self.dim)
        self.gram = np.broadcast_to(self.reg * eye, (*self.batch_shape, dim, dim)).copy()
        self.inv = np.broadcast_to(eye / self.reg, (*self.batch_shape, dim, dim)).copy()
        self.bias = np.zeros((*self.batch_shape, dim))

    # -- queries ---------------------------------------------------------------------------
    def theta(self) -> np.ndarray:
        """theta-hat = V^{-1} u, shape ``(*batch, d)``."""
        return np.einsum("...ij,...j->...i", self.inv, self.bias)

    def logdet(self) -> np.ndarray:
        """log det V for every learner, shape ``batch`` (from a Cholesky factor)."""
        chol = np.linalg.cholesky(self.gram)
        return 2.0 * np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(axis=-1)

    # -- updates ---------------------------------------------------------------------------
    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        """Rank-1 update of every learner with feature ``x (*batch, d)`` and reward ``y batch``.

        Sherman-Morrison: (V + x x^T)^{-1} = V^{-1} - (V^{-1}x)(V^{-1}x)^T / (1 + x^T V^{-1} x).
        Inputs are validated before anything changes.
        """
        x = check_array("x", x, (*self.batch_shape, self.dim), dtype=np.float64)
        y = check_array("y", y, self.batch_shape, dtype=np.float64)
        self._update_unchecked(x, y)

    def _update_unchecked(self, x: np.ndarray, y: np.ndarray) -> None:
        u = np.einsum("...ij,...j->...i", self.inv, x)
        denom = 1.0 + np.einsum("...i,...i->...", x, u)
        u_scaled = u / denom[..., None]
        self.inv -= u_scaled[..., :, None] * u[..., None, :]
        self.gram += x[..., :, None] * x[..., None, :]
        self.bias += x * y[..., None]

    def set(self, gram: np.ndarray, bias: np.ndarray) -> None:
        """Replace V and u (broadcast over the batch) and recompute V^{-1} by Cholesky.

        ``gram`` may be e.g. ``(R, 1, d, d)`` for R runs whose M agents share one matrix.

        Raises ``ValueError`` (state untouched) if any V is not symmetric positive definite.
        """
        gram = np.asarray(gram, dtype=np.float64)
        bias = np.asarray(bias, dtype=np.float64)
        try:
            fits = (
                np.broadcast_shapes(gram.shape, self.gram.shape) == self.gram.shape
                and np.broadcast_shapes(bias.shape, self.bias.shape) == self.bias.shape
            )
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"gram {gram.shape} and bias {bias.shape} must broadcast to {self.gram.shape} and {self.bias.shape}"
            )
        if not (np.isfinite(gram).all() and np.isfinite(bias).all()):
            raise ValueError("gram and bias must be finite")
        if np.abs(gram - np.swapaxes(gram, -1, -2)).max(initial=0.0) > 1e-10 * np.abs(gram).max(initial=1.0):
            raise ValueError("gram is not symmetric positive definite; cannot refresh the ridge inverse")
        # invert before broadcasting: learners sharing one matrix share one factorisation
        inv = spd_inverse(gram)
        self.gram[...] = gram
        self.bias[...] = bias
        self.inv[...] = inv


def spd_inverse(matrices: np.ndarray) -> np.ndarray:
    """Inverse of a batch of symmetric positive definite matrices via Cholesky.

    V = L L^T  =>  V^{-1} = L^{-T} L^{-1}.  Raises ``ValueError`` if any matrix is not
    positive definite (so callers can leave their state untouched).
    """
    try:
        chol = np.linalg.cholesky(matrices)
    except np.linalg.LinAlgError:
        raise ValueError("matrix is not positive definite; cannot refresh the ridge inverse") from None
    chol_inv = np.linalg.inv(chol)
    inv = np.matmul(np.swapaxes(chol_inv, -1, -2), chol_inv)
    # symmetrise exactly: the two triangles may differ in the last bit after matmul
    return 0.5 * (inv + np.swapaxes(inv, -1, -2))


def raise_eigenvalues(gram: np.ndarray, floor: float | np.ndarray) -> tuple[np.ndarray, int]:
    """Raise the eigenvalues of the symmetric matrices ``gram (..., d, d)`` below ``floor`` to it.

    ``floor``: a scalar or one value per matrix (shape ``gram.shape[:-2]``).  Returns the
    (possibly new) array and the number of matrices changed; ``gram`` itself is not modified.
    A Cholesky factor of ``gram - floor I`` certifies that every eigenvalue lies above the floor (the
    common case, when the regularizer covers the noise): the eigendecomposition runs only otherwise.
    """
    floor = np.broadcast_to(np.asarray(floor, dtype=np.float64), gram.shape[:-2])
    try:
        np.linalg.cholesky(gram - floor[..., None, None] * np.eye(gram.shape[-1]))
        return gram, 0
    except np.linalg.LinAlgError:
        pass
    eigval, eigvec = np.linalg.eigh(gram)
    bad = eigval.min(axis=-1) < floor
    if not bad.any():
        return gram, 0
    lifted = np.maximum(eigval[bad], floor[bad][:, None])
    fixed = (eigvec[bad] * lifted[:, None, :]) @ np.swapaxes(eigvec[bad], -1, -2)
    gram = gram.copy()
    gram[bad] = 0.5 * (fixed + np.swapaxes(fixed, -1, -2))
    return gram, int(bad.sum())


def rank_one_update(gram: np.ndarray, inv: np.ndarray, bias: np.ndarray, x: np.ndarray, y: float) -> None:
    """:meth:`RidgeState.update` of one learner in place (``gram, inv (d, d)``, ``bias (d,)``, ``x (d,)``):
    the same Sherman-Morrison operations without the batch axis, so the same numbers bit for bit
    (tests/test_online_parity.py checks it), at a third of the per-call overhead."""
    u = np.einsum("ij,j->i", inv, x)
    denom = 1.0 + np.einsum("i,i->", x, u)
    u_scaled = u / denom
    inv -= u_scaled[:, None] * u[None, :]
    gram += x[:, None] * x[None, :]
    bias += x * y
