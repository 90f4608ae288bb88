"""distributed-dp in the deployment's logic (no network): parity, dropouts, validation, secret shares."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedbandits.config import loads_config
from fedbandits.crypto.double_masking import Masked, secure_threshold
from fedbandits.federation.certs import trial_signing
from fedbandits.federation.deployment_results import deployment_results
from fedbandits.federation.parity import compare, reference_run, run_loopback
from fedbandits.federation.server import Coordinator, Incoming, validate_release
from fedbandits.federation.silo import Silo, SiloError
from fedbandits.federation.spec import make_spec
from fedbandits.sim.runner import run_experiment


def _spec(agents: int = 4, horizon: int = 135, extra: str = ""):  # type: ignore[no-untyped-def]
    return make_spec(
        loads_config(
            f"""
[experiment]
seed = 7
horizon = {horizon}
[environment]
name = "gaussian-sphere"
agents = {agents}
arms = 20
dim = 4
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "distributed-dp"
epsilon = 5.0
delta = 0.01
{extra}
"""
        )
    )


def test_loopback_decodes_exactly_the_simulators_sums(tmp_path: Path) -> None:
    spec = _spec()
    ref = reference_run(spec)
    coord = run_loopback(spec, tmp_path)
    assert compare(spec, ref, coord.synced_prefixes(), {i: tmp_path / f"silo-{i}" for i in range(4)}) == []
    assert np.array_equal(coord.synced_prefixes(), ref.prefixes)  # bit for bit: the masks cancel exactly
    sim = run_experiment(spec.config.with_experiment(runs=1))
    deployed = [coord.state.reports[i]["curve"][-1] for i in range(4)]
    np.testing.assert_allclose(deployed, sim.algorithms[spec.label].per_agent[0], rtol=1e-12)
    assert coord.state.epochs == 1  # nobody dropped: one key set-up for the whole run
    report = deployment_results(spec, coord, 0.0).algorithms[spec.label].report
    assert (
        report["guarantee"] == "formal"
        and report["min_present"] == 4
        and "pairwise masking" in str(report["secret_noise_sampler"])
    )
    # the silos served every user: the clipped shares have the simulator's counts and denominator
    simulated = sim.algorithms[spec.label].report
    assert report["observations"] == simulated["observations"] == 4 * 135
    for key in ("clipped_features", "clipped_rewards"):
        assert report[key] == simulated[key]
    # and so it warns as the simulator does (rewards of mean near 1 + N(0, 1/4) clipped at B = 1)
    deployed_warnings = deployment_results(spec, coord, 0.0).clipping_warnings()
    assert deployed_warnings == sim.clipping_warnings() and "raise its reward_bound" in deployed_warnings[0]


def _setup(spec, tmp_path: Path) -> tuple[Coordinator, list[Silo]]:  # type: ignore[no-untyped-def]
    signing = trial_signing(tmp_path / "signing", spec.silos)
    coord = Coordinator(spec, tmp_path / "server", signing[0][1])
    silos = [Silo(spec, i, tmp_path / f"silo-{i}", "derived", signing=signing[i]) for i in range(spec.silos)]
    secagg = coord.state.secagg
    assert secagg is not None
    adverts = {i: s.advertise(secagg.next_epoch) for i, s in enumerate(silos)}
    roster = secagg.publish(adverts, secure_threshold(len(adverts), spec.params.colluders))
    coord.record_epoch(roster, NODES[: spec.silos])
    for s in silos:
        s.join(roster)
    return coord, silos


NODES = [1000 + i for i in range(40)]


def _send(coord: Coordinator, silos: list[Silo], k: int, present: tuple[int, ...]) -> dict[int, np.ndarray]:
    """Round ``k`` with the ``present`` silos' masked releases; their residues."""
    coord.state.secagg.open_round(k)
    residues = {}
    for i in present:
        silos[i].release(k, coord.state.prefix, k - 1)
        residues[i] = silos[i].state.messages[k]
        assert coord.state.secagg.accept(i, coord.state.secagg.epoch, k, silos[i].masked(k)) is None  # type: ignore[union-attr]
    return residues


def _unmask(coord: Coordinator, silos: list[Silo], k: int) -> dict:  # type: ignore[type-arg]
    """The honest consistency check and unmask step of round ``k``."""
    survivors, dropped = coord.state.secagg.close_messages(), coord.state.secagg.dropped()
    for j in survivors:
        assert coord.state.secagg.accept_signature(j, silos[j].sign_survivors(k, survivors)) is None
    secagg = coord.state.secagg
    assert secagg is not None
    return {j: silos[j].unmask(k, survivors, dropped, dict(secagg.signatures), secagg.shares_for(j)) for j in survivors}


def test_a_silo_missing_from_a_round_is_removed_and_the_epoch_goes_on(tmp_path: Path) -> None:
    spec = _spec(extra="dropouts = 1")
    coord, silos = _setup(spec, tmp_path)
    residues = _send(coord, silos, 1, (0, 1, 3))  # silo 2 never answers
    assert coord.state.secagg.dropped() == [2]
    prefix = coord.close_masked_round(1, _unmask(coord, silos, 1), [])
    codec = spec.distributed().codec(spec.dim())
    exact = codec.decode(codec.centred(np.sum([residues[i] for i in residues], axis=0, dtype=np.uint64) & codec.mask))
    np.testing.assert_array_equal(prefix, exact)  # the survivors' sum, exactly
    assert coord.state.rounds[0].missing == [2]
    assert not coord.needs_epoch(NODES[:4])  # no key was revealed: silo 2 comes back with the same keys
    _send(coord, silos, 2, (0, 1, 2, 3))
    coord.close_masked_round(2, _unmask(coord, silos, 2), [])
    assert coord.state.rounds[1].missing == [] and coord.state.epochs == 1
    report = deployment_results(spec, coord, 0.0).algorithms[spec.label].report
    assert report["min_present"] == 3 and report["short_rounds"] == 0 and report["guarantee"] == "formal"


def test_an_unprovisioned_dropout_releases_nothing_and_keeps_the_guarantee(tmp_path: Path) -> None:
    """dropouts = 0: the noise is calibrated for sums of all 4 silos.  With silo 3 missing the
    survivors refuse to sign a list of 3 (t = 3 would allow it): the round closes without data,
    whoever runs the server, and the report stays formal."""
    spec = _spec()  # dropouts = 0
    coord, silos = _setup(spec, tmp_path)
    _send(coord, silos, 1, (0, 1, 2))
    survivors = coord.state.secagg.close_messages()
    with pytest.raises(SiloError, match="provisioned for sums of at least 4 silos"):
        silos[0].sign_survivors(1, survivors)
    prefix = coord.close_masked_round(1, {}, [])
    assert not prefix.any() and coord.state.rounds[0].accepted == []
    report = deployment_results(spec, coord, 0.0).algorithms[spec.label].report
    assert report["guarantee"] == "formal" and report["min_present"] == 4


def test_a_round_whose_masks_cannot_be_removed_closes_empty_and_costs_no_guarantee(tmp_path: Path) -> None:
    """Fewer survivors than t = 3 of 4: their self-masks cannot be rebuilt, so the round closes as an
    empty node (nobody's data released, the prefix does not move; the epoch goes on), and the
    report's worst round is taken over rounds that released data only."""
    spec = _spec()
    coord, silos = _setup(spec, tmp_path)
    _send(coord, silos, 1, (0, 1))
    survivors = coord.state.secagg.close_messages()
    with pytest.raises(SiloError, match="fewer than the threshold 3"):
        silos[0].sign_survivors(1, survivors)
    prefix = coord.close_masked_round(1, {}, [])
    assert not prefix.any() and coord.state.rounds[0].accepted == [] and not coord.needs_epoch(NODES[:4])
    report = deployment_results(spec, coord, 0.0).algorithms[spec.label].report
    # counted as short (more missing than provisioned), but it released nothing: still formal
    assert report["min_present"] == 4 and report["short_rounds"] == 1 and report["guarantee"] == "formal"
    assert coord.close_without_data(2, []).shape == (spec.width(),) and coord.state.completed == 2
    with pytest.raises(ValueError, match="round 4 cannot close: 2 rounds are completed"):
        coord.close_without_data(4, [])


def test_masked_messages_are_validated_and_replays_refused(tmp_path: Path) -> None:
    spec = _spec()
    coord, silos = _setup(spec, tmp_path)
    coord.state.secagg.open_round(1)
    silos[0].release(1, None, 0)
    good = silos[0].masked(1)
    width = coord.width

    def check(arrays: dict[str, np.ndarray]) -> object:
        meta = {"silo_id": 0, "digest": spec.digest, "phase": "sync", "round": 1, "epoch": 1}
        return validate_release(
            spec, Incoming(1000, meta, arrays), phase="sync", round_=1, registry=None, seen=set(), width=width
        )

    assert "expected exactly one array 'masked'" in str(check({"psum": good.masked.astype(np.float64)}))
    assert "uint64 residues" in str(check({"masked": good.masked.astype(np.int64)}))
    assert "uint64 residues" in str(check({"masked": good.masked[:-1]}))
    assert "self-mask share for each" in str(
        coord.state.secagg.accept(0, 1, 1, Masked(good.masked, {}, good.commitment))
    )
    res = check({"masked": good.masked})
    assert not isinstance(res, str) and res[0] == 0 and np.array_equal(res[1], good.masked)  # type: ignore[arg-type]
    assert coord.state.secagg.accept(0, 1, 1, good) is None
    assert "second masked message" in str(coord.state.secagg.accept(0, 1, 1, good))
    assert "not the current epoch" in str(coord.state.secagg.accept(1, 7, 1, good))
    assert "stale or replayed" in str(coord.state.secagg.accept(1, 1, 2, good))


def test_a_restarted_silo_resends_the_same_residues_and_mask(tmp_path: Path) -> None:
    spec = _spec()
    _, silos = _setup(spec, tmp_path)
    silos[1].release(1, None, 0)
    first, masked = silos[1].state.messages[1].copy(), silos[1].masked(1)
    again = Silo(spec, 1, tmp_path / "silo-1", "derived", signing=silos[1].signing)  # from the durable state
    np.testing.assert_array_equal(again.release(1, None, 0), first)
    np.testing.assert_array_equal(again.masked(1).masked, masked.masked)  # the same self-mask, not a new one
    assert again.masked(1).blobs == masked.blobs


def test_a_silo_draws_secret_exact_shares_by_default(tmp_path: Path) -> None:
    """40 silos' first releases with secret (os) noise: the share in every entry is the residue minus
    the rounded data; its variance over 40 x 14 = 560 entries is the share's s^2 within 30% (5 sd of a
    sample variance, sqrt(2/560) = 6%); two silos from the same state never draw the same shares."""
    spec = _spec(agents=40, horizon=40)
    cal = spec.distributed()
    codec = cal.codec(spec.dim())
    shares = []
    signing = trial_signing(tmp_path / "signing", 40)
    for i in range(40):
        silo = Silo(spec, i, tmp_path / f"s{i}", signing=signing[i])
        residues = silo.release(1, None, 0)
        gamma = silo.state.agent.randomizer.exact[0, 0, 0]  # type: ignore[union-attr]
        shares.append(codec.centred(residues) - codec.encode(gamma))
    values = np.concatenate(shares).astype(np.float64)
    assert np.var(values) / cal.share_sigma**2 == pytest.approx(1.0, abs=5 * math.sqrt(2 / values.size))
    assert abs(values.mean()) < 5 * cal.share_sigma / math.sqrt(values.size)
    assert not np.array_equal(shares[0], shares[1])
