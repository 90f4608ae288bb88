import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


# Property-based tests run a fixed, derandomized set of examples: the same inputs on every machine
# (CI included), so a failure reproduces; FEDBANDITS_HYPOTHESIS=explore draws fresh ones.
import os  # noqa: E402

from hypothesis import settings  # noqa: E402

settings.register_profile("fixed", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("FEDBANDITS_HYPOTHESIS", "fixed"))
