"""The OpenAPI 3.1 description of a serving silo's API, served at ``GET /openapi.json``.

Written out rather than generated: the handlers check their bodies themselves (one-line errors
naming the field), so this is the contract they enforce, kept beside them; tests/test_serve.py
checks that every route is described and every described path is routed, tests/test_serve_rewards.py
that the rewards' real answers are the ones described.
"""

from __future__ import annotations

from typing import Any

from fedbandits._version import __version__

_ERROR = {
    "description": "refused: one line naming the field",
    "content": {
        "application/json": {
            "schema": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
        }
    },
}
_ID = {"type": "string", "minLength": 1, "maxLength": 100}
_REWARD = {
    "type": "object",
    "additionalProperties": False,
    "required": ["decision_id", "reward"],
    "properties": {"decision_id": _ID, "reward": {"type": "number"}},
}

#: the answer to one reward: 200 only when learned (404, 409, 410, 422 are errors, one line each)
_LEARNED = {
    "type": "object",
    "additionalProperties": False,
    "required": ["status"],
    "properties": {"status": {"type": "string", "enum": ["learned"]}},
}


def _batch_answer(max_batch: int) -> dict[str, Any]:
    """The answer to a batch of rewards: one result per item, in order (a 503 fails the whole batch)."""
    result = {
        "type": "object",
        "additionalProperties": False,
        "required": ["decision_id", "status"],
        "properties": {
            "decision_id": _ID,
            "status": {
                "type": "integer",
                "enum": [200, 404, 409, 410, 422],
                "description": "200 learned, 404 unknown decision, 409 already rewarded, 410 expired (counted, not "
                "learned), 422 a bad value",
            },
            "error": {"type": "string", "description": "with a status other than 200: one line naming the field"},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["results"],
        "properties": {"results": {"type": "array", "minItems": 1, "maxItems": max_batch, "items": result}},
    }


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _post(summary: str, body: dict[str, Any], answer: dict[str, Any], errors: tuple[int, ...]) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "done", **_json(answer)}}
    responses.update({str(code): _ERROR for code in (*errors, 401, 413)})
    return {"post": {"summary": summary, "requestBody": {"required": True, **_json(body)}, "responses": responses}}


def _get(summary: str, answer: dict[str, Any], secured: bool = True) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "ok", **answer}}}
    if not secured:
        op["security"] = []
    return {"get": op}


def _decision_request(max_arms: int) -> dict[str, Any]:
    """The body of ``POST /v1/decisions``."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["features"],
        "properties": {
            "features": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_arms,
                "items": {"type": "array", "items": {"type": "number"}},
                "description": "K candidate arms, d numbers each",
            },
            "context_id": {"type": "string", "maxLength": 200},
            "user_id": {
                "oneOf": [
                    {"type": "integer", "minimum": 0},
                    {"type": "string", "minLength": 1, "maxLength": 256},
                ],
                "description": "the user served: required with privacy_unit = 'user' (compared as text)",
            },
        },
    }


def document(max_arms: int, max_batch: int, max_body: int) -> dict[str, Any]:
    obj = {"type": "object"}
    sync = {"epoch": {"type": "integer", "minimum": 0}, "round": {"type": "integer", "minimum": 0}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fedbandits serving silo",
            "version": __version__,
            "description": f"Live decisions of one silo (docs/serving.md).  Bodies: strict JSON, at most {max_body} "
            "bytes.  Every route but /healthz, /dashboard and /openapi.json needs a bearer token: the traffic "
            "token, or the federation's sync token for /v1/sync/*.",
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/decisions": _post(
                "choose an arm for one user",
                _decision_request(max_arms),
                {
                    "type": "object",
                    "properties": {
                        "arm": {"type": "integer"},
                        "decision_id": _ID,
                        "propensity": {"type": "number", "description": "the probability the arm was chosen with"},
                        "model_version": {"type": ["string", "null"]},
                    },
                },
                (400, 422, 503),
            ),
            "/v1/rewards": _post(
                "complete decisions: one reward, or a batch answered item by item",
                {
                    "oneOf": [
                        _REWARD,
                        {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["rewards"],
                            "properties": {
                                "rewards": {"type": "array", "minItems": 1, "maxItems": max_batch, "items": _REWARD}
                            },
                        },
                    ]
                },
                {"oneOf": [_LEARNED, _batch_answer(max_batch)]},
                (400, 404, 409, 410, 422, 503),
            ),
            "/v1/status": _get("counts, model version, sync state, privacy spent, latency", _json(obj)),
            "/v1/series": _get("decisions, rewards and reward sum per second, the last hour", _json(obj)),
            "/metrics": _get("Prometheus text format", {"content": {"text/plain": {"schema": {"type": "string"}}}}),
            "/healthz": _get("liveness (503 once the event log failed)", {}, secured=False),
            "/dashboard": _get("the dashboard page (no data in it)", {}, secured=False),
            "/openapi.json": _get("this document", _json(obj), secured=False),
            "/v1/sync/release": _post(
                "the release of sync round (epoch, round)", {"type": "object", "properties": sync}, obj, (400, 409, 503)
            ),
            "/v1/sync/prefix": _post(
                "adopt the prefix of a closed round",
                {"type": "object", "properties": {**sync, "prefix": {"type": "string", "contentEncoding": "base64"}}},
                obj,
                (400, 422, 503),
            ),
            "/v1/sync/keys": _post("secure aggregation: this silo's public keys, signed", obj, obj, (400, 409)),
            "/v1/sync/roster": _post("secure aggregation: check and join the roster", obj, obj, (400, 409, 422)),
            "/v1/sync/survivors": _post(
                "secure aggregation: sign the round's survivor list", obj, obj, (400, 409, 422)
            ),
            "/v1/sync/unmask": _post("secure aggregation: this silo's unmask answer", obj, obj, (400, 409, 422)),
        },
    }
