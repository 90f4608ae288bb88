"""The online agent with the streaming banded release (issue #49): no planned horizon (releases beyond
K, no budget epochs), a status that states the constant epsilon and the prefix noise's growth, secret
discrete noise calibrated over the band's coefficients, and a state file that keeps the band's batches.
Parity with the simulator (derived noise, bit for bit) is in tests/test_online_parity.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedbandits import Agent, config_from_dict
from fedbandits.online import AgentError, Aggregator
from fedbandits.privacy import discrete_gaussian as dg
from fedbandits.privacy.streaming import BandedStream

SILOS, DIM = 3, 3


def _config(protocol: str, band: int = 4, **extra: object):
    return config_from_dict(
        {
            "experiment": {"horizon": 40},  # K = 40 // 5 = 8 planned releases
            "environment": {"name": "gaussian-sphere", "agents": SILOS, "arms": 4, "dim": DIM},
            "algorithms": [
                {
                    "name": "fedlinucb",
                    "protocol": protocol,
                    "mechanism": "banded",
                    "band": band,
                    "batch": 5,
                    "epsilon": 1.0,
                    "delta": 1e-5,
                    **extra,
                }
            ],
        }
    )


def _round(agents: list[Agent], aggregator: Aggregator, rng: np.random.Generator) -> np.ndarray:
    for agent in agents:
        for _ in range(5):
            decision = agent.choose(rng.normal(size=(4, DIM)) / 2)
            agent.reward(decision.decision_id, float(rng.uniform(-1, 1)))
    prefix = aggregator.aggregate([agent.sync_payload() for agent in agents])
    for agent in agents:
        agent.apply_sync(prefix)
    return prefix


@pytest.mark.parametrize("protocol", ["ldp", "distributed-dp"])
def test_a_streaming_federation_syncs_past_its_planned_releases_under_one_guarantee(protocol: str) -> None:
    """3 x K = 24 rounds with secret noise: no round is refused, no budget is ever spent, new_epoch is refused
    in one line, and the status keeps epsilon_lifetime at the target while the prefix noise grows past the
    band as the strategy states (sqrt(M) sigma sqrt(prefix variance))."""
    config = _config(protocol)
    agents = [Agent.from_config(config, silo=i) for i in range(SILOS)]
    aggregator = Aggregator.from_config(config)
    rng = np.random.default_rng(0)
    first = agents[0].status()
    assert first["epsilon_lifetime"] == 0.0 and first["releases_left"] is None and first["releases_planned"] is None
    for _ in range(24):
        _round(agents, aggregator, rng)
        assert not agents[0].budget_spent()
    with pytest.raises(AgentError, match="a streaming release has no budget epochs"):
        agents[0].new_epoch()
    status = agents[0].status()
    assert status["syncs"] == 24 and status["horizon_of_guarantee"].startswith("unbounded")
    assert status["epsilon_lifetime"] <= 1.0 and status["delta_lifetime"] == 1e-5 and status["stream_band"] == 4
    stream = BandedStream(4)
    growth = status["prefix_noise_std_at_10x"] / status["prefix_noise_std"]
    assert growth == pytest.approx(math.sqrt(stream.prefix_variance_at(240) / stream.prefix_variance_at(24)))
    assert growth > 2.5  # past the band the variance grows linearly: about sqrt(10)


def test_the_secret_noise_is_calibrated_over_the_bands_coefficients() -> None:
    """The agent's exact discrete noise meets the target by the zCDP accounting of the band's 4 rounded
    messages with coefficients c_0..c_3 (each paying its rounding once); 0.99 of it would not (the
    calibration is tight to 1e-6), and a tree's 4 full-coefficient p-sums would need more noise."""
    agent = Agent.from_config(_config("ldp"), silo=0)
    secret = agent.setup.secret_noise()
    assert secret is not None and secret.epsilon_spent <= 1.0
    column = tuple(float(c) for c in BandedStream(4).column)
    sens = agent.setup.fed_params.privacy_spec().sensitivity()
    args = (secret.grid, sens.cov, sens.bias, DIM, column)
    shrunk = dg.release_rho(0.99 * secret.sigma_cov, 0.99 * secret.sigma_bias, *args)
    assert dg.zcdp_epsilon(shrunk, 1e-5) > 1.0
    flat = dg.release_rho(secret.sigma_cov, secret.sigma_bias, secret.grid, sens.cov, sens.bias, DIM, 4)
    assert flat > dg.release_rho(secret.sigma_cov, secret.sigma_bias, *args)
    assert isinstance(agent.randomizer, dg.SecretStreamRandomizer)


def test_a_saved_agent_continues_its_stream(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Saved after 6 releases (past the band of 4) and loaded: the ring of batches and the release count
    come back, so with derived noise the next message is the one the unsaved agent sends, bit for bit."""
    config = _config("ldp")
    agents = [Agent.from_config(config, silo=i, seed=3) for i in range(SILOS)]
    aggregator = Aggregator.from_config(config)
    rng = np.random.default_rng(1)
    for _ in range(6):
        _round(agents, aggregator, rng)
    agents[0].save(tmp_path / "a.npz")
    loaded = Agent.load(tmp_path / "a.npz")
    assert loaded.randomizer is not None and loaded.randomizer.k == 6
    np.testing.assert_array_equal(loaded.randomizer.encoder.past, agents[0].randomizer.encoder.past)  # type: ignore[union-attr]
    for agent in (agents[0], loaded):
        decision = agent.choose(np.eye(4, DIM))
        agent.reward(decision.decision_id, 0.5)
    np.testing.assert_array_equal(loaded.sync_payload(), agents[0].sync_payload())


def test_a_skipped_release_is_an_empty_batch() -> None:
    """A silo that was down skips a release: its ring takes an empty batch and it keeps counting, so its next
    message is the one it would send had that batch been empty."""
    config = _config("ldp")
    a, b = (Agent.from_config(config, silo=0, seed=5) for _ in range(2))
    a.skip_release(5)
    b.sync_payload()  # an empty batch, sent (b's noise stream moves on by one release, a's does not)
    assert a.randomizer is not None and b.randomizer is not None
    assert a.randomizer.k == b.randomizer.k == 1
    np.testing.assert_array_equal(a.randomizer.encoder.past, b.randomizer.encoder.past)  # type: ignore[union-attr]
