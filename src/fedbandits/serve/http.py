"""The serving silo's HTTP API (Starlette; ``fedbandits serve silo`` runs it on uvicorn).

    POST /v1/decisions      {"features": [[...], ...] (K x d), "context_id": "..."?, "user_id": ...?}
                            -> {"arm": i, "decision_id": "...", "model_version": "e.r" | null}
    POST /v1/rewards        {"decision_id": "...", "reward": r}  or  {"rewards": [{...}, ...]}
    GET  /v1/status         counts, model version, last sync, privacy spent and releases left
    GET  /metrics           the same figures and request latencies, Prometheus text format
    GET  /healthz           200 "ok" (no credentials; 503 once the event log failed)
    GET  /openapi.json      the OpenAPI 3.1 description of these routes (fedbandits.serve.openapi)
    GET  /dashboard         the silo's dashboard page (no data in it; its script reads /v1/status with the token)
    POST /v1/sync/release   {"epoch": e, "round": r}            (the server's token)
    POST /v1/sync/prefix    {"epoch": e, "round": r, "prefix": base64 float64}  (the server's token)
    POST /v1/sync/keys, /v1/sync/roster, /v1/sync/survivors, /v1/sync/unmask
                            distributed-dp's secure aggregation (the server's token; fedbandits.serve.masking)

Every request but ``/healthz`` needs ``Authorization: Bearer <token>``: the traffic token for the
first four, the federation's sync token for ``/v1/sync/*``.  A bad request gets a 4xx whose body
is one line ``{"error": "..."}`` naming the field, and nothing is stored.  A single reward answers
200 (learned), 404 (unknown decision id), 409 (already rewarded), 410 (expired: counted, not
learned) or 422 (a bad value, named ``reward``); a batch answers 200 ``{"results": [...]}`` with one
such status per item, in order (a bad value named ``rewards[i].reward``), after checking the batch's
shape (a malformed batch stores nothing).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from fedbandits.serve import dashboard, masking, openapi
from fedbandits.serve.metrics import Latencies, prometheus_text
from fedbandits.serve.shuffling import SiloShuffling
from fedbandits.serve.silo import ServeError, ServingSilo

#: request bodies above this many bytes are refused (413) unread
MAX_BODY = 1 << 20
MAX_ARMS = 10_000
MAX_BATCH = 1_000
MAX_CONTEXT_ID = 200


class BadRequest(ServeError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status, message)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message.splitlines()[0] if message else "error"}, status_code=status)


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client is not None else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _body(request: Request) -> Any:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        raise BadRequest(f"body: larger than {MAX_BODY} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(f"body: larger than {MAX_BODY} bytes", 413)
        chunks.append(chunk)
    try:
        return orjson.loads(b"".join(chunks))  # strict JSON (no NaN literals), about 4x the stdlib's speed
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body: not JSON ({str(exc)[:80]})") from None


def _object(body: Any, keys: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("body: must be a JSON object")
    unknown = sorted(set(body) - keys)
    if unknown:
        raise BadRequest(f"body: unknown field(s) {unknown}; valid: {sorted(keys)}")
    missing = sorted(required - set(body))
    if missing:
        raise BadRequest(f"body: missing field(s) {missing}")
    return body


def _integer(body: dict[str, Any], name: str) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name}: must be an integer >= 0, got {str(value)[:40]!r}")
    return value


def _reward_value(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(f"{name}: must be a finite number, got {str(value)[:40]!r}", 422)
    return float(value)


def _decision_id(value: Any, name: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 100:
        raise BadRequest(f"{name}: must be a decision id string (1 to 100 characters)")
    return value


_T = TypeVar("_T")


class Group:
    """The decisions and rewards a replica on a shared log (PostgreSQL) takes together, committed
    together: each request queues its step and waits; the first one queued starts the group, which
    takes the requests the event loop reads until a turn of the loop (its poll for requests that
    arrived) queues no more -- at most :data:`TURNS` turns -- and commits them in one
    :meth:`ServingSilo.write_many`.  One lock, one catch-up, one insert and one commit for them all,
    two round trips to the server, each request still answered only after the commit that holds it.
    The extra turns cost microseconds; they let the clients answered by the last commit, whose next
    requests arrive just after it, join the next one (a group of all the connections in flight, not
    alternating halves).  Then, as PostgreSQL's ``commit_delay`` with ``commit_siblings``, a group
    smaller than the one before waits for it at most :data:`DELAY` seconds -- one timer, cut short by
    the request that makes it as large -- since each group costs its round trips whatever its size."""

    #: a group stops gathering after this many turns of the loop, however many requests still arrive
    TURNS = 8
    #: then, smaller than the group before, it waits at most this long (seconds) for it
    DELAY = 0.001

    def __init__(self, silo: ServingSilo) -> None:
        self.silo = silo
        self.waiting: list[tuple[Callable[[], object], asyncio.Future[object]]] = []
        #: the size of the last group committed, and the timer of a group waiting to reach it
        self.last = 0
        self.timer: asyncio.Handle | None = None

    async def run(self, step: Callable[[], _T]) -> _T:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()
        self.waiting.append((step, done))
        if len(self.waiting) == 1:
            loop.call_soon(self._gather, loop, 1, 1)
        elif self.timer is not None and len(self.waiting) >= self.last:  # as large as the last: commit
            self.timer.cancel()
            self.timer = loop.call_soon(self._commit)
        return cast(_T, await done)

    def _gather(self, loop: asyncio.AbstractEventLoop, seen: int, turns: int) -> None:
        if len(self.waiting) > seen and turns < self.TURNS:  # this turn queued more: one more turn
            loop.call_soon(self._gather, loop, len(self.waiting), turns + 1)
        elif len(self.waiting) < self.last and self.DELAY > 0:
            self.timer = loop.call_later(self.DELAY, self._commit)
        else:
            self._commit()

    def _commit(self) -> None:
        self.timer = None
        batch, self.waiting = self.waiting, []
        self.last = len(batch)
        try:
            results = self.silo.write_many([step for step, _ in batch])
        except ServeError as exc:  # the write failed: none of them is acknowledged
            results = [exc] * len(batch)
        for (_, done), result in zip(batch, results, strict=True):
            if done.done():  # its client went away
                continue
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)


class Service:
    """The routes of one serving silo, with its tokens and its latency records."""

    def __init__(
        self,
        silo: ServingSilo,
        token: str,
        sync_token: str,
        sync_seconds: float | None = None,
        *,
        sync_from_loopback: bool = False,
        shuffling: SiloShuffling | None = None,
    ) -> None:
        if not token or not sync_token:
            raise ValueError("token and sync token must be non-empty (credentials are required)")
        self.silo = silo
        self.token = ("Bearer " + token).encode()
        self.sync_token = ("Bearer " + sync_token).encode()
        self.sync_seconds = sync_seconds
        #: the sync routes answer only clients on this machine (the silo's SuperNode, with --superlink)
        self.sync_from_loopback = sync_from_loopback
        if silo.setup.shuffled != (shuffling is not None):
            raise ValueError("a silo of protocol 'sdp-amplification' releases through the shuffler, and only it does")
        #: sdp-amplification: releases go to the shuffler party, the coordinator gets an acknowledgement
        self.shuffling = shuffling
        self.latency = {name: Latencies() for name in ("decisions", "rewards", "sync")}
        #: a replica on a shared log commits the decisions and rewards it takes together (group commit)
        self.group = Group(silo) if silo.store.shared else None
        self.refused: dict[int, int] = {}
        #: (second, decisions, rewards, reward sum) per wall-clock second, the last hour
        self.series: deque[list[float]] = deque(maxlen=3600)
        self.app = Starlette(
            lifespan=self._lifespan,
            routes=[
                Route("/v1/decisions", self._guard(self.decisions, self.token, "decisions"), methods=["POST"]),
                Route("/v1/rewards", self._guard(self.rewards, self.token, "rewards"), methods=["POST"]),
                Route("/v1/status", self._guard(self.status, self.token), methods=["GET"]),
                Route("/v1/series", self._guard(self.series_json, self.token), methods=["GET"]),
                Route("/metrics", self._guard(self.metrics, self.token), methods=["GET"]),
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/dashboard", dashboard.endpoint("silo"), methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"]),
                Route("/v1/sync/release", self._guard(self.release, self.sync_token, "sync"), methods=["POST"]),
                Route("/v1/sync/prefix", self._guard(self.prefix, self.sync_token, "sync"), methods=["POST"]),
                Route("/v1/sync/keys", self._guard(self.keys, self.sync_token, "sync"), methods=["POST"]),
                Route("/v1/sync/roster", self._guard(self.roster, self.sync_token, "sync"), methods=["POST"]),
                Route("/v1/sync/survivors", self._guard(self.survivors, self.sync_token, "sync"), methods=["POST"]),
                Route("/v1/sync/unmask", self._guard(self.unmask, self.sync_token, "sync"), methods=["POST"]),
            ],
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Between requests, draw the next release's noise ahead (one entry per turn of the loop)."""

        async def noise() -> None:
            while True:
                await asyncio.sleep(0 if self.silo.prepare_noise() else 0.05)

        task = asyncio.create_task(noise())
        try:
            yield
        finally:
            task.cancel()

    def _guard(
        self, handler: Callable[[Request], Awaitable[Response]], token: bytes, timed: str | None = None
    ) -> Callable[[Request], Awaitable[Response]]:
        latency = self.latency[timed] if timed else None
        local_only = token == self.sync_token and self.sync_from_loopback

        async def endpoint(request: Request) -> Response:
            start = time.perf_counter()
            if local_only and not _loopback(request):
                return self._refuse(
                    403, "sync: this silo syncs through its SuperNode; its sync routes answer loopback only"
                )
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, token):
                return self._refuse(401, "authorization: a valid 'Bearer <token>' header is required")
            try:
                response = await handler(request)
            except ServeError as exc:
                return self._refuse(exc.status, str(exc))
            except self.silo.store.errors as exc:  # the log failed outside a write (a read): not the client's fault
                return self._refuse(503, str(self.silo.failed(exc)))
            if latency is not None:
                latency.add(time.perf_counter() - start)
            return response

        return endpoint

    def _refuse(self, status: int, message: str) -> JSONResponse:
        self.refused[status] = self.refused.get(status, 0) + 1
        return _error(status, message)

    def _tick(self, decisions: int = 0, rewards: int = 0, total: float = 0.0) -> None:
        second = float(int(time.time()))
        if not self.series or self.series[-1][0] != second:
            self.series.append([second, 0, 0, 0.0])
        row = self.series[-1]
        row[1] += decisions
        row[2] += rewards
        row[3] += total

    # -- traffic -----------------------------------------------------------------------------
    async def decisions(self, request: Request) -> Response:
        body = _object(await _body(request), {"features", "context_id", "user_id"}, {"features"})
        context = body.get("context_id")
        if context is not None and (not isinstance(context, str) or len(context) > MAX_CONTEXT_ID or "\0" in context):
            # NUL: PostgreSQL's text cannot hold it (a replica's log would fail the whole group of requests)
            raise BadRequest(f"context_id: must be a string of at most {MAX_CONTEXT_ID} characters, without NUL")
        raw = body["features"]
        if not isinstance(raw, list) or not 0 < len(raw) <= MAX_ARMS:
            raise BadRequest(f"features: must be a list of 1 to {MAX_ARMS} arms, each a list of d numbers")
        try:
            features = np.array(raw, dtype=np.float64)
        except (ValueError, TypeError):
            raise BadRequest("features: must be K lists of d numbers each (ragged or not numbers)") from None
        user = body.get("user_id")
        if user is not None and (isinstance(user, bool) or not isinstance(user, int | str)):
            raise BadRequest("user_id: must be an integer >= 0 or a string of 1 to 256 characters")
        if self.group is None:
            arm, decision_id, propensity = self.silo.decide(features, context, user)
        else:
            arm, decision_id, propensity = await self.group.run(self.silo.decision(features, context, user))
        self._tick(decisions=1)
        answer = {"arm": arm, "decision_id": decision_id, "propensity": propensity}
        return JSONResponse({**answer, "model_version": self.silo.model_version()})

    async def rewards(self, request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, dict) and "rewards" in body:
            items = _object(body, {"rewards"}, {"rewards"})["rewards"]
            if not isinstance(items, list) or not 0 < len(items) <= MAX_BATCH:
                raise BadRequest(f"rewards: must be a list of 1 to {MAX_BATCH} objects")
            checked = []
            for i, item in enumerate(items):
                one = _object(item, {"decision_id", "reward"}, {"decision_id", "reward"})
                checked.append(
                    (
                        _decision_id(one["decision_id"], f"rewards[{i}].decision_id"),
                        _reward_value(one["reward"], f"rewards[{i}].reward"),
                    )
                )
            results = []
            for i, (decision_id, value) in enumerate(checked):
                try:
                    self.silo.reward(decision_id, value, f"rewards[{i}].reward")
                    self._tick(rewards=1, total=value)
                    results.append({"decision_id": decision_id, "status": 200})
                except ServeError as exc:
                    if exc.status == 503:
                        raise
                    results.append({"decision_id": decision_id, "status": exc.status, "error": str(exc)})
            return JSONResponse({"results": results})
        one = _object(body, {"decision_id", "reward"}, {"decision_id", "reward"})
        value = _reward_value(one["reward"], "reward")
        decision_id = _decision_id(one["decision_id"], "decision_id")
        if self.group is None:
            self.silo.reward(decision_id, value, "reward")
        else:
            late = await self.group.run(self.silo.rewarding(decision_id, value, "reward"))
            if isinstance(late, ServeError):  # logged and committed first
                raise late
        self._tick(rewards=1, total=value)
        return JSONResponse({"status": "learned"})

    # -- reports -----------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        out = self.silo.status(self.sync_seconds)
        out["latency_ms"] = {name: lat.percentiles() for name, lat in self.latency.items()}
        out["refused"] = {str(k): v for k, v in sorted(self.refused.items())}
        out["recent_releases"] = self.silo.store.releases(10)
        return out

    async def status(self, request: Request) -> Response:
        return JSONResponse(_plain(self.report()))

    async def series_json(self, request: Request) -> Response:
        return JSONResponse({"columns": ["second", "decisions", "rewards", "reward_sum"], "rows": list(self.series)})

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(prometheus_text(self.report(), self.latency), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def healthz(self, request: Request) -> Response:
        if not self.silo.recover():  # a shared log that came back: serving again
            return PlainTextResponse("event log failed\n", status_code=503)
        return PlainTextResponse("ok\n")

    # -- federation --------------------------------------------------------------------------
    async def release(self, request: Request) -> Response:
        body = _object(await _body(request), {"epoch", "round"}, {"epoch", "round"})
        epoch, round_ = _integer(body, "epoch"), _integer(body, "round")
        if self.silo.secagg is not None:  # distributed-dp: the masked message, or the release withdrawn
            message, samples, withdrawn = self.silo.masked_release(epoch, round_)
            if message is None:
                return JSONResponse({"withdrawn": withdrawn, "samples": samples})
            answer = {**masking.masked_to_json(message), "secagg_epoch": self.silo.secagg.joined}
            return JSONResponse({**answer, "samples": samples})
        payload, samples = self.silo.release(epoch, round_)
        if self.shuffling is not None:  # committed first: a retry sends the same bytes to the shuffler
            status = await asyncio.to_thread(self.shuffling.send, epoch, round_, payload)
            return JSONResponse({"shuffled": status, "samples": samples})
        return JSONResponse(
            {"payload": base64.b64encode(payload.tobytes()).decode(), "dtype": payload.dtype.str, "samples": samples}
        )

    async def prefix(self, request: Request) -> Response:
        body = _object(await _body(request), {"epoch", "round", "prefix"}, {"epoch", "round", "prefix"})
        prefix = decode_vector(body["prefix"], "prefix", "<f8")
        adopted = self.silo.adopt(_integer(body, "epoch"), _integer(body, "round"), prefix)
        return JSONResponse({"adopted": adopted})

    # -- secure aggregation (distributed-dp; fedbandits.serve.masking) -----------------------------
    async def keys(self, request: Request) -> Response:
        body = _object(await _body(request), {"secagg_epoch"}, {"secagg_epoch"})
        advert = self.silo.secagg_keys(_integer(body, "secagg_epoch"))
        if isinstance(advert, int):  # an older set-up than this silo's: where a new one must start
            return JSONResponse({"next_epoch": advert})
        fields = {"c_public": advert.c_public, "s_public": advert.s_public, "cert": advert.cert}
        return JSONResponse(
            {**{k: masking.b64(v) for k, v in fields.items()}, "signature": masking.b64(advert.signature)}
        )

    async def roster(self, request: Request) -> Response:
        body = _object(await _body(request), {"roster"}, {"roster"})
        try:
            roster = masking.roster_from_json(body["roster"], self.silo.setup.silos)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        self.silo.secagg_roster(roster)
        return JSONResponse({"joined": roster.epoch})

    async def survivors(self, request: Request) -> Response:
        body = _object(await _body(request), {"epoch", "round", "survivors"}, {"epoch", "round", "survivors"})
        signature = self.silo.secagg_survivors(_integer(body, "epoch"), _integer(body, "round"), body["survivors"])
        return JSONResponse({"signature": masking.b64(signature)})

    async def unmask(self, request: Request) -> Response:
        keys = {"epoch", "round", "survivors", "dropped", "signatures", "held"}
        body = _object(await _body(request), keys, keys)
        try:
            signatures = masking.keyed(body["signatures"], "signatures", 64)
            held = masking.keyed(body["held"], "held")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        epoch, round_ = _integer(body, "epoch"), _integer(body, "round")
        reveal = self.silo.secagg_unmask(epoch, round_, body["survivors"], body["dropped"], signatures, held)
        return JSONResponse(masking.reveal_to_json(reveal))


OPENAPI = openapi.document(MAX_ARMS, MAX_BATCH, MAX_BODY)


def decode_vector(value: Any, name: str, dtype: str) -> np.ndarray:
    """A base64 string of little-endian ``dtype`` values, checked (400 naming ``name``)."""
    if not isinstance(value, str) or len(value) > 4 * MAX_BODY:
        raise BadRequest(f"{name}: must be a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{name}: not valid base64") from None
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        raise BadRequest(f"{name}: {len(raw)} bytes is not a whole number of {dtype} values")
    return np.frombuffer(raw, dtype=dtype).copy()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
