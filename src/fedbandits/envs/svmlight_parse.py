"""Parsing one block of svmlight / LETOR lines into rows (a :class:`_Chunk`), for
:func:`fedbandits.envs.svmlight.read_svmlight`.

Two parsers that must agree on every input (tests/test_ltr.py fuzzes this): the strict one reads
line by line and names the first bad line; the vectorised one reads a well-formed block fast and
gives up (None) on anything that does not fit, and the block is then re-read by the strict one.
The grammar is in the :mod:`fedbandits.envs.svmlight` docstring ("File format").
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_FEATURE_INDEX = 1_000_000
_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_DIGITS = re.compile(rb"[0-9]+\Z")
# byte classes of the vectorised token check: digit, number character, whitespace, colon, other
_CLASS = np.full(256, 4, dtype=np.uint8)
_CLASS[list(b"0123456789")] = 0
_CLASS[list(b"eE+-.")] = 1
_CLASS[list(b" \t\r\x0b\x0c")] = 2
_CLASS[ord(":")] = 3
_TO_SPACE = bytes.maketrans(b":\t\r\x0b\x0c", b"     ")
_LINE_SHOWN = 120


@dataclass
class _Chunk:
    labels: np.ndarray  # float64 (n,)
    qids: np.ndarray  # int64 (n,)
    lines: np.ndarray  # int64 (n,) physical line numbers
    pairs: np.ndarray  # int64 (n,) index:value pairs per line
    features: np.ndarray  # float32 (n, width)
    max_index: int
    comment_lines: int
    blank_lines: int


class _LineError(ValueError):
    pass


def _fail(file: Path, lineno: int, line: bytes, what: str, unterminated_last: bool = False) -> ValueError:
    shown = line.rstrip(b"\r\n").decode("latin-1")
    if len(shown) > _LINE_SHOWN:
        shown = shown[:_LINE_SHOWN] + "..."
    hint = " (the file ends without a newline here: was it cut mid-line?)" if unterminated_last else ""
    return ValueError(f"{file}, line {lineno}: {what}{hint}: {shown!r}")


def _strict_number(token: bytes, what: str) -> float:
    if not _NUMBER.match(token):
        raise _LineError(f"{what} {token.decode('latin-1')!r} is not a decimal number")
    value = float(token)
    if not math.isfinite(value):
        raise _LineError(f"{what} {token.decode('latin-1')!r} is not finite")
    return value


def _strict_line(line: bytes) -> tuple[float, int, list[int], list[float]] | None:
    """One line by the grammar of the :mod:`fedbandits.envs.svmlight` docstring; None for a blank or comment line.

    Fields are separated by ASCII whitespace (space, tab, CR, VT, FF).
    """
    tokens = line.split(b"#", 1)[0].split()
    if not tokens:
        return None
    label = _strict_number(tokens[0], "label")
    if label < 0:
        raise _LineError(f"label {tokens[0].decode('latin-1')!r} is negative")
    if len(tokens) < 2 or not tokens[1].startswith(b"qid:"):
        raise _LineError("the second field must be 'qid:<query id>'")
    qid_text = tokens[1][4:]
    if not _DIGITS.match(qid_text) or int(qid_text) >= 2**63:
        raise _LineError(f"query id {qid_text.decode('latin-1')!r} is not a non-negative 64-bit integer")
    indices: list[int] = []
    values: list[float] = []
    prev = 0
    for token in tokens[2:]:
        index_text, sep, value_text = token.partition(b":")
        if not sep or b":" in value_text:
            raise _LineError(f"feature {token.decode('latin-1')!r} is not 'index:value'")
        if not _DIGITS.match(index_text):
            raise _LineError(f"feature index {index_text.decode('latin-1')!r} is not a positive integer")
        index = int(index_text)
        if not 1 <= index <= MAX_FEATURE_INDEX:
            raise _LineError(f"feature index {index} is outside [1, {MAX_FEATURE_INDEX}]")
        if index <= prev:
            raise _LineError(f"feature indices must increase strictly ({prev} then {index})")
        prev = index
        values.append(_strict_number(value_text, f"value of feature {index}"))
        indices.append(index)
    return label, int(qid_text), indices, values


def _fill(n: int, line_of: np.ndarray, idx: np.ndarray, val: np.ndarray, colmap: np.ndarray | None) -> np.ndarray:
    """Dense (n, width) float32 rows from pairs (line_of, 1-based idx, val) and the column map."""
    if colmap is None:
        out = np.zeros((n, int(idx.max()) if idx.size else 0), dtype=np.float32)
        out[line_of, idx - 1] = val
        return out
    out = np.zeros((n, int(colmap.max()) + 1), dtype=np.float32)
    inside = idx < colmap.size
    target = np.full(idx.size, -1, dtype=np.int64)
    target[inside] = colmap[idx[inside]]
    keep = target >= 0
    out[line_of[keep], target[keep]] = val[keep]
    return out


def _fill_rectangular(idx: np.ndarray, val: np.ndarray, colmap: np.ndarray | None) -> np.ndarray:
    """:func:`_fill` for (n, p) pairs; a column gather when every row has the same indices."""
    n, p = idx.shape
    if not (idx == idx[0]).all():
        return _fill(n, np.repeat(np.arange(n), p), idx.ravel(), val.ravel(), colmap)
    first = idx[0]
    if colmap is None:
        out = np.zeros((n, int(first[-1])), dtype=np.float32)
        out[:, first - 1] = val
        return out
    out = np.zeros((n, int(colmap.max()) + 1), dtype=np.float32)
    target = np.full(p, -1, dtype=np.int64)
    inside = first < colmap.size
    target[inside] = colmap[first[inside]]
    keep = np.flatnonzero(target >= 0)
    out[:, target[keep]] = val[:, keep]
    return out


def _parse_chunk_strict(
    lines: list[bytes], first: int, colmap: np.ndarray | None, file: Path, unterminated: bool
) -> _Chunk:
    labels: list[float] = []
    qids: list[int] = []
    linenos: list[int] = []
    pairs: list[int] = []
    line_of: list[int] = []
    idx: list[int] = []
    val: list[float] = []
    comments = blanks = 0
    last = first + len(lines) - 1
    for lineno, line in enumerate(lines, start=first):
        try:
            parsed = _strict_line(line)
        except _LineError as exc:
            raise _fail(file, lineno, line, str(exc), unterminated and lineno == last) from None
        has_comment = b"#" in line
        comments += has_comment
        if parsed is None:
            blanks += not has_comment
            continue
        label, qid, i, v = parsed
        line_of.extend([len(labels)] * len(i))
        labels.append(label)
        qids.append(qid)
        linenos.append(lineno)
        pairs.append(len(i))
        idx.extend(i)
        val.extend(v)
    idx_a = np.array(idx, dtype=np.int64)
    return _Chunk(
        labels=np.array(labels, dtype=np.float64),
        qids=np.array(qids, dtype=np.int64),
        lines=np.array(linenos, dtype=np.int64),
        pairs=np.array(pairs, dtype=np.int64),
        features=_fill(len(labels), np.array(line_of, dtype=np.int64), idx_a, np.array(val), colmap),
        max_index=int(idx_a.max()) if idx_a.size else 0,
        comment_lines=comments,
        blank_lines=blanks,
    )


def _pairs_well_formed(text: bytes) -> bool:
    """Whether ``text`` is whitespace-separated tokens ``digits:value``, value non-empty of [0-9eE+-.].

    Vectorised over the bytes: a non-digit must be whitespace, a colon or a number character;
    a colon must follow whitespace with at least one digit in between and be followed by a digit
    or number character; a number character's nearest preceding non-number character must be a
    colon (it is part of a value); and two whitespace characters must not enclose digits only (a
    token without colon).  Whether values are valid numbers is left to the number parser.
    """
    cls = _CLASS[np.frombuffer(b" " + text + b" ", dtype=np.uint8)]
    pos = np.flatnonzero(cls)
    kind = cls[pos]
    if (kind == 4).any():
        return False
    colon = np.flatnonzero(kind == 3)
    if colon.size:
        before = colon - 1  # colon > 0: the padding space comes first
        if (kind[before] != 2).any() or (pos[colon] - pos[before] < 2).any() or (cls[pos[colon] + 1] > 1).any():
            return False
    number = kind == 1
    if number.any():
        last_other = np.maximum.accumulate(np.where(number, 0, np.arange(kind.size)))
        if (kind[last_other[number]] != 3).any():
            return False
    space = kind == 2
    both = space[:-1] & space[1:]
    return not (both & (np.diff(pos) > 1)).any()


def _parse_chunk_fast(lines: list[bytes], first: int, colmap: np.ndarray | None) -> _Chunk | None:
    """Vectorised parse of a block of lines; None when anything looks off (then the strict parser
    re-reads the block and either raises on the first bad line or returns the same result)."""
    fields = _split_fields(lines, first)
    if fields is None:
        return None
    labels, qids, rests, linenos, comments, blanks = fields
    pairs = np.array([r.count(b":") for r in rests], dtype=np.int64)
    heads = _parse_heads(labels, qids)
    if heads is None:
        return None
    label, qid = heads
    joined = b" ".join(rests)
    if joined.strip() and not _pairs_well_formed(joined):
        return None
    filled = _fill_pairs(rests, joined, pairs, colmap)
    if filled is None:
        return None
    features, max_index = filled
    return _Chunk(
        labels=label,
        qids=qid,
        lines=np.array(linenos, dtype=np.int64),
        pairs=pairs,
        features=features,
        max_index=max_index,
        comment_lines=comments,
        blank_lines=blanks,
    )


def _split_fields(
    lines: list[bytes], first: int
) -> tuple[list[bytes], list[bytes], list[bytes], list[int], int, int] | None:
    """The data lines' (labels, query ids after ``qid:``, the rest of each line, line numbers) and the
    counts of comment and blank lines; None when a data line's second field is not ``qid:...``."""
    labels: list[bytes] = []
    qids: list[bytes] = []
    rests: list[bytes] = []
    linenos: list[int] = []
    comments = blanks = 0
    for lineno, line in enumerate(lines, start=first):
        cut = line.find(b"#")
        if cut >= 0:
            comments += 1
            line = line[:cut]
        parts = line.split(None, 2)
        if not parts:
            blanks += cut < 0
            continue
        if len(parts) < 2 or not parts[1].startswith(b"qid:"):
            return None
        labels.append(parts[0])
        qids.append(parts[1][4:])
        rests.append(parts[2] if len(parts) > 2 else b"")
        linenos.append(lineno)
    return labels, qids, rests, linenos, comments, blanks


def _parse_heads(labels: list[bytes], qids: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """Labels (float64) and query ids (int64) of the data lines; None unless every label is a
    finite non-negative number and every query id a non-negative 64-bit integer."""
    if b" ".join(labels).translate(None, b"0123456789eE+-. ") or b" ".join(qids).translate(None, b"0123456789 "):
        return None
    try:
        label = np.array([float(t) for t in labels], dtype=np.float64)
        qid = np.array([int(t) for t in qids], dtype=np.int64)
    except (ValueError, OverflowError):
        return None
    if labels and (not np.isfinite(label).all() or label.min() < 0):
        return None
    return label, qid


def _fill_pairs(
    rests: list[bytes], joined: bytes, pairs: np.ndarray, colmap: np.ndarray | None
) -> tuple[np.ndarray, int] | None:
    """Dense feature rows of the lines' ``index:value`` pairs (``rests``, ``pairs`` per line, ``joined``
    by spaces) and their largest index; None when the numbers do not read, an index is outside
    [1, MAX_FEATURE_INDEX], a value is not finite or a line's indices do not increase strictly."""
    n = len(rests)
    total = int(pairs.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _fill(n, empty, empty, np.zeros(0), colmap), 0
    width = int(pairs[0])
    rectangular = bool((pairs == width).all())
    nums = _pair_numbers(rests, joined, width if rectangular else None, total)
    if nums is None:
        return None
    idx_f = nums[..., 0::2]
    val = nums[..., 1::2]
    if idx_f.min() < 1 or idx_f.max() > MAX_FEATURE_INDEX or not np.isfinite(val).all():
        return None
    idx = idx_f.astype(np.int64)
    max_index = int(idx.max())
    if rectangular:
        if width > 1 and (np.diff(idx, axis=1) <= 0).any():
            return None
        return _fill_rectangular(idx, val, colmap), max_index
    line_of = np.repeat(np.arange(n, dtype=np.int64), pairs)
    if ((np.diff(idx) <= 0) & (line_of[1:] == line_of[:-1])).any():
        return None
    return _fill(n, line_of, idx, val, colmap), max_index


def _pair_numbers(rests: list[bytes], joined: bytes, width: int | None, total: int) -> np.ndarray | None:
    """The numbers of the ``total`` pairs, index then value: (n, 2 width) when every line has
    ``width`` pairs (one fast 2-d read), else flat; None when they do not read as that many numbers."""
    try:
        if width is not None:  # every line has the same number of pairs: one fast 2-d read
            text = b"\n".join(rests).translate(_TO_SPACE).decode("latin-1")
            nums = np.loadtxt(io.StringIO(text), dtype=np.float64, ndmin=2)
            if nums.shape != (len(rests), 2 * width):
                return None
        else:
            nums = np.fromstring(joined.translate(_TO_SPACE), sep=" ")
            if nums.size != 2 * total:
                return None
    except ValueError:
        return None
    return nums
