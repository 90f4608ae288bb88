"""Property-based fuzzing at the boundaries: any value in any config field, broken data files.

Every generated input gets a result or the documented one-line error (ConfigError / ValueError
naming the field or file); never another exception.  The profile is fixed (tests/conftest.py).
"""

from __future__ import annotations

import io
import math
import zipfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedbandits.config import ConfigError, config_from_dict, loads_config
from fedbandits.envs.files import read_data_file
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS

BASE: dict[str, Any] = {
    "experiment": {"seed": 1, "runs": 2, "horizon": 50},
    "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 4, "dim": 2},
    "algorithms": [{"name": "fedlinucb", "protocol": "ldp", "batch": 5}],
}

#: any TOML value: scalars of every type (NaN and infinities included), arrays and tables
TOML_SCALARS = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.booleans()
)
TOML_VALUES = st.recursive(
    TOML_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

_EXPERIMENT_KEYS = ["seed", "runs", "horizon", "noise_seed", "runs_per_task", "grid_points", "name", "extra_key"]
_ENV_KEYS = [f.name for f in fields(ENVIRONMENTS["gaussian-sphere"].params)] + ["name", "extra_key"]
_ALG_KEYS = [f.name for f in fields(ALGORITHMS["fedlinucb"].params)] + ["name", "label", "extra_key"]


def _accepted_or_config_error(raw: dict[str, Any]) -> None:
    try:
        config_from_dict(raw)
    except ConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        assert "Traceback" not in message


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    section=st.sampled_from(["experiment", "environment", "algorithms"]),
    data=st.data(),
    value=TOML_VALUES,
)
def test_any_value_in_any_config_field(section: str, data: st.DataObject, value: Any) -> None:
    raw = {k: (dict(v) if isinstance(v, dict) else [dict(a) for a in v]) for k, v in BASE.items()}
    keys = {"experiment": _EXPERIMENT_KEYS, "environment": _ENV_KEYS, "algorithms": _ALG_KEYS}[section]
    key = data.draw(st.sampled_from(keys))
    target = raw[section][0] if section == "algorithms" else raw[section]
    target[key] = value
    _accepted_or_config_error(raw)


@settings(max_examples=100)
@given(value=TOML_VALUES, section=st.sampled_from(["experiment", "environment", "algorithms", "other"]))
def test_any_value_for_a_whole_section(value: Any, section: str) -> None:
    raw = dict(BASE)
    raw[section] = value
    _accepted_or_config_error(raw)


@settings(max_examples=150)
@given(value=TOML_VALUES.filter(lambda v: not (isinstance(v, float) and math.isnan(v))), key=st.sampled_from(_ALG_KEYS))
def test_any_toml_text_is_read_or_refused_in_one_line(value: Any, key: str) -> None:
    raw = {k: (dict(v) if isinstance(v, dict) else [dict(a) for a in v]) for k, v in BASE.items()}
    raw["algorithms"][0][key] = value
    try:
        text = tomli_w.dumps(raw)
    except (TypeError, ValueError):  # not representable in TOML: nothing to test
        return
    try:
        loads_config(text)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape_f=st.lists(st.integers(0, 3), min_size=0, max_size=4),
    shape_r=st.lists(st.integers(0, 3), min_size=0, max_size=3),
    dtype=st.sampled_from(["float32", "float64", "int64", "bool", "complex64", "U3", "O"]),
    poison=st.sampled_from([None, math.nan, math.inf, -math.inf]),
    drop=st.sampled_from([None, "features", "rewards"]),
)
def test_any_npz_is_read_or_refused(
    tmp_path: Path, shape_f: list[int], shape_r: list[int], dtype: str, poison: float | None, drop: str | None
) -> None:
    path = tmp_path / "silo.npz"
    arrays: dict[str, np.ndarray] = {}
    for name, shape in (("features", shape_f), ("rewards", shape_r)):
        if name == drop:
            continue
        arr = np.zeros(shape, dtype=np.float64) + 0.5
        if poison is not None and arr.size:
            arr.flat[0] = poison
        with np.errstate(invalid="ignore"):  # NaN cast to an integer dtype: whatever numpy makes of it
            arrays[name] = arr.astype(dtype) if dtype != "O" else arr.astype(object)
    buf = io.BytesIO()
    np.savez(buf, **arrays, allow_pickle=True) if dtype == "O" else np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    try:
        data = read_data_file(path)
    except ValueError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    assert np.isfinite(data.features).all() and np.isfinite(data.rewards).all()
    assert data.features.ndim == 3 and data.rewards.shape == data.features.shape[:2]


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.sampled_from(["user,arm,reward,x0", "7,0,0.25,0.1", "7,1,0.5,0.2", "8,0,1,2", "8,0,1", "x,y,z,w", ""])
        | st.text(alphabet="0123456789.,-e naxu\r", max_size=20),
        max_size=6,
    )
)
def test_any_csv_is_read_or_refused(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "silo.csv"
    path.write_text("\n".join(lines))
    try:
        data = read_data_file(path)
    except ValueError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    assert np.isfinite(data.features).all() and data.features.shape[0] >= 1


def test_corrupt_npz_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "silo.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("features.npy", b"not an array")
    with pytest.raises(ValueError, match=r"silo\.npz"):
        read_data_file(path)
