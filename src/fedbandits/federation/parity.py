"""The simulator's reference for a deployment, and a transport-free loopback of the protocol.

:func:`reference_run` plays the deployed entry of the config exactly as the simulator does
(:func:`fedbandits.sim.task.simulate_runs` builds the same environment and policy from the
same seeds) and records what the deployment must reproduce: every agent's action, every synced
prefix, every agent's regret.  :func:`compare` checks a deployment against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.crypto.secure_round import KEYS, MASKED, SURVIVORS, UNMASK, Ask, Epoch, Replies, Step
from fedbandits.federation.certs import trial_signing
from fedbandits.federation.server import Coordinator, Incoming, validate_release
from fedbandits.federation.shuffler import SERVER_ROLE, ShufflerCore
from fedbandits.federation.shuffler_client import encode_array
from fedbandits.federation.silo import Silo, SiloError, load_silo_results
from fedbandits.federation.spec import DeploySpec
from fedbandits.privacy.mechanisms import pack
from fedbandits.registry import ALGORITHMS, PolicyContext
from fedbandits.sim.seeding import choice_rngs, noise_rngs

#: synced statistics agree to this relative tolerance (they agree exactly in our runs: the
#: deployment adds the same numbers in the same order; the tolerance only covers BLAS changes)
PREFIX_RTOL = 1e-9


@dataclass
class Reference:
    actions: np.ndarray  # (T, M)
    prefixes: np.ndarray  # (K, P) synced prefix after each synchronisation
    regret: np.ndarray  # (T, M) per-round pseudo-regret


def reference_run(spec: DeploySpec) -> Reference:

    env = spec.build_env()
    alg = spec.config.algorithms[spec.algorithm_index]
    ctx = PolicyContext(
        1,
        env.n_agents,
        env.n_arms,
        env.dim,
        spec.horizon,
        noise_rngs(spec.noise_seed, [spec.run], spec.noise_stream),
        env=env,
        # a randomized learner's choices: the stream a derived silo's agent draws from (AgentSetup.choice_stream)
        choice_rngs=choice_rngs(spec.noise_seed, [spec.run], spec.noise_stream),
    )
    policy = ALGORITHMS[alg.name].factory(alg.params, ctx)
    T, M = spec.horizon, env.n_agents
    actions = np.zeros((T, M), dtype=np.int64)
    regret = np.zeros((T, M))
    prefixes = []
    for t in range(T):
        rnd = env.next_round()
        a = policy.step(rnd, env)
        actions[t] = a[0]
        means = rnd.means[0]
        regret[t] = means.max(axis=-1) - np.take_along_axis(means, a[0][:, None], axis=-1)[:, 0]
        if (t + 1) % spec.batch == 0:
            prefixes.append(pack(policy.synced_cov, policy.synced_bias)[0])
    return Reference(actions, np.array(prefixes).reshape(len(prefixes), -1), regret)


def compare(spec: DeploySpec, ref: Reference, prefixes: np.ndarray, silo_dirs: dict[int, Path]) -> list[str]:
    """Differences between a deployment (its synced prefixes, each silo's state) and the reference."""
    problems = []
    if prefixes.shape != ref.prefixes.shape:
        problems.append(f"synced prefixes: shape {prefixes.shape}, reference {ref.prefixes.shape}")
    elif not np.allclose(prefixes, ref.prefixes, rtol=PREFIX_RTOL, atol=1e-12):
        worst = float(np.abs(prefixes - ref.prefixes).max())
        problems.append(f"synced prefixes differ from the simulator's (max abs difference {worst:.3g})")
    for silo, folder in sorted(silo_dirs.items()):
        state = load_silo_results(folder, silo)
        mismatch = np.flatnonzero(state.actions != ref.actions[:, silo])
        if mismatch.size:
            problems.append(f"silo {silo}: {mismatch.size} action(s) differ, first at round {mismatch[0] + 1}")
    return problems


def run_loopback(
    spec: DeploySpec, state_dir: str | Path, data_files: dict[int, str | Path] | None = None
) -> Coordinator:
    """The whole protocol in one process, messages passed as Python objects: for tests and checks
    of the logic independent of the network.  The same validation as over the network; a shuffled
    protocol goes through a :class:`ShufflerCore` with the simulator's permutations.
    ``data_files`` gives silos their own data file (``data-files`` environment)."""
    state_dir = Path(state_dir)
    signing = trial_signing(state_dir / "signing", spec.silos) if spec.masked else None
    coord = Coordinator(spec, state_dir / "server", signing[0][1] if signing else None)
    files = data_files or {}
    # a parity trial: the simulator's (derived) noise, and every silo shares its trial report
    silos = [
        Silo(
            spec,
            i,
            state_dir / f"silo-{i}",
            "derived",
            data_file=files.get(i),
            share_report=True,
            signing=signing[i] if signing else None,
        )
        for i in range(spec.silos)
    ]
    registry = {1000 + i: i for i in range(spec.silos)}
    width = coord.width
    shuffler = ShufflerCore(spec, state_dir / "shuffler", "derived") if spec.shuffled else None
    for k in range(coord.next_round, spec.releases + 1):
        if spec.masked:
            _masked_round(spec, coord, silos, registry, k)
            continue
        prefix = coord.state.prefix
        accepted: dict[int, np.ndarray] = {}
        rejected: list[tuple[int, str]] = []
        seen: set[int] = set()
        for i, silo in enumerate(silos):
            msg = silo.release(k, prefix, k - 1)
            meta = {"silo_id": i, "digest": spec.digest, "phase": "sync", "round": k}
            arrays = {"psum": msg}
            if shuffler is not None:  # the p-sum goes to the shuffler, the server gets an acknowledgement
                shuffler.submit(f"silo-{i}", {**meta, "psum": encode_array(msg)})
                arrays = {}
            res = validate_release(
                spec,
                Incoming(1000 + i, meta, arrays),
                phase="sync",
                round_=k,
                registry=registry,
                seen=seen,
                width=width,
            )
            if isinstance(res, str):
                rejected.append((1000 + i, res))
            else:
                assert isinstance(res[1], np.ndarray)  # a sync payload is the p-sum
                seen.add(res[0])
                accepted[res[0]] = res[1]
        if shuffler is None:
            coord.close_round(k, accepted, rejected)
        else:
            done = shuffler.close(SERVER_ROLE, {"digest": spec.digest, "round": k})
            coord.close_shuffled_round(k, done.batch, sorted(accepted), rejected)
    for i, silo in enumerate(silos):
        report = silo.finish(coord.state.prefix, spec.releases)
        assert report is not None  # share_report above
        coord.state.reports[i] = report
    coord.state.finished = True
    coord.save()
    return coord


def _masked_round(spec: DeploySpec, coord: Coordinator, silos: list[Silo], registry: dict[int, int], k: int) -> None:
    """One ``distributed-dp`` round in process: every silo's release, then the protocol layer's
    secure round (as the ServerApp carries it over Flower) with the messages handed over in memory."""
    for silo in silos:
        silo.release(k, coord.state.prefix, k - 1)
    coord.secure_round(k, sorted(registry), carry_in_memory(coord, silos, k), [])


def carry_in_memory(
    coord: Coordinator, silos: list[Silo], k: int, present: set[int] | None = None
) -> Callable[[Step], Replies | None]:
    """A transport for :meth:`Coordinator.secure_round` that hands each step to the silo objects
    themselves (``present``: the silos that answer, the others dropped; node ``1000 + i`` is silo i).
    A silo's refusal becomes its answer's reason, as the Flower transport's error reply does."""
    answering = set(range(len(silos))) if present is None else present

    def answer(silo: Silo, step: Ask) -> Any:
        f = step.fields
        if step.phase == KEYS:
            return silo.advertise(f["epoch"])
        if step.phase == MASKED:
            return f["epoch"], silo.masked(k)
        if step.phase == SURVIVORS:
            return silo.sign_survivors(k, f["survivors"])
        assert step.phase == UNMASK
        return silo.unmask(k, f["survivors"], f["dropped"], f["signatures"], step.per_silo[silo.silo_id]["held"])

    def carry(step: Step) -> Replies | None:
        if isinstance(step, Epoch):
            coord.record_epoch(step.roster, list(step.tags.values()))
            for i in step.roster.members:
                silos[i].join(step.roster)
            return None
        replies: Replies = {}
        for i in sorted(answering if step.to is None else answering & set(step.to)):
            try:
                replies[i] = (1000 + i, answer(silos[i], step))
            except SiloError as exc:
                replies[i] = (1000 + i, str(exc))
        return replies

    return carry
