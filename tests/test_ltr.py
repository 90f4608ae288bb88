"""Learning-to-rank environment: svmlight/LETOR parser, MSLR and LETOR instances, round sampling."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datafixtures import needs_dataset, write_letor_like, write_mslr_like
from fedbandits.algorithms import IndependentLinUCB, LinUCBParams
from fedbandits.envs import ltr_instance, svmlight, svmlight_parse
from fedbandits.envs.datahome import DATA_ENV, MissingDataSet, dataset_path
from fedbandits.envs.ltr import LearningToRank, LearningToRankParams
from fedbandits.envs.ltr_instance import build_instance, parse_columns
from fedbandits.envs.svmlight import read_svmlight
from fedbandits.sim.seeding import env_rngs

MSLR = dataset_path("mslr-web-fold1-5k")
LETOR = dataset_path("letor-mq2008-fold1")
needs_mslr = needs_dataset("mslr-web-fold1-5k")
needs_letor = needs_dataset("letor-mq2008-fold1")
TITLE = list(range(3, 124, 5))
BODY = list(range(1, 122, 5))


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def error_at(path: Path, line: int) -> str:
    """Regex of the parser's error prefix: file name and line number."""
    return re.escape(f"{path}, line {line}:")


# -- parser known answers ----------------------------------------------------------------------

KNOWN = "".join(
    [
        "2 qid:10 1:0.5 2:-1 3:3e2\n",
        "0 qid:10 1:1 2:0 3:0 # docid = A # inc = 1\n",
        "# a comment line\n",
        "\n",
        "1 qid:7 1:0 2:2.5 3:1\n",
    ]
)


def check_known(data: svmlight.SvmlightData) -> None:
    np.testing.assert_array_equal(data.features, np.array([[0.5, -1, 300], [1, 0, 0], [0, 2.5, 1]], np.float32))
    assert data.features.dtype == np.float32
    np.testing.assert_array_equal(data.labels, [2, 0, 1])
    np.testing.assert_array_equal(data.qids, [10, 7])
    np.testing.assert_array_equal(data.query_ptr, [0, 2, 3])
    np.testing.assert_array_equal(data.columns, [1, 2, 3])
    (f,) = data.files
    assert (f.lines, f.data_lines, f.comment_lines, f.blank_lines) == (5, 3, 2, 1)
    assert (f.queries, f.docs, f.max_feature_index, f.dropped) == (2, 3, 3, None)


def test_parse_known_answer_lf(tmp_path):
    data = read_svmlight([write(tmp_path, "a.txt", KNOWN)])
    check_known(data)
    assert data.files[0].ends_with_newline


def test_parse_known_answer_crlf_bom_and_no_final_newline(tmp_path):
    crlf = KNOWN.replace("\n", "\r\n")
    check_known(read_svmlight([write(tmp_path, "crlf.txt", crlf)]))
    check_known(read_svmlight([write(tmp_path, "bom.txt", b"\xef\xbb\xbf" + crlf.encode())]))
    cut = KNOWN.rstrip("\n")  # the last data line has no line end
    data = read_svmlight([write(tmp_path, "nonl.txt", cut)])
    np.testing.assert_array_equal(data.features[-1], [0, 2.5, 1])
    assert not data.files[0].ends_with_newline and data.files[0].lines == 5
    data = read_svmlight([write(tmp_path, "nonl_crlf.txt", cut.replace("\n", "\r\n"))])
    np.testing.assert_array_equal(data.features[-1], [0, 2.5, 1])


def test_parse_sparse_columns_tabs_and_selection(tmp_path):
    text = "1 qid:1 2:5 7:1.5\n0\tqid:1\t\t1:3   \n3 qid:2\n0.5 qid:2 7:-2 9:4\n"
    path = write(tmp_path, "sparse.txt", text)
    data = read_svmlight([path])
    expected = np.zeros((4, 9), np.float32)
    expected[0, [1, 6]] = [5, 1.5]
    expected[1, 0] = 3
    expected[3, [6, 8]] = [-2, 4]
    np.testing.assert_array_equal(data.features, expected)
    np.testing.assert_array_equal(data.labels, [1, 0, 3, 0.5])
    np.testing.assert_array_equal(data.query_ptr, [0, 2, 4])
    picked = read_svmlight([path], columns=[7, 1, 20])  # in the given order; 20 is never present
    np.testing.assert_array_equal(picked.features, expected[:, [6, 0, 0]] * np.array([1, 1, 0], np.float32))
    np.testing.assert_array_equal(picked.columns, [7, 1, 20])
    for chunk in (1, 20, 1 << 22):  # blocks of growing width; a row buffer that has to grow
        for capacity in (0, 1, 4):
            again = read_svmlight([path], chunk_bytes=chunk, capacity=capacity)
            np.testing.assert_array_equal(again.features, expected)
            np.testing.assert_array_equal(again.labels, data.labels)


def test_parse_several_files_and_chunking(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    split = 0
    for q in range(30):
        if q == 12:
            split = len(lines)
        for _ in range(int(rng.integers(1, 9))):
            vals = " ".join(f"{j}:{rng.normal():.6g}" for j in range(1, 6))
            lines.append(f"{rng.integers(0, 5)} qid:{q} {vals}")
    a = write(tmp_path, "a.txt", "\n".join(lines[:split]) + "\n")
    b = write(tmp_path, "b.txt", "\r\n".join(lines[split:]) + "\r\n")
    whole = read_svmlight([a, b])
    assert whole.n_docs == len(lines)
    assert [f.docs for f in whole.files] == [split, len(lines) - split]
    assert [f.queries for f in whole.files] == [12, 18]
    np.testing.assert_array_equal(whole.query_file, [0] * 12 + [1] * 18)
    for chunk in (1, 7, 64, 1000):  # queries spanning blocks are assembled the same way
        part = read_svmlight([a, b], chunk_bytes=chunk)
        np.testing.assert_array_equal(part.features, whole.features)
        np.testing.assert_array_equal(part.query_ptr, whole.query_ptr)
        np.testing.assert_array_equal(part.qids, whole.qids)


MALFORMED = [
    ("1 1:2", "qid"),
    ("x qid:1 1:2", "label"),
    ("-1 qid:1 1:2", "negative"),
    ("nan qid:1 1:2", "label"),
    ("1 qid:a 1:2", "query id"),
    ("1 qid: 1:2", "query id"),
    ("1 qid:1 1:", "value"),
    ("1 qid:1 :3", "index"),
    ("1 qid:1 2:1 1:3", "increase"),
    ("1 qid:1 1:1 1:2", "increase"),
    ("1 qid:1 1:nan", "value"),
    ("1 qid:1 1:inf", "value"),
    ("1 qid:1 1:1e400", "finite"),
    ("1 qid:1 1:2:3", "index:value"),
    ("1 qid:1 0:3", "outside"),
    ("1 qid:1 5", "index:value"),
    ("1 qid:1 1.5:2", "index"),
    ("1 qid:1 1:2 qid:2", "index"),
    ("1 qid:1 1:0x10", "value"),
    ("1 qid:1 1:1_000", "value"),
]


@pytest.mark.parametrize(("bad", "what"), MALFORMED)
def test_malformed_line_names_file_and_line(tmp_path, bad, what):
    path = write(tmp_path, "bad.txt", f"1 qid:1 1:1 2:2\r\n# note\r\n{bad}\r\n0 qid:1 1:0 2:1\r\n")
    with pytest.raises(ValueError, match=error_at(path, 3)) as exc:
        read_svmlight([path])
    assert what in str(exc.value)


def test_query_must_be_contiguous_and_in_one_file(tmp_path):
    path = write(tmp_path, "q.txt", "1 qid:1 1:1\n1 qid:2 1:1\n0 qid:1 1:3\n")
    with pytest.raises(ValueError, match=error_at(path, 3) + ".*query 1 appears again"):
        read_svmlight([path])
    a = write(tmp_path, "a.txt", "1 qid:5 1:1\n")
    b = write(tmp_path, "b.txt", "1 qid:6 1:1\n\n1 qid:5 1:1\n")
    with pytest.raises(ValueError, match=error_at(b, 3) + f".*first at {re.escape(str(a))}, line 1"):
        read_svmlight([a, b])


def dense_file(n_lines: int, docs_per_query: int = 7, n_features: int = 4) -> str:
    rows = []
    for i in range(n_lines):
        vals = " ".join(f"{j}:{(i * j) % 5}" for j in range(1, n_features + 1))
        rows.append(f"{i % 3} qid:{i // docs_per_query} {vals}\n")
    return "".join(rows)


def test_truncated_last_query_rules(tmp_path):
    cut = write(tmp_path, "head.txt", dense_file(1000))  # 1000 lines: looks like `head -n 1000`
    data = read_svmlight([cut])  # "auto"
    (dropped,) = data.dropped
    assert (dropped.qid, dropped.docs, dropped.first_line) == (142, 6, 995)
    assert "multiple of 1000" in dropped.reason and dropped.file == str(cut)
    assert data.n_docs == 994 and data.n_queries == 142 and data.files[0].dropped == dropped
    assert read_svmlight([cut], truncated_last_query="keep").n_docs == 1000
    full = write(tmp_path, "full.txt", dense_file(999))
    assert read_svmlight([full]).dropped == ()
    forced = read_svmlight([full], truncated_last_query="drop")
    assert forced.n_docs == 994 and "'drop'" in forced.dropped[0].reason
    # cut mid-line (head -c): the unterminated last line of a dense file has fewer features
    text = dense_file(20)
    bytes_cut = write(tmp_path, "headc.txt", text[: text.rindex(" ")])
    data = read_svmlight([bytes_cut])
    assert data.n_docs == 14 and "mid-line" in data.dropped[0].reason
    assert read_svmlight([bytes_cut], truncated_last_query="keep").n_docs == 20
    # a cut that leaves a malformed last line is an error, with a hint
    broken = write(tmp_path, "broken.txt", text[: text.rindex(":") + 1])
    with pytest.raises(ValueError, match=error_at(broken, 20) + r".*cut mid-line"):
        read_svmlight([broken])
    # rows of a dropped query are cleared: a narrower file read next finds zeros there
    narrow = write(tmp_path, "narrow.txt", "".join(f"1 qid:{500 + i} 1:9\n" for i in range(8)))
    both = read_svmlight([cut, narrow], chunk_bytes=64, capacity=1)
    assert both.n_docs == 994 + 8 and both.features.shape == (1002, 4)
    np.testing.assert_array_equal(both.features[994:], [[9, 0, 0, 0]] * 8)
    np.testing.assert_array_equal(both.features[:994], read_svmlight([cut]).features)
    # a sparse (non-uniform) file without a final newline is not suspected
    sparse = write(tmp_path, "sparse.txt", "1 qid:1 1:1 2:2\n1 qid:1 1:1\n0 qid:2 1:1")
    assert read_svmlight([sparse]).dropped == ()


def test_parser_argument_checks(tmp_path):
    path = write(tmp_path, "a.txt", "1 qid:1 1:1\n")
    with pytest.raises(ValueError, match="truncated_last_query"):
        read_svmlight([path], truncated_last_query="maybe")
    with pytest.raises(ValueError, match="columns"):
        read_svmlight([path], columns=[0])
    with pytest.raises(ValueError, match="no input files"):
        read_svmlight([])


# -- fuzzing -----------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(repr),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:.3e}"),
    st.floats(0, 1, allow_nan=False).map(lambda v: f"{v:.4f}".lstrip("0") or "0"),
    st.sampled_from(["1.", ".5", "+2", "-0", "1E3", "00012", "-.25e-2"]),
)
SPACE = st.sampled_from([" ", "  ", "\t", " \t"])


@st.composite
def svmlight_docs(draw):
    """(file text, expected rows as (label, qid, {index: value}), line numbers) of a valid file."""
    docs = []
    lines = []
    qid = draw(st.integers(0, 10**12))
    for _ in range(draw(st.integers(1, 8))):
        qid += draw(st.integers(1, 50))
        for _ in range(draw(st.integers(1, 5))):
            label = draw(st.sampled_from(["0", "1", "2", "4", "0.5", "3.0"]))
            indices = sorted(draw(st.sets(st.integers(1, 12), max_size=6)))
            values = [draw(NUMBERS) for _ in indices]
            sep = draw(SPACE)
            fields = [label, f"qid:{qid}", *(f"{i}:{v}" for i, v in zip(indices, values, strict=True))]
            line = sep.join(fields) + draw(st.sampled_from(["", " ", " # doc", "#x:1 qid:2"]))
            lines.append(line)
            docs.append((float(label), qid, {i: float(v) for i, v in zip(indices, values, strict=True)}))
            if draw(st.integers(0, 9)) == 0:
                lines.append(draw(st.sampled_from(["", "# comment", "   "])))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(lines) + draw(st.sampled_from([end, ""]))
    return text, docs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=svmlight_docs(), chunk=st.sampled_from([1, 16, 200, 1 << 22]))
def test_fuzz_valid_files_parse_exactly(tmp_path, case, chunk):
    text, docs = case
    path = write(tmp_path, "valid.txt", text)
    data = read_svmlight([path], truncated_last_query="keep", chunk_bytes=chunk)
    width = max([max(d[2], default=0) for d in docs])
    expected = np.zeros((len(docs), width), np.float32)
    for row, (_, _, feats) in enumerate(docs):
        for i, v in feats.items():
            expected[row, i - 1] = v
    np.testing.assert_array_equal(data.features, expected)
    np.testing.assert_array_equal(data.labels, [d[0] for d in docs])
    qids = [d[1] for d in docs]
    starts = [0] + [k for k in range(1, len(qids)) if qids[k] != qids[k - 1]]
    np.testing.assert_array_equal(data.query_ptr, [*starts, len(qids)])
    np.testing.assert_array_equal(data.qids, [qids[s] for s in starts])


MUTATIONS = {
    "drop qid": lambda f: [f[0], *f[2:]],
    "qid letter": lambda f: [f[0], "qid:1x", *f[2:]],
    "negative label": lambda f: ["-" + f[0].lstrip("+-") if float(f[0]) != 0 else "-1", *f[1:]],
    "label garbage": lambda f: [f[0] + "a", *f[1:]],
    "double colon": lambda f: [*f[:-1], f[-1] + ":1"],
    "no colon": lambda f: [*f, "7"],
    "empty value": lambda f: [*f, "99:"],
    "index zero": lambda f: [f[0], f[1], "0:1", *f[2:]],
    "repeat index": lambda f: [*f, f[-1]],
    "nan value": lambda f: [*f, "99:nan"],
    "inf value": lambda f: [*f, "99:-inf"],
    "float index": lambda f: [*f, "99.0:1"],
    "bad value char": lambda f: [*f, "99:1,5"],
    "stray token": lambda f: [*f, "x"],
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=svmlight_docs(),
    mutation=st.sampled_from(sorted(MUTATIONS)),
    where=st.floats(0, 1),
    chunk=st.sampled_from([1, 64, 1 << 22]),
)
def test_fuzz_malformed_line_raises_with_file_and_line(tmp_path, case, mutation, where, chunk):
    text, _ = case
    end = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(end)
    data_rows = [k for k, line in enumerate(lines) if line.split("#")[0].strip()]
    k = data_rows[int(where * (len(data_rows) - 1))]
    fields = lines[k].split("#")[0].split()
    if mutation in ("double colon", "repeat index") and len(fields) < 3:
        fields.append("1:1")
    lines[k] = " ".join(MUTATIONS[mutation](fields))
    path = write(tmp_path, "fuzz.txt", end.join(lines))
    with pytest.raises(ValueError, match=error_at(path, k + 1)):
        read_svmlight([path], chunk_bytes=chunk)


JUNK = st.lists(
    st.one_of(
        st.sampled_from(["1", "0", "qid:", "qid:3", ":", " ", "\t", "#", ".", "e", "-", "+", "2:", ":4", "\r", "\n"]),
        st.binary(max_size=3).map(lambda b: b.decode("latin-1")),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=JUNK, chunk=st.sampled_from([1, 8, 1 << 22]))
def test_fuzz_arbitrary_text_parses_or_names_the_line(tmp_path, junk, chunk):
    path = write(tmp_path, "junk.txt", ("1 qid:0 1:1\n" + junk).encode("latin-1"))
    try:
        data = read_svmlight([path], truncated_last_query="keep", chunk_bytes=chunk)
    except ValueError as exc:
        assert re.match(re.escape(f"{path}, line ") + r"\d+: ", str(exc)), str(exc)
        return
    assert data.features.dtype == np.float32 and np.isfinite(data.features).all()
    assert data.n_docs == sum(f.data_lines for f in data.files)


# -- columns and parameters ----------------------------------------------------------------------


def test_columns_presets_and_specs():
    assert ltr_instance.stream_columns("title", 136).tolist() == TITLE
    assert ltr_instance.stream_columns("body", 136).tolist() == BODY
    assert ltr_instance.stream_columns("title", 46).tolist() == [3, 8, 13, 18, 23, 28, 33, 38]
    assert parse_columns(" Title ") == "title"
    assert parse_columns("126-128, 3") == "3,126,127,128"
    assert parse_columns([8, 3]) == "3,8"
    assert ltr_instance.resolve_columns("auto", 136)[1] == "title"
    assert ltr_instance.resolve_columns("auto", 46) == (None, "all")
    for bad in ("", "3,,4", "5-2", "0", "1,1", "x", 3.5, [1, "a"]):
        with pytest.raises(ValueError, match="columns"):
            parse_columns(bad)
    with pytest.raises(ValueError, match="layout"):
        ltr_instance.stream_columns("title", 50)


def test_params_validation():
    assert LearningToRankParams(columns=[13, 3]).columns == "3,13"  # type: ignore[arg-type]
    for bad in (
        {"agents": 0},
        {"arms": 0},
        {"lasso_alpha": 0.0},
        {"reward_noise_sd": -0.1},
        {"truncated_last_query": "yes"},
        {"columns": "head"},
        {"path": 3},
        {"reward_noise_sd": math.nan},
    ):
        with pytest.raises(ValueError):
            LearningToRankParams(**bad)  # type: ignore[arg-type]


def test_resolve_files(tmp_path):
    write(tmp_path, "root/Fold1/train.txt", "1 qid:1 1:1\n")
    write(tmp_path, "root/Fold1/vali.txt", "1 qid:2 1:1\n")
    write(tmp_path, "root/Fold2/train.txt", "1 qid:1 1:1\n")
    root = tmp_path / "root"
    assert [p.name for p in ltr_instance.resolve_files(str(root))] == ["train.txt", "vali.txt"]
    assert [p.parent.name for p in ltr_instance.resolve_files(str(root), "Fold2/*.txt")] == ["Fold2"]
    assert ltr_instance.resolve_files(str(root / "Fold1" / "vali.txt")) == [(root / "Fold1" / "vali.txt").resolve()]
    with pytest.raises(FileNotFoundError):
        ltr_instance.resolve_files(str(root), "*.csv")
    with pytest.raises(FileNotFoundError):
        ltr_instance.resolve_files(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="glob"):
        ltr_instance.resolve_files(str(root / "Fold1" / "vali.txt"), "*.txt")


# -- a small synthetic instance ------------------------------------------------------------------


def toy_file(tmp_path: Path, sizes=(3, 12, 8, 15, 20, 9, 11, 14), seed: int = 1) -> Path:
    """Queries of the given sizes; the label grows with features 1 and 3."""
    rng = np.random.default_rng(seed)
    rows = []
    for q, n in enumerate(sizes):
        x = rng.uniform(0, 10, size=(n, 4))
        score = x[:, 0] + x[:, 2] + rng.normal(0, 2, n)
        label = np.digitize(score, [8, 12, 16])
        for xi, li in zip(x, label, strict=True):
            rows.append(f"{li} qid:{q + 1} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(xi)))
    return write(tmp_path, "toy/data.txt", "\n".join(rows) + "\n")


def toy_env(tmp_path: Path, runs=(0, 1), seed: int = 3, **kw) -> LearningToRank:
    path = toy_file(tmp_path)
    params = LearningToRankParams(path=str(path.parent), agents=3, arms=5, cache_dir=str(tmp_path / "cache"), **kw)
    return LearningToRank(env_rngs(seed, list(runs)), params)


def test_toy_instance_geometry_and_rewards(tmp_path):
    env = toy_env(tmp_path)
    inst = env.instance
    assert inst.dim == 4 and inst.n_queries == 8 and inst.n_docs == 92
    norms = np.linalg.norm(inst.features.astype(np.float64), axis=1)
    assert norms.max() <= 1.0 and norms.max() > 0.999
    expected = np.clip(inst.features.astype(np.float64) @ inst.theta.astype(np.float64), 0, 1).astype(np.float32)
    np.testing.assert_array_equal(inst.means, expected)
    assert inst.report["lasso"]["r2"] > 0.3  # the labels do depend linearly on features 1 and 3
    assert not inst.features.flags.writeable
    for _ in range(20):
        rnd = env.next_round()
        assert rnd.features.shape == (2, 3, 5, 4) and rnd.features.dtype == np.float32
        assert rnd.means.shape == (2, 3, 5) and rnd.means.dtype == np.float32
        assert rnd.noise.shape == (2, 3) and rnd.noise.dtype == np.float64
        assert ((rnd.means >= 0) & (rnd.means <= 1)).all()
        np.testing.assert_array_equal(rnd.features, inst.features[env.last_docs])
        np.testing.assert_array_equal(rnd.means, inst.means[env.last_docs])
        # every agent's documents come from the query it drew, which is one of its own
        ptr = inst.query_ptr
        q = env.last_queries
        assert ((env.last_docs >= ptr[q][..., None]) & (env.last_docs < ptr[q + 1][..., None])).all()
        assert (q % 3 == np.arange(3)).all()
    y = env.rewards(rnd.means[:, :, 0], rnd.noise)
    np.testing.assert_array_equal(y, rnd.means[:, :, 0] + 0.1 * rnd.noise)


def test_toy_sampling_without_replacement_and_padding(tmp_path):
    env = toy_env(tmp_path, runs=(0,))
    sizes = env.instance.query_sizes()
    seen_short = 0
    for _ in range(200):
        env.next_round()
        for m in range(3):
            docs = env.last_docs[0, m]
            n = sizes[env.last_queries[0, m]]
            if n >= 5:
                assert np.unique(docs).size == 5
            else:  # query 0 has 3 documents: all of them, then repeated cyclically
                seen_short += 1
                assert np.unique(docs[:n]).size == n
                np.testing.assert_array_equal(docs[n:], docs[: 5 - n])
    assert seen_short > 0
    assert env.instance_report()["queries_with_fewer_docs_than_arms"] == 1


def test_toy_document_draws_are_uniform(tmp_path):
    # Agent 1 holds queries 1, 4, 7 (12, 20, 14 documents).  Given the query, each document is
    # offered with probability 5/n; over N = 3000 rounds the count of a document of query q has
    # sd sqrt(N_q p (1-p)) with N_q ~ N/3; a 5-sigma band per document (46 documents) is loose.
    env = toy_env(tmp_path, runs=(0,))
    counts = np.zeros(env.instance.n_docs)
    queries = np.zeros(env.instance.n_queries)
    for _ in range(3000):
        env.next_round()
        np.add.at(counts, env.last_docs[0, 1], 1)
        queries[env.last_queries[0, 1]] += 1
    ptr = env.instance.query_ptr
    for q in (1, 4, 7):
        n = ptr[q + 1] - ptr[q]
        p = 5 / n
        expected = queries[q] * p
        assert np.abs(counts[ptr[q] : ptr[q + 1]] - expected).max() < 5 * math.sqrt(queries[q] * p * (1 - p))
        assert abs(queries[q] - 1000) < 5 * math.sqrt(3000 * (1 / 3) * (2 / 3))


def test_same_seed_same_numbers_and_runs_independent(tmp_path):
    a, b = toy_env(tmp_path), toy_env(tmp_path)
    c = toy_env(tmp_path, runs=(1,))  # run 1 alone: same numbers as run 1 in a batch
    d = toy_env(tmp_path, seed=4)
    differs = False
    for _ in range(10):
        ra, rb, rc, rd = a.next_round(), b.next_round(), c.next_round(), d.next_round()
        for name in ("features", "means", "noise"):
            np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name))
            np.testing.assert_array_equal(getattr(ra, name)[1], getattr(rc, name)[0])
        differs |= not np.array_equal(ra.features, rd.features)
    assert differs


def test_too_few_queries_for_agents(tmp_path):
    path = toy_file(tmp_path)
    params = LearningToRankParams(path=str(path), agents=9, cache_dir="")
    with pytest.raises(ValueError, match="8 queries cannot be split over 9 agents"):
        LearningToRank(env_rngs(0, [0]), params)


def test_disk_cache_roundtrip(tmp_path):
    path = toy_file(tmp_path)
    cache = tmp_path / "cache"
    first = build_instance([path], cache_dir=cache)
    assert not first.report["cache"]["hit"] and len(list(cache.glob("ltr-*.npz"))) == 1
    second = build_instance([path], cache_dir=cache)
    assert second.report["cache"]["hit"]
    for name in ("features", "means", "labels", "theta", "query_ptr", "qids", "query_file", "columns"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    assert second.report["lasso"] == first.report["lasso"]
    # a different Lasso penalty or changed content is a different cache entry
    assert not build_instance([path], cache_dir=cache, lasso_alpha=1e-3).report["cache"]["hit"]
    path.write_bytes(path.read_bytes().replace(b"1 qid:1", b"2 qid:1", 1))
    assert not build_instance([path], cache_dir=cache).report["cache"]["hit"]
    # a corrupt cache file is rebuilt, with a warning
    for f in cache.glob("ltr-*.npz"):
        f.write_bytes(b"not a zip")
    with pytest.warns(RuntimeWarning, match="unreadable cache"):
        assert not build_instance([path], cache_dir=cache).report["cache"]["hit"]


def test_instance_errors(tmp_path):
    empty = write(tmp_path, "empty.txt", "# nothing\n")
    with pytest.raises(ValueError, match="no \\(complete\\) query"):
        build_instance([empty], cache_dir=None)
    zero = write(tmp_path, "zero.txt", "0 qid:1 1:1\n0 qid:2 1:2\n")
    with pytest.raises(ValueError, match="every relevance label is 0"):
        build_instance([zero], cache_dir=None)
    short = write(tmp_path, "short.txt", "1 qid:1 1:1 2:3\n0 qid:2 1:2 2:1\n")
    with pytest.raises(ValueError, match="column 5 requested"):
        build_instance([short], columns="1,5", cache_dir=None)
    with pytest.raises(ValueError, match="layout"):
        build_instance([short], columns="title", cache_dir=None)


# -- the shared MSLR sample and LETOR MQ2008 -----------------------------------------------------


@needs_mslr
def test_mslr_sample_instance(tmp_path):
    inst = build_instance(ltr_instance.resolve_files(str(MSLR)), cache_dir=tmp_path)  # columns "auto" -> title
    rep = inst.report
    assert inst.dim == 25 and inst.theta.shape == (25,) and inst.columns.tolist() == TITLE
    assert rep["column_preset"] == "title" and rep["layout"] == "MSLR-WEB"
    assert math.isfinite(rep["lasso"]["r2"]) and 0 < rep["lasso"]["r2"] < 1
    norms = np.linalg.norm(inst.features.astype(np.float64), axis=1)
    assert norms.max() <= 1.0
    assert ((inst.means >= 0) & (inst.means <= 1)).all()
    # both sample files are `head -n 5000` cuts: their last queries are dropped and reported
    dropped = {(d["qid"], d["docs"], d["first_line"]) for d in rep["dropped_queries"]}
    assert dropped == {(631, 45, 4956), (643, 26, 4975)}
    assert all("multiple of 1000" in d["reason"] for d in rep["dropped_queries"])
    assert inst.n_queries == 84 and inst.n_docs == 10_000 - 45 - 26
    assert [f["lines"] for f in rep["files"]] == [5000, 5000]
    assert all(len(f["sha256"]) == 64 for f in rep["files"])
    body = build_instance(ltr_instance.resolve_files(str(MSLR)), columns="body", cache_dir=None)
    assert body.columns.tolist() == BODY and body.dim == 25


@needs_mslr
def test_mslr_default_environment_splits_queries(tmp_path):
    params = LearningToRankParams(cache_dir=str(tmp_path))  # path "" = the shared sample
    env = LearningToRank(env_rngs(0, [0, 1]), params)
    rep = env.instance_report()
    nq = env.instance.n_queries
    np.testing.assert_array_equal(np.sort(env.agent_queries), np.arange(nq))  # each query in exactly one agent
    assert sum(rep["queries_per_agent"]) == nq and max(rep["queries_per_agent"]) - min(rep["queries_per_agent"]) <= 1
    assert rep["dim"] == 25 and len(rep["dropped_queries"]) == 2 and math.isfinite(rep["lasso"]["r2"])
    rnd = env.next_round()
    assert rnd.features.shape == (2, 10, 10, 25) and ((rnd.means >= 0) & (rnd.means <= 1)).all()
    assert env.describe()["name"] == "learning-to-rank"


@needs_letor
def test_letor_mq2008_instance(tmp_path):
    inst = build_instance(ltr_instance.resolve_files(str(LETOR)), cache_dir=tmp_path)  # "auto" -> all 46 columns
    rep = inst.report
    assert inst.dim == 46 and inst.columns.tolist() == list(range(1, 47)) and rep["layout"] == "LETOR 4.0"
    assert inst.n_queries == 156 + 157 and inst.n_docs == 2874 + 2707
    assert rep["dropped_queries"] == [] and rep["label_max"] == 2.0
    assert all(f["comment_lines"] == f["data_lines"] for f in rep["files"])  # '#docid = ...' on every line
    assert math.isfinite(rep["lasso"]["r2"]) and 0 < rep["lasso"]["r2"] < 1
    assert np.linalg.norm(inst.features.astype(np.float64), axis=1).max() <= 1.0
    env = LearningToRank(env_rngs(0, [0]), LearningToRankParams(path=str(LETOR), cache_dir=str(tmp_path)))
    np.testing.assert_array_equal(np.sort(env.agent_queries), np.arange(inst.n_queries))
    title = build_instance(ltr_instance.resolve_files(str(LETOR)), columns="title", cache_dir=None)
    assert title.columns.tolist() == [3, 8, 13, 18, 23, 28, 33, 38]


@needs_mslr
def test_linucb_beats_uniform_random_on_mslr_sample(tmp_path):
    # Both policies are scored on the same rounds by expected reward (no reward noise in the
    # score).  Uniform random earns the mean of the K offered expected rewards, the oracle their
    # max.  LinUCB must close at least half of that gap over T = 300 rounds x 10 agents x 4 runs
    # (12,000 decisions).  Per decision the chosen-minus-mean reward has sd ~0.05, so the mean
    # is known to ~0.0005 while the gap is ~0.066: the threshold (0.033) is > 50 standard errors
    # from both random play (0) and what LinUCB reaches here (~0.06).
    horizon = 300
    env = LearningToRank(env_rngs(7, [0, 1, 2, 3]), LearningToRankParams(cache_dir=str(tmp_path)))
    policy = IndependentLinUCB(
        env.n_runs, env.n_agents, env.n_arms, env.dim, horizon, LinUCBParams(radius="constant", beta=0.1)
    )
    chosen = uniform = best = 0.0
    for _ in range(horizon):
        rnd = env.next_round()
        actions = policy.step(rnd, env)
        chosen += float(np.take_along_axis(rnd.means, actions[..., None], axis=-1).mean())
        uniform += float(rnd.means.mean())
        best += float(rnd.means.max(axis=-1).mean())
    assert (chosen - uniform) > 0.5 * (best - uniform) > 0


# -- the same code on generated look-alikes (tests/datafixtures.py): run on every clone -----------


def test_mslr_like_folder_through_the_data_home(tmp_path, monkeypatch):
    """An empty path reads mslr-web-fold1-5k in $FEDBANDITS_DATA: the MSLR layout, the title
    columns, the cut last query of a 1,000-line file dropped and reported, every query in one agent."""
    fixture = write_mslr_like(tmp_path / "data" / "mslr-web-fold1-5k")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    env = LearningToRank(env_rngs(0, [0, 1]), LearningToRankParams(agents=3, arms=20, cache_dir=str(tmp_path / "c")))
    inst, rep = env.instance, env.instance_report()
    assert [Path(f["file"]) for f in inst.report["files"]] == [
        fixture.folder / "test.txt",
        fixture.folder / "train.txt",
    ]
    assert inst.dim == 25 and inst.columns.tolist() == TITLE and inst.report["layout"] == "MSLR-WEB"
    assert (inst.n_queries, inst.n_docs) == (fixture.n_queries, fixture.n_docs)
    assert [f["lines"] for f in inst.report["files"]] == list(fixture.lines)
    assert {(d["qid"], d["docs"], d["first_line"]) for d in rep["dropped_queries"]} == set(fixture.dropped)
    assert all("multiple of 1000" in d["reason"] for d in rep["dropped_queries"])
    assert 0 < rep["lasso"]["r2"] < 1  # labels depend on the title columns: the Lasso finds signal
    assert np.linalg.norm(inst.features.astype(np.float64), axis=1).max() <= 1.0
    np.testing.assert_array_equal(np.sort(env.agent_queries), np.arange(inst.n_queries))
    rnd = env.next_round()
    assert rnd.features.shape == (2, 3, 20, 25) and ((rnd.means >= 0) & (rnd.means <= 1)).all()
    body = build_instance(ltr_instance.resolve_files(""), columns="body", cache_dir=None)
    assert body.columns.tolist() == BODY and body.dim == 25


def test_letor_like_folder(tmp_path):
    """The LETOR 4.0 layout: 46 columns kept by "auto", '#docid' comments counted, nothing dropped."""
    fixture = write_letor_like(tmp_path / "letor")
    inst = build_instance(ltr_instance.resolve_files(str(fixture.folder)), cache_dir=None)
    rep = inst.report
    assert inst.dim == 46 and inst.columns.tolist() == list(range(1, 47)) and rep["layout"] == "LETOR 4.0"
    assert (inst.n_queries, inst.n_docs) == (fixture.n_queries, fixture.n_docs) and rep["dropped_queries"] == []
    assert rep["label_max"] == 2.0 and [f["lines"] for f in rep["files"]] == list(fixture.lines)
    assert all(f["comment_lines"] == f["data_lines"] for f in rep["files"])
    title = build_instance(ltr_instance.resolve_files(str(fixture.folder)), columns="title", cache_dir=None)
    assert title.columns.tolist() == [3, 8, 13, 18, 23, 28, 33, 38]


def test_missing_default_data_set_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    with pytest.raises(MissingDataSet) as err:
        LearningToRank(env_rngs(0, [0]), LearningToRankParams(cache_dir=""))
    text = str(err.value)
    assert "\n" not in text and text.startswith("data set mslr-web-fold1-5k (")
    assert f"{tmp_path / 'empty' / 'mslr-web-fold1-5k'}/" in text and "https://www.microsoft.com/" in text
    assert "path" in text
    with pytest.raises(FileNotFoundError, match="no such file or folder"):  # an explicit path is not the data home
        ltr_instance.resolve_files(str(tmp_path / "nowhere"))


LINE_PIECES = st.lists(
    st.one_of(
        st.sampled_from(["1", "0", "2.5", "qid:", "qid:3", ":", " ", "\t", "#", ".", "e", "E", "-", "+", "12:", ":4"]),
        st.sampled_from(["\r", "\x0b", "1:0.5", "2:-3e2", "3:1.", "10:.5", "99999999999999999999", "1e400", "x"]),
    ),
    max_size=14,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(LINE_PIECES, min_size=1, max_size=6), selected=st.booleans())
def test_fast_parser_accepts_only_what_the_strict_parser_accepts(lines, selected):
    # The vectorised block parser may give up (None) on anything; when it does not, the strict
    # line-by-line parser must accept the same block and produce the same numbers.
    raw = [("1 qid:1 " + line).encode() for line in lines] + [line.encode() for line in lines]
    colmap = None
    if selected:
        colmap = np.full(13, -1, dtype=np.int64)
        colmap[[12, 1, 3]] = [0, 1, 2]
    fast = svmlight_parse._parse_chunk_fast(raw, 1, colmap)
    if fast is None:
        return
    strict = svmlight_parse._parse_chunk_strict(raw, 1, colmap, Path("x.txt"), False)
    for name in ("labels", "qids", "lines", "pairs", "features"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(strict, name))
    assert (fast.max_index, fast.comment_lines, fast.blank_lines) == (
        strict.max_index,
        strict.comment_lines,
        strict.blank_lines,
    )
