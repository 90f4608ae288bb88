"""One federation, two transports (issue #45): the deployment's silos and coordinator (here their
loopback driver: the Flower apps only carry these calls, tests/test_federation.py) and the HTTP
service's silos and coordinator make the same releases and the same synced prefixes, bit for bit,
from the same config, seeds and users.  Both drive the one silo object (the online agent) and close
their rounds through the one aggregator.

The service draws its noise from the OS by design; for the comparison its silos' randomizers are
replaced by the simulator's seeded ones, which the deployment's ``derived`` noise source uses too.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from fedbandits.config import config_from_dict  # noqa: E402
from fedbandits.federation.certs import trial_signing  # noqa: E402
from fedbandits.federation.parity import run_loopback  # noqa: E402
from fedbandits.federation.silo import load_silo_results  # noqa: E402
from fedbandits.federation.spec import make_spec  # noqa: E402
from fedbandits.registry import ENVIRONMENTS  # noqa: E402
from fedbandits.serve.coordinator import Coordinator  # noqa: E402
from fedbandits.serve.http import Service  # noqa: E402
from fedbandits.serve.links import HttpLink  # noqa: E402
from fedbandits.serve.silo import ServingSilo  # noqa: E402
from fedbandits.sim.seeding import env_rngs  # noqa: E402

M, T, B = 3, 40, 10
TOKEN, SYNC = "traffic-token-0123456789", "sync-token-0123456789ab"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config(protocol: str) -> dict:
    algorithm = {"name": "fedlinucb", "batch": B, "protocol": protocol}
    if protocol != "none":  # rewards y in about [-1.5, 1.5]: a bound no reward reaches, so none is clipped
        algorithm.update(epsilon=5.0, delta=0.01, reward_bound=4.0)
    return {
        "experiment": {"seed": 7, "horizon": T},
        "environment": {"name": "gaussian-sphere", "agents": M, "arms": 6, "dim": 4},
        "algorithms": [algorithm],
    }


class Router(httpx.BaseTransport):
    """The coordinator's HTTPS requests, handed to the in-process silos by host."""

    def __init__(self, clients: dict[str, TestClient]) -> None:
        self.clients = clients

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.clients[request.url.host]._transport.handle_request(request)


def serve_federation(tmp_path, cfg: dict, seed: int):
    """M serving silos with the simulator's seeded randomizers, and the coordinator over HTTP."""
    masked = cfg["algorithms"][0]["protocol"] == "distributed-dp"
    ids = trial_signing(tmp_path / "signing", M) if masked else [None] * M
    silos, clients = [], {}
    for i in range(M):
        silo = ServingSilo(cfg, tmp_path / f"serve-{i}", silo=i, allow_unprivatized=True, signing=ids[i])
        agent = silo.agent
        if agent.private:  # the deployment's `derived` noise: silo i's stream of run 0 under `seed`
            agent.randomizer = agent.setup.randomizer(agent.setup.noise_stream(i, seed))
            agent.noise_source = "derived"
        silos.append(silo)
        clients[f"silo{i}"] = TestClient(Service(silo, TOKEN, SYNC).app)
    link = HttpLink([f"http://silo{i}" for i in range(M)], SYNC, transport=Router(clients))
    return silos, clients, Coordinator(cfg, link, tmp_path / "serve-server")


@pytest.mark.parametrize("protocol", ["none", "ldp", "distributed-dp"])
def test_the_deployment_and_the_service_release_and_sync_alike(tmp_path, protocol):
    cfg = config(protocol)
    spec = make_spec(config_from_dict(cfg))
    coord = run_loopback(spec, tmp_path / "deploy")
    deployed = [load_silo_results(tmp_path / "deploy" / f"silo-{i}", i) for i in range(M)]

    silos, clients, coordinator = serve_federation(tmp_path, cfg, spec.noise_seed)
    env_cfg = spec.config.environment
    env = ENVIRONMENTS[env_cfg.name].factory(env_cfg.params, env_rngs(cfg["experiment"]["seed"], [0]))
    prefixes = []
    for t in range(T):  # the users the deployment's silos served, sent to the service's
        rnd = env.next_round()
        for i in range(M):
            features = rnd.features[0, i]
            answer = clients[f"silo{i}"].post("/v1/decisions", json={"features": features.tolist()}, headers=AUTH)
            arm = answer.json()["arm"]
            assert arm == deployed[i].actions[t]  # the same choice
            y = float(env.rewards(rnd.means[:, i : i + 1, arm], rnd.noise[:, i : i + 1])[0, 0])
            body = {"decision_id": answer.json()["decision_id"], "reward": y}
            assert clients[f"silo{i}"].post("/v1/rewards", json=body, headers=AUTH).status_code == 200
        if (t + 1) % B == 0:
            tick = coordinator.tick()
            if protocol == "distributed-dp" and not tick.closed:  # the first tick set up the keys
                tick = coordinator.tick()
            assert tick.closed and tick.delivered == list(range(M))
            prefixes.append(coordinator.latest()[2])

    np.testing.assert_array_equal(np.stack(prefixes), coord.synced_prefixes())
    for i, silo in enumerate(silos):
        for k in range(1, T // B + 1):
            if protocol != "distributed-dp":  # masked, the stored bytes differ by their masks by design
                np.testing.assert_array_equal(silo.store.release(0, k - 1).payload, deployed[i].messages[k])
        np.testing.assert_array_equal(silo.agent.state.gram, deployed[i].agent.state.gram)
        np.testing.assert_array_equal(silo.agent.state.bias, deployed[i].agent.state.bias)
