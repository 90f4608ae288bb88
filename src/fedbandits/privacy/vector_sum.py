"""Shuffle-model vector summation of Cheu et al. (2021), P_vec (Zhou & Chowdhury 2023, App. F.2).

The protocol sums ``n`` data points ``x_i`` in R^D with ``|x_ij| <= L`` per coordinate (the
caller clips; ``L`` is ``bound`` here).  Algorithm 6 (R_vec, A_vec) runs the scalar protocol
Algorithm 7 (R_1D, A_1D) on every coordinate:

* randomizer, per point i and coordinate j: shift ``w = x_ij + L``, so ``w`` lies in
  ``[0, range]`` with ``range = 2 L``; fixed-point encode ``xbar = floor(w g / range)``;
  stochastic rounding ``eta1 ~ Ber(w g / range - xbar)``; privacy noise ``eta2 ~ Bin(b, p)``;
  report ``g + b`` bits of which ``xhat + eta2`` are ones (``xhat = xbar + eta1``);
* shuffler: a uniformly random permutation of all messages of all points;
* analyzer, per coordinate: ``(range / g) * (ones - p b n) - n L``.

**The range is 2L, not L.**  Algorithm 7 is stated for scalars in ``[0, L]`` and Algorithm 6
applies it to the shifted ``w = x + L``, which lies in ``[0, 2L]``.  Taking the paper's formulas
literally (``xbar = floor(w g / L)``) would give ``xbar`` up to ``2 g``, more ones than the ``g + b``
bits hold, and an analyzer scale of ``L / g`` for a code whose step is ``2L / g``.  Here the
scalar protocol's range is ``range = 2 * bound`` everywhere: in the randomizer's encoding
(``xbar`` in ``[0, g]``), in the analyzer's scale ``range / g`` and in the variances.

Output: ``E[o_j] = sum_i x_ij`` (unbiased) and, per coordinate,
``Var(o_j) = (range/g)^2 * (n b p (1-p) + sum_i f_ij (1 - f_ij))`` with ``f_ij`` the fractional part
of ``w_ij g / range`` (:func:`vector_sum_variance`).

Message representation (design note)
------------------------------------
In Cheu et al. every one of the ``g + b`` bits of a report is sent as its own message labelled
by its coordinate, ``(j, bit)``; the shuffler permutes all ``n D (g + b)`` of them.  The server
therefore receives a uniformly random ordering of the multiset of labelled bits.  Given the
multiset, that ordering is uniform whatever the data, so it carries no information: the
server's view is equivalent to the multiset, and a multiset of labelled bits is determined by,
for each coordinate j, the number of ``(j, 1)`` messages ``T_j`` (the number of ``(j, 0)``
messages is ``n (g + b) - T_j``, with ``n``, ``g``, ``b`` public).  ``T = (T_1..T_D)`` is exactly
the server's information and the analyzer is a function of ``T`` alone.

Materialising the bits is impossible at the calibrated sizes (``b`` is often millions: ``n D b``
bits).  Because the order of bits inside a report is arbitrary (Algorithm 7 only fixes how many
are ones), a report is represented *losslessly* by one message ``(j, c)`` with ``c`` its count of
ones, standing for ``width = g + b`` bit messages: ``n D`` messages, O(n D) memory.  This does not
weaken what the server may see: the bit-level view is recovered exactly (in distribution) from
the count messages by expanding each ``(j, c)`` into ``c`` ones and ``width - c`` zeros labelled j
and shuffling (:func:`expand_bits`), so everything the Cheu server can compute can be computed
from them, and the analyzer reads only ``T``, which both views determine identically.  Caveat:
the converse does not hold: the count messages also group the bits by (sender, coordinate),
and one ``c_ij`` reveals one point's ``xhat_ij + eta2_ij`` behind a single ``Bin(b, p)``.  They are
a simulation device: the privacy guarantee is that of the bit-level protocol, whose view is
``T``; a deployment must send bits (or anything else whose shuffled view is ``T``).

Both forms share the randomizer's rounding step (:func:`_stochastic_round`), so they have the
same output distribution, not merely the same moments:

* message level: :class:`VectorSumProtocol` (``randomize`` -> :func:`shuffle` -> ``analyze``);
* fast: :func:`vector_sum_fast` samples ``T`` directly: the rounding sum per coordinate from the
  same rounding kernel (same random stream, so with the same seed it equals the message
  level's rounding sum exactly), plus one ``Bin(n b, p)`` draw per coordinate, which is the law
  of the sum of the ``n`` independent ``Bin(b, p)`` noise draws.

Rounding is exact Bernoulli sampling: ``eta1 = 1`` iff ``U < f`` with ``U`` uniform on [0, 1) at
2^-61 resolution, built as ``U = (r + V) / 256`` from one random byte ``r`` per entry and, only in
the 1/256 of entries where the byte is inconclusive, a 53-bit uniform ``V``.  So
``P(eta1 = 1) = ceil(f 2^61) / 2^61``: exactly ``f`` whenever ``f`` is a multiple of 2^-61, which
holds for every code ``w g / range >= 1/256`` (below that, off by less than 2^-61).  This costs
an eighth of the random bits of one float64 uniform per entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_float, check_int

__all__ = [
    "Messages",
    "ShuffledMessages",
    "VectorSumProtocol",
    "expand_bits",
    "rounding_fractions",
    "shuffle",
    "vector_sum_fast",
    "vector_sum_variance",
]

_MAX_G = 2**31  # 256 g + 255 stays an exact float64 integer with lots of room
_MAX_BITS = 2**53  # n (g + b): ones per coordinate must be exact in float64 and int64
_MAX_NOISE_TRIALS = 2**62  # n b: binomial trials of the fast form, in int64
_CHUNK_ELEMENTS = 1 << 15  # entries per rounding block: 256 kB per float64 buffer, stays in L2
_TIE = 255.0 / 256.0


# --------------------------------------------------------------------------------------------
# validation


def _check_params(g: object, b: object, p: object, bound: object) -> tuple[int, int, float, float]:
    gi = check_int("g", g, low=1, high=_MAX_G)
    bi = check_int("b", b, low=0)
    pf = check_float("p", p, low=0.0, high=0.5, low_open=True, high_open=True)
    bf = check_float("bound", bound, low=0.0, low_open=True)
    return gi, bi, pf, bf


def _check_size(n: int, g: int, b: int) -> None:
    if n * (g + b) > _MAX_BITS:
        raise ValueError(f"b must keep n * (g + b) <= 2**53 so that counts of ones are exact, got n={n}, g={g}, b={b}")


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _check_points(points: object, bound: float) -> np.ndarray:
    """``points`` as a float64 array of shape (n, D), D >= 1, finite, ``|x| <= bound``."""
    try:
        x = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"points must be a real array of shape (n, D): {exc}") from None
    if x.ndim != 2:
        raise ValueError(f"points must be a 2-D array of shape (n, D), got shape {x.shape}")
    if x.shape[1] < 1:
        raise ValueError(f"points must have D >= 1 coordinates, got shape {x.shape}")
    if x.size:
        lo, hi = float(x.min()), float(x.max())  # NaN propagates, so one test catches everything
        if not (lo >= -bound and hi <= bound):
            if not np.isfinite(x).all():
                bad = int(x.size - np.count_nonzero(np.isfinite(x)))
                raise ValueError(f"points must be finite, got {bad} NaN or infinite entries")
            worst = max(-lo, hi)
            raise ValueError(f"points must satisfy |x| <= bound = {bound} (clip first), got |x| = {worst}")
    return x


# --------------------------------------------------------------------------------------------
# the randomizer's fixed-point encoding and stochastic rounding


def _code_scale(g: int, bound: float) -> float:
    """The largest double ``k`` with ``fl(2 bound * k) <= 256 g``; ``k = 256 g / range`` to within an ulp."""
    top = 256.0 * g
    k = top / (2.0 * bound)
    while 2.0 * bound * k > top:
        k = float(np.nextafter(k, 0.0))
    return k


def _scaled_codes(x: np.ndarray, bound: float, scale: float, out: np.ndarray) -> np.ndarray:
    """``out = 256 * w g / range`` (``scale`` from :func:`_code_scale`), exactly within ``[0, 256 g]``.

    ``x + L`` lies in ``[0, 2L]`` and rounding is monotone, so ``out <= fl(2L * scale) <= 256 g``;
    scaling by 256 is exact, so ``out / 256`` is the code ``w g / range`` of Algorithm 7 to
    within float64 rounding (relative error ~2^-52, far below the sampling noise).
    """
    np.add(x, bound, out=out)
    out *= scale
    return out


_FULL_64_BIT = (np.random.PCG64, np.random.PCG64DXSM, np.random.SFC64, np.random.Philox)


def _random_bytes(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` independent uniform bytes from ``rng``'s stream.

    Raw 64-bit outputs are 2.5 times cheaper than ``Generator.bytes`` but are full-width only
    for the bit generators listed in ``_FULL_64_BIT`` (MT19937's raw outputs are 32-bit).
    """
    if isinstance(rng.bit_generator, _FULL_64_BIT):
        return rng.bit_generator.random_raw(-(-count // 8)).view(np.uint8)[:count]
    return np.frombuffer(rng.bytes(count), dtype=np.uint8)


def _stochastic_round(
    x: np.ndarray, g: int, bound: float, rng: np.random.Generator, points_out: np.ndarray | None = None
) -> np.ndarray:
    """Per coordinate ``sum_i xhat_ij`` where ``xhat = floor(c) + Ber(frac(c))``, ``c = w g / range``.

    Rounding is done in blocks of rows (a loop over blocks, not points) so the temporaries stay
    in cache.  Per entry, with ``s = 256 c`` (exact scaling), ``F = floor(s)`` and a uniform
    byte ``r``: ``xhat = floor((F + r + C) / 256)`` where ``C ~ Ber(s - F)``.  That is
    ``floor(c + U)`` with ``U = (r + V) / 256``, i.e. stochastic rounding, and ``C`` matters only
    when ``(F + r) mod 256 = 255`` (probability 1/256), so ``V`` is drawn only there.  If
    ``points_out`` (int64, shape of ``x``) is given, the per-point ``xhat`` are written to it.
    The random stream consumed depends only on ``x.shape``: both protocol forms call this
    with the same stream and get the same rounding.
    """
    n, dim = x.shape
    total = np.zeros(dim, dtype=np.float64)
    if n == 0:
        return total.astype(np.int64)
    rows = max(1, min(n, _CHUNK_ELEMENTS // dim))
    code = np.empty((rows, dim))
    floor_code = np.empty((rows, dim))
    quotient = np.empty((rows, dim))
    rounded = np.empty((rows, dim))
    is_tie = np.empty((rows, dim), dtype=bool)
    ones = np.ones(rows)
    scale = _code_scale(g, bound)
    for start in range(0, n, rows):
        m = min(rows, n - start)
        s, f, q, a, tie = code[:m], floor_code[:m], quotient[:m], rounded[:m], is_tie[:m]
        _scaled_codes(x[start : start + m], bound, scale, s)
        np.floor(s, out=f)  # F, an integer in [0, 256 g]
        byte = _random_bytes(rng, m * dim).reshape(m, dim)
        np.add(f, byte, out=q)  # F + r, exact
        q *= 1.0 / 256.0  # exact
        np.floor(q, out=a)  # floor((F + r) / 256)
        np.subtract(q, a, out=q)  # ((F + r) mod 256) / 256, exact
        np.equal(q, _TIE, out=tie)
        ties = np.flatnonzero(tie)
        if ties.size:
            carry_prob = s.reshape(-1)[ties] - f.reshape(-1)[ties]  # s - F in [0, 1), exact
            carried = ties[rng.random(ties.size) < carry_prob]
            a.reshape(-1)[carried] += 1.0
        if points_out is not None:
            points_out[start : start + m] = a
        total += ones[:m] @ a  # integer-valued float64 sums < 2**53: exact in any order
    return total.astype(np.int64)


def rounding_fractions(points: object, g: int, bound: float) -> np.ndarray:
    """Fractional parts ``f_ij`` of the codes ``w_ij g / range``: the ``Ber`` parameters of ``eta1``.

    Shape (n, D).  Feed them to :func:`vector_sum_variance` for the exact data-dependent variance.
    """
    gi = check_int("g", g, low=1, high=_MAX_G)
    bf = check_float("bound", bound, low=0.0, low_open=True)
    x = _check_points(points, bf)
    code = _scaled_codes(x, bf, _code_scale(gi, bf), np.empty_like(x))
    code *= 1.0 / 256.0  # exact
    return code - np.floor(code)


# --------------------------------------------------------------------------------------------
# messages and the shuffler


@dataclass(frozen=True, eq=False)
class Messages:
    """Randomizer output in sender order: message k is ``(coords[k], ones[k])``.

    Each message stands for ``width`` bit messages labelled ``coords[k]``, ``ones[k]`` of them 1
    (``width = g + b`` for count messages, 1 for single bits).  There is no sender field; before
    shuffling the position in the list still reveals the sender, so only :func:`shuffle`'s
    output (:class:`ShuffledMessages`) may be given to the analyzer.
    """

    coords: np.ndarray
    ones: np.ndarray
    width: int

    def __post_init__(self) -> None:
        coords = np.asarray(self.coords)
        ones = np.asarray(self.ones)
        if coords.ndim != 1 or coords.dtype.kind not in "iu":
            raise ValueError(f"coords must be a 1-D integer array, got shape {coords.shape} dtype {coords.dtype}")
        if ones.shape != coords.shape or ones.dtype.kind not in "iu":
            raise ValueError(
                f"ones must be a 1-D integer array of the same length as coords ({coords.size}), "
                f"got shape {ones.shape} dtype {ones.dtype}"
            )
        check_int("width", self.width, low=1)
        object.__setattr__(self, "coords", coords)
        object.__setattr__(self, "ones", ones)

    def __len__(self) -> int:
        return int(self.coords.size)


class ShuffledMessages(Messages):
    """Messages after the shuffler: a uniformly random order, all the server ever receives."""


def shuffle(messages: Messages, rng: np.random.Generator) -> ShuffledMessages:
    """The shuffler S: a uniformly random permutation of the message list (Fisher-Yates)."""
    if not isinstance(messages, Messages):
        raise ValueError(f"messages must be Messages, got {type(messages).__name__}")
    perm = _check_rng(rng).permutation(len(messages))
    return ShuffledMessages(messages.coords[perm], messages.ones[perm], messages.width)


def expand_bits(messages: Messages, rng: np.random.Generator) -> ShuffledMessages:
    """The literal Cheu et al. server view: every bit its own message ``(j, bit)``, shuffled.

    Message ``(j, c)`` of width w becomes c messages ``(j, 1)`` and ``w - c`` messages ``(j, 0)``.
    Memory is ``len(messages) * width``: for checking the design note on small cases only.
    """
    if not isinstance(messages, Messages):
        raise ValueError(f"messages must be Messages, got {type(messages).__name__}")
    w = messages.width
    coords = np.repeat(messages.coords, w)
    position = np.tile(np.arange(w), len(messages))
    bits = (position < np.repeat(messages.ones, w)).astype(np.int64)
    return shuffle(Messages(coords, bits, 1), rng)


# --------------------------------------------------------------------------------------------
# the protocol


def _decode(ones: np.ndarray, n: int, g: int, b: int, p: float, bound: float) -> np.ndarray:
    """A_vec from the per-coordinate counts of ones: ``(range/g) (T - p b n) - n L``."""
    return (2.0 * bound / g) * (ones.astype(np.float64) - p * b * n) - n * bound


class VectorSumProtocol:
    """Message-level P_vec with parameters ``g`` (grid), ``b``, ``p`` (noise) and ``bound`` (L).

    ``g >= 1`` and ``b >= 0`` integers, ``p`` in (0, 1/2), ``bound > 0``; ``n (g + b) <= 2^53``.
    The calibration of Zhou & Chowdhury (2023), App. F.2, for ``(eps, delta)`` per run is
    ``g = max(2 sqrt(n), d, 4)``, ``b = 24e4 g^2 log(4 (d^2 + 1) / delta)^2 / (eps^2 n)``, ``p = 1/4``.
    """

    def __init__(self, g: int, b: int, p: float, bound: float) -> None:
        self.g, self.b, self.p, self.bound = _check_params(g, b, p, bound)

    @property
    def width(self) -> int:
        """Bits per report, ``g + b``."""
        return self.g + self.b

    def __repr__(self) -> str:
        return f"VectorSumProtocol(g={self.g}, b={self.b}, p={self.p}, bound={self.bound})"

    def randomize(self, points: object, rng: np.random.Generator) -> Messages:
        """R_vec applied to every point: ``n D`` count messages in sender-major order.

        Message ``i D + j`` is point i's report for coordinate j, ``(j, xhat_ij + eta2_ij)``.
        """
        x = _check_points(points, self.bound)
        rng = _check_rng(rng)
        n, dim = x.shape
        _check_size(n, self.g, self.b)
        ones = np.empty((n, dim), dtype=np.int64)
        _stochastic_round(x, self.g, self.bound, rng, points_out=ones)
        ones += rng.binomial(self.b, self.p, size=(n, dim))
        coords = np.tile(np.arange(dim, dtype=np.int64), n)
        return Messages(coords, ones.reshape(-1), self.width)

    def analyze(self, messages: ShuffledMessages, n: int, dim: int) -> np.ndarray:
        """A_vec on the shuffled messages of ``n`` points of dimension ``dim`` (public numbers).

        Reads only the per-coordinate totals of ones, so the result does not depend on the order
        of the messages, nor on whether they are count messages or single bits.
        """
        if not isinstance(messages, ShuffledMessages):
            raise ValueError(
                f"messages must be ShuffledMessages (the shuffler's output), got {type(messages).__name__}"
            )
        n = check_int("n", n, low=0)
        dim = check_int("dim", dim, low=1)
        _check_size(n, self.g, self.b)
        w = messages.width
        if self.width % w or len(messages) * w != n * dim * self.width:
            raise ValueError(
                f"messages must carry n * dim * (g + b) = {n * dim * self.width} bits in messages of a width "
                f"dividing g + b = {self.width}, got {len(messages)} messages of width {w}"
            )
        if len(messages):
            if messages.coords.min() < 0 or messages.coords.max() >= dim:
                raise ValueError(f"messages must have coordinate labels in [0, {dim - 1}]")
            if messages.ones.min() < 0 or messages.ones.max() > w:
                raise ValueError(f"messages must have counts of ones in [0, {w}]")
            per_coord = np.bincount(messages.coords, minlength=dim)
            if (per_coord != n * self.width // w).any():
                raise ValueError(f"messages must have {n * self.width // w} messages per coordinate")
        # float64 weights hold the integer totals (<= n (g + b) <= 2**53) exactly
        totals = np.bincount(messages.coords, weights=messages.ones, minlength=dim).astype(np.int64)
        return _decode(totals, n, self.g, self.b, self.p, self.bound)

    def run(self, points: object, rng: np.random.Generator) -> np.ndarray:
        """The whole protocol: randomize every point, shuffle all messages, analyze."""
        x = _check_points(points, self.bound)
        messages = self.randomize(x, rng)
        return self.analyze(shuffle(messages, rng), *x.shape)

    def fast(self, points: object, rng: np.random.Generator) -> np.ndarray:
        """:func:`vector_sum_fast` with this protocol's parameters."""
        return vector_sum_fast(points, self.g, self.b, self.p, self.bound, rng)

    def variance(self, n: int, fractions: object = None) -> float | np.ndarray:
        """:func:`vector_sum_variance` with this protocol's parameters."""
        return vector_sum_variance(n, self.g, self.b, self.p, self.bound, fractions=fractions)


def vector_sum_fast(points: object, g: int, b: int, p: float, bound: float, rng: np.random.Generator) -> np.ndarray:
    """P_vec's output for ``points`` (n, D), sampled without materialising messages.

    Same distribution as ``VectorSumProtocol(g, b, p, bound).run(points, rng)``: the analyzer's
    count of ones per coordinate is ``sum_i xhat_ij`` (the shared rounding kernel) plus
    ``sum_i eta2_ij ~ Bin(n b, p)``, one draw per coordinate.  Cost O(n D) with about 1 random
    byte per entry; ``n = 22 500``, ``D = 65`` takes a few milliseconds.
    """
    gi, bi, pf, bf = _check_params(g, b, p, bound)
    x = _check_points(points, bf)
    rng = _check_rng(rng)
    n, dim = x.shape
    if n * gi > _MAX_BITS:
        raise ValueError(f"g must keep n * g <= 2**53 so that rounding counts are exact, got n={n}, g={gi}")
    if n * bi > _MAX_NOISE_TRIALS:
        raise ValueError(f"b must keep n * b <= 2**62 (binomial trials in int64), got n={n}, b={bi}")
    totals = _stochastic_round(x, gi, bf, rng)
    # the noise count Bin(n b, p) can exceed 2**53; centre it in exact integer arithmetic first
    # so that only a number of the order of its standard deviation is converted to float
    trials = n * bi
    mean = trials * pf
    base = math.floor(mean)
    noise = (rng.binomial(trials, pf, size=dim) - np.int64(base)).astype(np.float64) - (mean - base)
    return (2.0 * bf / gi) * (totals + noise) - n * bf  # A_vec: (range/g)(T - p b n) - n L


def vector_sum_variance(
    n: int, g: int, b: int, p: float, bound: float, *, fractions: object = None
) -> float | np.ndarray:
    """Variance of P_vec's output per coordinate (Cheu et al. 2021; App. F.2).

    With ``step = range / g = 2 bound / g`` the output is ``step * (sum_i xhat_i + Bin(n b, p))``
    minus constants, the terms independent, so

    ``Var = step^2 * (n b p (1 - p) + sum_i f_i (1 - f_i))``

    where ``f_i`` is point i's rounding fraction (:func:`rounding_fractions`).  Without
    ``fractions`` the worst case over data, ``f_i = 1/2``, is returned:
    ``step^2 * (n b p (1 - p) + n / 4)`` (a float, the same for every coordinate).  With
    ``fractions`` of shape (n,) or (n, D) the exact value is returned, of shape ``()`` or (D,).
    """
    n = check_int("n", n, low=0)
    gi, bi, pf, bf = _check_params(g, b, p, bound)
    step2 = (2.0 * bf / gi) ** 2
    noise = n * bi * pf * (1.0 - pf)
    if fractions is None:
        return step2 * (noise + n / 4.0)
    try:
        f = np.asarray(fractions, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"fractions must be a real array of shape (n,) or (n, D): {exc}") from None
    if f.ndim not in (1, 2) or f.shape[0] != n:
        raise ValueError(f"fractions must have shape (n,) or (n, D) with n = {n}, got {f.shape}")
    if not (np.isfinite(f).all() and (f >= 0.0).all() and (f < 1.0).all()):
        raise ValueError("fractions must lie in [0, 1)")
    rounding = (f * (1.0 - f)).sum(axis=0)
    return step2 * (noise + rounding)
