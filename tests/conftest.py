import os
from pathlib import Path

import numpy as np
import pytest

from fedbandits.envs.datahome import DATA_ENV

# The library finds real data only through $FEDBANDITS_DATA or the user data folder, never relative
# to a checkout (fedbandits.envs.datahome).  The tests know the project's layout: the shared data
# folder beside the checkout serves when the variable is unset.  Without it the tests that need
# real numbers skip, and generated look-alikes cover the same code (tests/datafixtures.py).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not os.environ.get(DATA_ENV) and SHARED_DATA.is_dir():
    os.environ[DATA_ENV] = str(SHARED_DATA)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


# Property-based tests run a fixed, derandomized set of examples: the same inputs on every machine
# (CI included), so a failure reproduces; FEDBANDITS_HYPOTHESIS=explore draws fresh ones.
from hypothesis import settings  # noqa: E402

settings.register_profile("fixed", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("FEDBANDITS_HYPOTHESIS", "fixed"))
