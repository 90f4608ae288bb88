"""The primitives of secure aggregation (fedbandits.crypto.secure_aggregation), and the checks every
masked message meets before the server keeps it (fedbandits.crypto.double_masking.MaskingServer.accept)."""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.crypto.secure_aggregation import SecAggError, prg, shamir_join, shamir_split
from maskinghelp import federation


def test_replayed_foreign_and_malformed_messages_are_rejected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fed = federation(tmp_path, 4, width=512)
    x = fed.inputs(3)
    fed.server.open_round(1)
    for s in fed.silos:
        assert fed.server.accept(s.silo, 1, 1, s.mask(1, x[s.silo])) is None
    fed.server.total(fed.unmask(1))
    fed.server.open_round(2)
    m0 = fed.silos[0].mask(2, x[0])
    late = fed.silos[1].rounds[1].message  # round 1's message, sent again
    assert "stale or replayed" in str(fed.server.accept(1, 1, 1, late))
    assert "not the current epoch" in str(fed.server.accept(0, 0, 2, m0))
    assert "not in the roster" in str(fed.server.accept(9, 1, 2, m0))
    assert fed.server.accept(0, 1, 2, m0) is None
    assert "a second masked message" in str(fed.server.accept(0, 1, 2, m0))
    assert list(fed.server.received) == [0]


def test_shamir_any_threshold_subset_rebuilds_the_secret() -> None:
    secret = bytes(range(32))
    shares = shamir_split(secret, list(range(7)), 4)
    for subset in ([0, 1, 2, 3], [6, 4, 2, 0], [1, 3, 5, 6]):
        assert shamir_join({h: shares[h] for h in subset}, 4) == secret
    with pytest.raises(SecAggError, match="rebuild no 32-byte key"):  # 3 points of a cubic: a random field element
        shamir_join({h: shares[h] for h in [0, 1, 2]}, 3)
    with pytest.raises(SecAggError, match="2 share\\(s\\) cannot rebuild a key that needs 4"):
        shamir_join({h: shares[h] for h in [0, 1]}, 4)


def test_the_mask_generator_is_seeded_per_round_and_below_its_modulus() -> None:
    a, b = prg(b"s" * 32, 1, 1000, 40), prg(b"s" * 32, 2, 1000, 40)
    assert a.dtype == np.uint64 and not (a >> np.uint64(40)).any()
    assert np.array_equal(a, prg(b"s" * 32, 1, 1000, 40)) and not np.array_equal(a, b)
