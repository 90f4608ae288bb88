"""`POST /v1/rewards` answers as the OpenAPI document says, and refuses a value naming the request's
field (`reward`, `rewards[i].reward`), not the agent's argument.

The real answers of the handler are checked against the schemas the silo serves at /openapi.json by
a small validator of the keywords those schemas use; the schemas are also checked not to accept
answers of other shapes (they were once an empty object, which accepts anything)."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

with warnings.catch_warnings():  # starlette 1.x notes that its test client may move off httpx one day
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from fedbandits.serve.http import MAX_BATCH, Service
from fedbandits.serve.silo import ServingSilo
from servehelp import AUTH, DIM, SYNC, TOKEN, WallClock, config

CONFIG = config()
TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "null": type(None)}


def problems(value: Any, schema: dict[str, Any], at: str = "answer") -> list[str]:
    """Where ``value`` breaks ``schema`` (the JSON Schema keywords the silo's answer schemas use)."""
    if "oneOf" in schema:
        fits = [not problems(value, branch, at) for branch in schema["oneOf"]]
        return [] if sum(fits) == 1 else [f"{at}: fits {sum(fits)} of the oneOf branches, not exactly 1"]
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not any(isinstance(value, TYPES[k]) and not isinstance(value, bool) for k in kinds):
        return [f"{at}: {value!r:.40} is not {kinds}"]
    out = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 1 << 30):
        out.append(f"{at}: length {len(value)}")
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 1 << 30):
            out.append(f"{at}: {len(value)} items")
        for i, item in enumerate(value):
            out += problems(item, schema["items"], f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{at}: lacks {k!r}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties", True) is False:
            out += [f"{at}: {k!r} is not described" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                out += problems(v, props[k], f"{at}.{k}")
    return out


def test_the_rewards_answers_are_the_ones_the_openapi_document_describes(tmp_path):
    clock = WallClock()
    silo = ServingSilo(CONFIG, tmp_path / "silo", silo=0, now=clock, expiry_seconds=100.0)
    client = TestClient(Service(silo, TOKEN, SYNC).app)
    rng = np.random.default_rng(5)

    def decide() -> str:
        x = rng.standard_normal((5, DIM))
        body = {"features": (x / np.linalg.norm(x, axis=1, keepdims=True)).tolist()}
        return client.post("/v1/decisions", json=body, headers=AUTH).json()["decision_id"]

    responses = client.get("/openapi.json").json()["paths"]["/v1/rewards"]["post"]["responses"]
    answer = responses["200"]["content"]["application/json"]["schema"]
    single, batch = answer["oneOf"]
    expired, first, second = decide(), decide(), decide()
    clock.t += 60.0
    pending = decide()
    clock.t += 50.0  # the first three expire
    one = client.post("/v1/rewards", json={"decision_id": pending, "reward": 0.5}, headers=AUTH)
    assert one.status_code == 200 and problems(one.json(), answer) == [] and problems(one.json(), single) == []
    items = [(expired, 0.1), (pending, 0.1), ("nope-1", 0.1), (decide(), 7.0), (decide(), -0.2)]
    got = client.post(
        "/v1/rewards", json={"rewards": [{"decision_id": d, "reward": r} for d, r in items]}, headers=AUTH
    )
    results = got.json()
    assert [r["status"] for r in results["results"]] == [410, 409, 404, 422, 200]  # every status a batch item has
    assert problems(results, answer) == [] and problems(results, batch) == []
    assert problems(results, single) != []
    # the schemas describe these shapes only: each alteration of a real answer is caught
    for altered in (
        results["results"],  # no wrapper
        {**results, "count": 5},
        {"results": [{**results["results"][0], "learned": False}]},
        {"results": [{"decision_id": pending}]},
        {"results": [{"decision_id": pending, "status": 201}]},
        {"results": [{"decision_id": pending, "status": 200}] * (MAX_BATCH + 1)},
        {"status": "stored"},
        {**one.json(), "decision_id": pending},
    ):
        assert problems(altered, answer) != [], altered
    # the refusals are the one-line error object the document gives for each 4xx
    for code, body in [
        (409, {"decision_id": pending, "reward": 0.5}),
        (404, {"decision_id": "nope-2", "reward": 0.5}),
        (410, {"decision_id": first, "reward": 0.5}),
        (422, {"decision_id": second, "reward": (silo.agent.reward_bound or 0.0) + 1.0}),
    ]:
        r = client.post("/v1/rewards", json=body, headers=AUTH)
        assert r.status_code == code, (code, r.text)
        assert problems(r.json(), responses[str(code)]["content"]["application/json"]["schema"]) == []


def test_an_out_of_bound_reward_is_refused_naming_the_request_field(tmp_path):
    silo = ServingSilo(CONFIG, tmp_path / "silo", silo=0)
    client = TestClient(Service(silo, TOKEN, SYNC).app)
    rng = np.random.default_rng(6)
    ids = [
        client.post("/v1/decisions", json={"features": rng.uniform(-0.4, 0.4, (5, DIM)).tolist()}, headers=AUTH).json()[
            "decision_id"
        ]
        for _ in range(3)
    ]
    bound = silo.agent.reward_bound
    assert bound is not None
    digest = silo.agent.state_digest()
    r = client.post("/v1/rewards", json={"decision_id": ids[0], "reward": bound + 1.5}, headers=AUTH)
    assert r.status_code == 422
    expected = rf"^reward must be in \[{-bound:g}, {bound:g}\] \(the config's reward_bound\), got {bound + 1.5}$"
    assert re.match(expected, r.json()["error"]), r.json()["error"]
    batch = [{"decision_id": ids[1], "reward": 0.2}, {"decision_id": ids[2], "reward": -bound - 2.0}]
    got = client.post("/v1/rewards", json={"rewards": batch}, headers=AUTH).json()["results"]
    assert [g["status"] for g in got] == [200, 422]
    assert got[1]["error"].startswith(f"rewards[1].reward must be in [{-bound:g}, {bound:g}]"), got[1]["error"]
    assert silo.agent.counts["rewarded"] == 1 and silo.agent.state_digest() != digest  # the good item only
    # the refused ones are still pending: a good reward completes them
    for d in (ids[0], ids[2]):
        assert client.post("/v1/rewards", json={"decision_id": d, "reward": 0.1}, headers=AUTH).status_code == 200
    # a reward that is no number is refused before any is stored, naming the field too
    bad = client.post("/v1/rewards", json={"rewards": [{"decision_id": ids[0], "reward": "1"}]}, headers=AUTH)
    assert bad.status_code == 422 and bad.json()["error"].startswith("rewards[0].reward: must be a finite number")
