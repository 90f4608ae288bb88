"""Streaming, validating reader of svmlight / LETOR files (``label qid:Q i:v i:v ... [# comment]``).

Flow: files -> :func:`read_svmlight` (here) -> ``ltr_instance.build_instance`` -> ``ltr.LearningToRank``.

One reader: this module streams the files in blocks and collects the queries;
:mod:`fedbandits.envs.svmlight_parse` parses each block -- a strict parser for the line-level error
messages and a fast vectorised one for well-formed blocks, which must agree on every input.
docs/data.md ("Why our own svmlight parser") gives the measured reasons not to use scikit-learn's.

File format
-----------
:func:`read_svmlight` streams svmlight / LETOR files (``label qid:Q i:v i:v ... [# comment]``)
in blocks (4 MiB by default; never the whole file) and validates every line.  A data line is a
label (a non-negative decimal number), ``qid:`` with a non-negative integer, then zero or more
``index:value`` pairs with strictly increasing indices in [1, 1,000,000] and finite decimal
values, separated by ASCII whitespace; missing indices are 0 (sparse and dense files alike).
Everything from the first ``#`` is a comment; blank and comment-only lines are skipped (and
counted).  LF or CRLF line ends, an optional UTF-8 byte-order mark and a missing final newline
are accepted.  The documents of a query must be contiguous and a query id may occur in one file
only (so several MSLR folds, which repeat the same queries, cannot be mixed by accident).
Anything else raises ``ValueError`` naming the file and the line.  Numbers are plain decimals:
no ``nan``/``inf``, hex or ``_``.

Each block is parsed by a vectorised reader (byte-class checks of the token structure, then
``numpy.loadtxt`` for blocks whose lines have equally many pairs, ``numpy.fromstring`` otherwise);
if anything in a block does not fit, the block is re-read line by line by the strict parser,
which either names the first bad line or returns exactly what the fast reader would have (the
tests check this equivalence on fuzzed input).  About 40-50 MB/s.

Truncated last query (option ``truncated_last_query``)
--------------------------------------------------------
The shared MSLR sample files are the first 5,000 lines of the real files, so their last query
is cut: it has fewer documents than the real query.  A file does not say whether it was cut,
so the rule is a documented heuristic.  ``"auto"`` (default) drops the last query of a file when

* the file has a positive multiple of 1,000 lines, all newline-terminated (what ``head -n N``
  with a round N leaves; the real MSLR-WEB10K / LETOR files have e.g. 723,412 lines), or
* the file ends without a newline and its last line has fewer ``index:value`` pairs than every
  earlier line, all of which have the same number (a dense file cut mid-line by ``head -c``).

``"drop"`` always drops the last query of every file; ``"keep"`` never does.  Every dropped
query is reported (file, qid, documents, first line, reason) in the returned summary and in
:meth:`fedbandits.envs.ltr.LearningToRank.instance_report`; nothing is dropped silently.  A real
file whose line count happens to be a multiple of 1,000 loses one complete query under ``"auto"``
(reported).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.core.validation import check_choice, check_int
from fedbandits.envs.svmlight_parse import (
    MAX_FEATURE_INDEX,
    _Chunk,
    _fail,
    _LineError,
    _parse_chunk_fast,
    _parse_chunk_strict,
    _strict_line,
)

TRUNCATION_RULES = ("auto", "drop", "keep")
#: "auto" truncation rule: a line count that is a positive multiple of this looks like ``head -n``
HEAD_LINES_MULTIPLE = 1000
_BOM = "\ufeff".encode()


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DroppedQuery:
    """A last query left out as (suspected) truncated."""

    file: str
    qid: int
    docs: int
    first_line: int
    reason: str


@dataclass(frozen=True)
class FileSummary:
    """What one file held."""

    file: str
    lines: int
    data_lines: int
    comment_lines: int
    blank_lines: int
    queries: int  # kept
    docs: int  # kept
    max_feature_index: int
    ends_with_newline: bool
    dropped: DroppedQuery | None


@dataclass(frozen=True)
class SvmlightData:
    """Parsed documents of one or more files, queries contiguous, in file order.

    features (n_docs, c) float32 with the chosen 1-based ``columns``; labels (n_docs,) float64;
    query q's documents are rows ``query_ptr[q]:query_ptr[q+1]``.
    """

    features: np.ndarray
    labels: np.ndarray
    columns: np.ndarray
    qids: np.ndarray
    query_ptr: np.ndarray
    query_file: np.ndarray
    query_line: np.ndarray
    files: tuple[FileSummary, ...]
    max_feature_index: int

    @property
    def n_docs(self) -> int:
        return int(self.labels.size)

    @property
    def n_queries(self) -> int:
        return int(self.qids.size)

    @property
    def dropped(self) -> tuple[DroppedQuery, ...]:
        return tuple(f.dropped for f in self.files if f.dropped is not None)

    def summary(self) -> dict[str, Any]:
        return {
            "files": [_summary_dict(f) for f in self.files],
            "queries": self.n_queries,
            "docs": self.n_docs,
            "dropped_queries": [d.__dict__ for d in self.dropped],
        }


def _summary_dict(f: FileSummary) -> dict[str, Any]:
    out = dict(f.__dict__)
    out["dropped"] = None if f.dropped is None else dict(f.dropped.__dict__)
    return out


# -- reading -----------------------------------------------------------------------------------


def _blocks(path: Path, chunk_bytes: int) -> Iterator[tuple[list[bytes], bool]]:
    """Lines of ``path`` in blocks of about ``chunk_bytes`` bytes: (lines, is_unterminated_tail)."""
    with open(path, "rb") as fh:
        carry = b""
        first = True
        while True:
            block = fh.read(chunk_bytes)
            if not block:
                break
            if first:
                first = False
                if block.startswith(_BOM):
                    block = block[len(_BOM) :]
            if carry:
                block = carry + block
            cut = block.rfind(b"\n")
            if cut < 0:
                carry = block
                continue
            carry = block[cut + 1 :]
            yield block[:cut].split(b"\n"), False
        if carry:
            yield [carry], True


def first_data_width(path: Path) -> int:
    """Largest feature index on the first data line of ``path`` (0 if it has none)."""
    lineno = 0
    for lines, unterminated in _blocks(path, 1 << 16):
        for line in lines:
            lineno += 1
            try:
                parsed = _strict_line(line)
            except _LineError as exc:
                raise _fail(path, lineno, line, str(exc), unterminated) from None
            if parsed is not None:
                return parsed[2][-1] if parsed[2] else 0
    return 0


class _Accumulator:
    """Rows and query boundaries of all files parsed so far."""

    def __init__(self, capacity: int, width: int) -> None:
        # one growable buffer (np.zeros: pages untouched until written), so no block list has
        # to be concatenated at the end; with an exact capacity hint it never grows
        self.features = np.zeros((max(capacity, 1), width), dtype=np.float32)
        self.labels = np.zeros(max(capacity, 1))
        self.n_docs = 0
        self.q_start: list[int] = []
        self.q_id: list[int] = []
        self.q_file: list[int] = []
        self.q_line: list[int] = []
        self.seen: dict[int, tuple[Path, int]] = {}
        self.current: int | None = None

    def add(self, chunk: _Chunk, file_index: int, file: Path, lines: list[bytes], first: int) -> None:
        n = chunk.labels.size
        if n == 0:
            return
        q = chunk.qids
        starts = np.flatnonzero(q[1:] != q[:-1]) + 1
        if self.current is None or q[0] != self.current:
            starts = np.concatenate([[0], starts])
        for s in starts.tolist():
            qid = int(q[s])
            lineno = int(chunk.lines[s])
            if qid in self.seen:
                where, at = self.seen[qid]
                raise _fail(
                    file,
                    lineno,
                    lines[lineno - first],
                    f"query {qid} appears again (first at {where}, line {at}); the documents of a query must be "
                    "contiguous and a query id may occur in one file only (MSLR folds repeat the same queries: "
                    "use one fold's files)",
                )
            self.seen[qid] = (file, lineno)
            self.q_start.append(self.n_docs + s)
            self.q_id.append(qid)
            self.q_file.append(file_index)
            self.q_line.append(lineno)
        self.current = int(q[-1])
        end = self.n_docs + n
        rows, width = self.features.shape
        if end > rows or chunk.features.shape[1] > width:
            new_rows = max(end, rows + rows // 2) if end > rows else rows
            grown = np.zeros((new_rows, max(width, chunk.features.shape[1])), dtype=np.float32)
            grown[: self.n_docs, :width] = self.features[: self.n_docs]
            self.features = grown
            self.labels = np.concatenate([self.labels[: self.n_docs], np.zeros(grown.shape[0] - self.n_docs)])
        self.features[self.n_docs : end, : chunk.features.shape[1]] = chunk.features
        self.labels[self.n_docs : end] = chunk.labels
        self.n_docs = end

    def drop_last_query(self) -> tuple[int, int, int]:
        """Remove the last query; returns (qid, documents, first line)."""
        start = self.q_start.pop()
        qid = self.q_id.pop()
        self.q_file.pop()
        line = self.q_line.pop()
        del self.seen[qid]
        n = self.n_docs - start
        self.features[start : self.n_docs] = 0  # later (narrower) blocks must find zeros here
        self.n_docs = start
        self.current = None
        return qid, n, line


def read_svmlight(
    files: Sequence[str | Path],
    *,
    columns: Sequence[int] | np.ndarray | None = None,
    truncated_last_query: str = "auto",
    chunk_bytes: int = 1 << 22,
    capacity: int = 0,
) -> SvmlightData:
    """Stream, validate and collect svmlight / LETOR files (see the module docstring).

    ``columns``: 1-based feature indices to keep, in that order (None: every index present,
    ``1..max``).  ``truncated_last_query``: "auto", "drop" or "keep".  ``capacity``: expected
    number of documents (e.g. the files' line count), so the row buffer is allocated once.
    Raises ``ValueError`` naming file and line on the first malformed line.
    """
    check_choice("truncated_last_query", truncated_last_query, TRUNCATION_RULES)
    check_int("chunk_bytes", chunk_bytes, low=1)
    paths = [Path(f) for f in files]
    if not paths:
        raise ValueError("no input files")
    cols, colmap = _column_map(columns)
    acc = _Accumulator(check_int("capacity", capacity, low=0) or 1 << 16, 0 if cols is None else cols.size)
    summaries = [
        _read_file(acc, file_index, path, colmap, chunk_bytes, truncated_last_query)
        for file_index, path in enumerate(paths)
    ]
    return _collected(acc, cols, summaries)


def _column_map(columns: Sequence[int] | np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The chosen 1-based ``columns`` and the map from a feature index to its column (-1: not kept);
    both None for every column."""
    if columns is None:
        return None, None
    cols = np.asarray(columns, dtype=np.int64).reshape(-1)
    if cols.size == 0 or cols.min() < 1 or cols.max() > MAX_FEATURE_INDEX or np.unique(cols).size != cols.size:
        raise ValueError(f"columns must be distinct 1-based feature indices, got {columns!r}")
    colmap = np.full(int(cols.max()) + 1, -1, dtype=np.int64)
    colmap[cols] = np.arange(cols.size)
    return cols, colmap


def _read_file(
    acc: _Accumulator, file_index: int, path: Path, colmap: np.ndarray | None, chunk_bytes: int, rule: str
) -> FileSummary:
    """Stream one file into ``acc`` block by block and summarise it; its last query is dropped when
    the truncation ``rule`` says so (:func:`_truncation_reason`)."""
    acc.current = None
    docs0, queries0 = acc.n_docs, len(acc.q_id)
    n_lines = data_lines = comment_lines = blank_lines = file_max = 0
    ends_with_newline = True
    cut_data_line = False  # the file ends without a newline on a data line
    prev_pairs: int | None = None  # pairs of the last line seen so far
    uniform: int | None = None  # common pair count of all earlier lines, -1 if they differ
    for lines, unterminated in _blocks(path, chunk_bytes):
        first = n_lines + 1
        n_lines += len(lines)
        ends_with_newline = not unterminated
        chunk = _parse_chunk_fast(lines, first, colmap)
        if chunk is None:
            chunk = _parse_chunk_strict(lines, first, colmap, path, unterminated)
        acc.add(chunk, file_index, path, lines, first)
        cut_data_line = unterminated and chunk.labels.size > 0
        data_lines += chunk.labels.size
        comment_lines += chunk.comment_lines
        blank_lines += chunk.blank_lines
        file_max = max(file_max, chunk.max_index)
        if chunk.pairs.size:
            uniform = _common_pairs(chunk.pairs, prev_pairs, uniform)
            prev_pairs = int(chunk.pairs[-1])
    dropped = None
    if len(acc.q_id) > queries0:
        reason = _truncation_reason(rule, n_lines, ends_with_newline, prev_pairs if cut_data_line else None, uniform)
        if reason:
            qid, n, line = acc.drop_last_query()
            dropped = DroppedQuery(str(path), qid, n, line, reason)
    return FileSummary(
        file=str(path),
        lines=n_lines,
        data_lines=data_lines,
        comment_lines=comment_lines,
        blank_lines=blank_lines,
        queries=len(acc.q_id) - queries0,
        docs=acc.n_docs - docs0,
        max_feature_index=file_max,
        ends_with_newline=ends_with_newline,
        dropped=dropped,
    )


def _common_pairs(pairs: np.ndarray, prev_pairs: int | None, uniform: int | None) -> int | None:
    """The common pair count of a file's data lines so far, the last one left out (-1 if they differ,
    None if there are none): ``uniform`` updated with a block of ``pairs`` per data line, where
    ``prev_pairs`` is the pair count of the last data line before the block."""
    earlier = pairs[:-1] if prev_pairs is None else np.concatenate([[prev_pairs], pairs[:-1]])
    if earlier.size:
        lo, hi = int(earlier.min()), int(earlier.max())
        common = lo if lo == hi else -1
        uniform = common if uniform is None or uniform == common else -1
    return uniform


def _collected(acc: _Accumulator, cols: np.ndarray | None, summaries: list[FileSummary]) -> SvmlightData:
    """The documents and queries gathered in ``acc``, with the chosen columns (None: every index ``1..max``)."""
    max_index = max(s.max_feature_index for s in summaries)
    if cols is None:
        cols = np.arange(1, max_index + 1, dtype=np.int64)
    features = acc.features[: acc.n_docs, : cols.size]
    if features.shape[1] < cols.size:  # "all" columns and no document at all
        features = np.zeros((acc.n_docs, cols.size), dtype=np.float32)
    if acc.n_docs < 0.75 * acc.features.shape[0]:  # do not keep a mostly unused buffer alive
        features = features.copy()
    labels = acc.labels[: acc.n_docs].copy()
    return SvmlightData(
        features=features,
        labels=labels,
        columns=cols,
        qids=np.array(acc.q_id, dtype=np.int64),
        query_ptr=np.array([*acc.q_start, acc.n_docs], dtype=np.int64),
        query_file=np.array(acc.q_file, dtype=np.int32),
        query_line=np.array(acc.q_line, dtype=np.int64),
        files=tuple(summaries),
        max_feature_index=max_index,
    )


def _truncation_reason(rule: str, n_lines: int, terminated: bool, last: int | None, uniform: int | None) -> str:
    """Why the last query of a file is dropped ("" = kept).  ``last``: pairs on an unterminated last
    data line (None if the file ends otherwise); ``uniform``: the common pair count of all earlier
    data lines (-1 if they differ, None if there are none)."""
    if rule == "keep":
        return ""
    if rule == "drop":
        return "truncated_last_query = 'drop'"
    if terminated and n_lines % HEAD_LINES_MULTIPLE == 0:
        return f"the file has {n_lines} lines, a multiple of {HEAD_LINES_MULTIPLE} (looks cut by 'head -n')"
    if not terminated and last is not None and uniform is not None and uniform >= 0 and last < uniform:
        return f"the file ends mid-line: its unterminated last line has {last} features, every earlier line {uniform}"
    return ""
