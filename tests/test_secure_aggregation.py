"""All-present pairwise masking and the shared primitives (fedbandits.crypto.secure_aggregation), in process."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedbandits.crypto.secure_aggregation import (
    SecAggClient,
    SecAggError,
    SecAggServer,
    default_threshold,
    shamir_join,
    shamir_split,
)

BITS, WIDTH = 40, 4096
CHI2_15_999 = 37.7  # 99.9% quantile of chi-square with 15 degrees of freedom


def _federation(n: int, threshold: int | None = None) -> tuple[SecAggServer, list[SecAggClient]]:
    server = SecAggServer(b"deployment-digest", BITS, WIDTH)
    clients = [SecAggClient(i, BITS, WIDTH) for i in range(n)]
    _epoch(server, clients, threshold or default_threshold(n, 0, 0))
    return server, clients


def _epoch(server: SecAggServer, clients: list[SecAggClient], threshold: int) -> None:
    roster = server.publish({c.silo: c.advertise() for c in clients}, threshold)
    routed = server.route({c.silo: c.share(roster) for c in clients})
    for c in clients:
        c.receive(routed[c.silo])


def _inputs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << BITS, size=(n, WIDTH)).astype(np.uint64)


def _send(server: SecAggServer, clients: list[SecAggClient], x: np.ndarray, round_: int, skip: set[int]) -> None:
    server.open_round(round_)
    for c in clients:
        if c.silo not in skip:
            assert server.accept(c.silo, server.epoch, round_, c.mask(round_, x[c.silo])) is None


def _chi2_top_bits(values: np.ndarray) -> float:
    cells = (values >> np.uint64(BITS - 4)).astype(np.int64)
    counts = np.bincount(cells, minlength=16)
    return float(((counts - values.size / 16) ** 2 / (values.size / 16)).sum())


def _modsum(x: np.ndarray) -> np.ndarray:
    return x.sum(axis=0, dtype=np.uint64) & np.uint64((1 << BITS) - 1)


def test_the_masked_sum_is_the_exact_sum_and_each_message_is_uniform() -> None:
    server, clients = _federation(5)
    x = _inputs(5)
    x[:, :100] = 7  # a plaintext far from uniform
    _send(server, clients, x, 1, set())
    messages = list(server.received.values())
    assert all(_chi2_top_bits(m[:2048]) < CHI2_15_999 for m in messages)
    assert not any(np.any(m[:100] == 7) for m in messages[:1])  # masked
    np.testing.assert_array_equal(server.total(), _modsum(x))


def test_a_missing_mask_leaves_garbage_and_the_sum_is_refused() -> None:
    server, clients = _federation(6)
    x = _inputs(6, seed=1)
    _send(server, clients, x, 3, skip={2})
    assert server.dropped() == [2]
    survivors = [0, 1, 3, 4, 5]
    # without the missing silo's masks, the survivors' sum is uniform noise: nothing to release
    naive = _modsum(np.stack([server.received[j] for j in survivors]))
    assert _chi2_top_bits(naive) < CHI2_15_999
    assert not np.array_equal(naive, _modsum(x[survivors]))
    with pytest.raises(SecAggError, match=r"silos \[2\] sent no message"):
        server.total()
    assert server.accept(2, server.epoch, 3, clients[2].mask(3, x[2])) is None  # late, still in the round
    np.testing.assert_array_equal(server.total(), _modsum(x))


def test_replayed_foreign_and_malformed_messages_are_rejected() -> None:
    server, clients = _federation(4)
    x = _inputs(4, seed=3)
    _send(server, clients, x, 1, set())
    server.total()
    server.open_round(2)
    m0 = clients[0].mask(2, x[0])
    assert "stale or replayed" in str(server.accept(1, server.epoch, 1, clients[1].mask(1, x[1])))
    assert "not the current epoch" in str(server.accept(0, server.epoch - 1, 2, m0))
    assert "not in the roster" in str(server.accept(9, server.epoch, 2, m0))
    assert "must be 4096 uint64" in str(server.accept(0, server.epoch, 2, m0.astype(np.int64)))
    assert "below 2^40" in str(server.accept(0, server.epoch, 2, m0 | np.uint64(1 << 45)))
    assert server.accept(0, server.epoch, 2, m0) is None
    assert "a second masked message" in str(server.accept(0, server.epoch, 2, m0))
    assert list(server.received) == [0]


def test_shamir_any_threshold_subset_rebuilds_the_secret() -> None:
    secret = bytes(range(32))
    shares = shamir_split(secret, list(range(7)), 4)
    for subset in ([0, 1, 2, 3], [6, 4, 2, 0], [1, 3, 5, 6]):
        assert shamir_join({h: shares[h] for h in subset}, 4) == secret
    with pytest.raises(SecAggError, match="rebuild no 32-byte key"):  # 3 points of a cubic: a random field element
        shamir_join({h: shares[h] for h in [0, 1, 2]}, 3)


def test_threshold_default_and_state_pickles() -> None:
    assert default_threshold(10, 0, 0) == 6 and default_threshold(10, 0, 6) == 4
    assert default_threshold(10, 7, 0) == 8  # always above what the colluders pool
    server, clients = _federation(3)
    server2, client2 = pickle.loads(pickle.dumps((server, clients[0])))
    x = _inputs(3, seed=4)
    server2.open_round(1)
    for c in (client2, clients[1], clients[2]):
        assert server2.accept(c.silo, server2.epoch, 1, c.mask(1, x[c.silo])) is None
    np.testing.assert_array_equal(server2.total(), _modsum(x))
