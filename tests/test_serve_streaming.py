"""A serving federation with the streaming banded release (issue #49, item 2): it syncs past the K
releases a tree would stop or renew at, under one guarantee; the silos' and the coordinator's status
and metrics state the constant epsilon and the growth of the prefix noise; ``renew`` starts no epoch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedbandits.privacy.streaming import BandedStream
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.links import HttpLink
from fedbandits.serve.silo import ServingSilo
from test_serve import AUTH, LDP, SYNC, config, federation, traffic


@pytest.mark.parametrize("protocol", ["ldp", "distributed-dp"])
@pytest.mark.parametrize("policy", ["stop", "renew"])
def test_a_streaming_federation_syncs_past_k_under_one_guarantee(tmp_path, protocol, policy):
    """K = 4 planned releases, a band of 2: 10 rounds close in epoch 0 whatever the budget policy; the
    epsilon stays the first release's; the prefix noise std grows as the band's prefix variance says."""
    cfg = config({**LDP, "protocol": protocol, "mechanism": "banded", "band": 2})
    silos, clients, _, coordinator = federation(tmp_path, policy=policy, cfg=cfg)
    rng = np.random.default_rng(3)
    for k in range(10):
        traffic(clients, rng, 2)
        tick = coordinator.tick()
        assert tick.closed and (tick.epoch, tick.round) == (0, k)
    assert not coordinator.finished
    status = silos[0].status()
    assert status["epoch"] == 0 and status["releases_left"] is None and status["horizon_of_guarantee"]
    assert 0 < status["epsilon_lifetime"] <= 1.0 and status["syncs"] == 10
    stream = BandedStream(2)
    ratio = status["prefix_noise_std_at_10x"] / status["prefix_noise_std"]
    assert ratio == pytest.approx(math.sqrt(stream.prefix_variance_at(100) / stream.prefix_variance_at(10)))
    server = coordinator.status()
    assert server["releases_per_epoch"] is None and server["horizon_of_guarantee"]
    assert server["epsilon_lifetime"] == 1.0 and server["model_version"] == "0.9"
    metrics = clients["silo0"].get("/metrics", headers=AUTH).text
    assert "fedbandits_prefix_noise_std " in metrics and "fedbandits_releases_left " not in metrics


@pytest.mark.parametrize("protocol", ["ldp", "distributed-dp"])
def test_restarted_silos_and_coordinator_resume_the_stream(tmp_path, protocol):
    """6 rounds (3 bands of 2), then every silo and the coordinator reopened from their folders (what a
    restart after kill -9 sees): each agent's state digest (the band's batches included) and the
    coordinator's decoder are the ones before, and the next round closes as round 6 of epoch 0."""
    cfg = config({**LDP, "protocol": protocol, "mechanism": "banded", "band": 2})
    silos, clients, router, coordinator = federation(tmp_path, cfg=cfg)
    rng = np.random.default_rng(4)
    for _ in range(6):
        traffic(clients, rng, 2)
        assert coordinator.tick().closed
    digests = [s.agent.state_digest() for s in silos]
    decoder = coordinator.ledger.aggregator
    before = (decoder.analyzer or decoder.modular.decoder).inverse.past.copy()  # type: ignore[union-attr]
    prefix = coordinator.latest()[2].copy()
    coordinator.close()
    for i in range(3):
        again = ServingSilo(cfg, tmp_path / f"silo-{i}", silo=i, signing=silos[i].signing)
        assert again.agent.state_digest() == digests[i]
        assert again.agent.randomizer.k == 6  # type: ignore[union-attr]
    urls = [f"http://silo{i}" for i in range(3)]
    reopened = Coordinator(cfg, HttpLink(urls, SYNC, transport=router), tmp_path / "server")
    aggregator = reopened.ledger.aggregator
    np.testing.assert_array_equal((aggregator.analyzer or aggregator.modular.decoder).inverse.past, before)  # type: ignore[union-attr]
    np.testing.assert_array_equal(reopened.latest()[2], prefix)
    traffic(clients, rng, 2)
    tick = reopened.tick()
    assert tick.closed and (tick.epoch, tick.round) == (0, 6)
