"""How the coordinator reaches the serving silos' sync API: straight over HTTPS, or through Flower.

The coordinator (:mod:`fedbandits.serve.coordinator`) speaks to the silos in phases: the requests
for every silo that still owes an answer (a release, its keys, an unmask answer; the prefix it lacks), all
at once.  A :class:`SiloLink` carries such a phase: :meth:`SiloLink.exchange` takes
``{silo: [(path, body), ...]}`` (a silo's requests, served in order) and returns
``{silo: [answer, ...]}``, each answer the silo's JSON object or None (unreachable, refused or
malformed -- the coordinator asks again at its next tick; every sync request is idempotent on the
silo's side, :mod:`fedbandits.serve.silo`).  :func:`exchange_one` is the one-request-per-silo
form.  A link whose every message is costly (:attr:`SiloLink.bundles`: Flower runs a ClientApp
process per message) has the coordinator send a closed round's prefix with the next tick's
release requests, one message per silo per tick, instead of in a message of its own at once.

* :class:`HttpLink`: the coordinator calls each silo's ``/v1/sync/...`` itself, with the
  federation's bearer token (``fedbandits serve server --silo-url ...``).
* :class:`fedbandits.federation.serving_server_app.FlowerLink`: the requests ride the Flower deployment of
  ``fedbandits deploy`` (SuperLink, authenticated SuperNodes, TLS); a silo's SuperNode hands each
  one to its own service on loopback (``fedbandits serve server --flower``).

:data:`SYNC_PATHS` are the only paths either link carries.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol, TypeAlias

import httpx

log = logging.getLogger("fedbandits.serve")

#: the silo's sync routes (fedbandits.serve.http); nothing else is ever forwarded to a silo
SYNC_PATHS = (
    "/v1/sync/release",
    "/v1/sync/prefix",
    "/v1/sync/keys",
    "/v1/sync/roster",
    "/v1/sync/survivors",
    "/v1/sync/unmask",
)

Request = tuple[str, dict[str, Any]]
Answer: TypeAlias = dict[str, Any] | None
Requests = dict[int, list[Request]]
Answers = dict[int, list[Answer]]


class SiloLink(Protocol):
    """One phase of requests to the silos (see the module's docstring)."""

    silos: int
    bundles: bool

    def exchange(self, requests: Requests) -> Answers: ...

    def close(self) -> None: ...


def exchange_one(link: SiloLink, requests: dict[int, Request]) -> dict[int, Answer]:
    """One request per silo: ``{silo: (path, body)}`` -> ``{silo: answer}``."""
    got = link.exchange({silo: [request] for silo, request in requests.items()})
    return {silo: answers[0] for silo, answers in got.items()}


def check_path(path: str) -> str:
    if path not in SYNC_PATHS:
        raise ValueError(f"not a sync path: {path!r}")
    return path


def parse_answer(where: str, status: int, text: str) -> dict[str, Any] | None:
    """A silo's HTTP answer as the coordinator takes it: a JSON object from a 200, else None (logged)."""
    if status != 200:
        log.warning("%s: %d %s", where, status, text[:200])
        return None
    try:
        got = json.loads(text)
    except ValueError:
        log.warning("%s: an answer that is not JSON", where)
        return None
    return got if isinstance(got, dict) else None


class HttpLink:
    """The silos at ``urls`` (silo order), called one after the other with the sync token.

    A silo served by replicas on one PostgreSQL log (:mod:`fedbandits.serve.pgstore`) has its
    replicas' URLs joined by commas: a request goes to the replica that last answered, and to the
    next one when that one is unreachable or answers 503 (any replica answers a sync request alike,
    under the log's write lock).  So the sync moves off a killed replica at the request that finds it
    gone: at once for a refused connection, after ``timeout`` for one that does not answer."""

    bundles = False

    def __init__(
        self,
        urls: list[str],
        sync_token: str,
        *,
        verify: str | bool = True,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.urls = list(urls)
        #: each silo's replicas, and the one that answered last
        self.replicas = [[u.strip() for u in url.split(",") if u.strip()] for url in self.urls]
        self.current = [0] * len(self.urls)
        self.silos = len(self.urls)
        self.client = httpx.Client(
            headers={"Authorization": f"Bearer {sync_token}"}, timeout=timeout, verify=verify, transport=transport
        )

    def exchange(self, requests: Requests) -> Answers:
        return {silo: [self._post(silo, path, body) for path, body in asks] for silo, asks in requests.items()}

    def _post(self, silo: int, path: str, body: dict[str, Any]) -> Answer:
        check_path(path)
        replicas, first = self.replicas[silo], self.current[silo]
        for k in range(len(replicas)):
            at = (first + k) % len(replicas)
            url = replicas[at].rstrip("/") + path
            try:
                response = self.client.post(url, json=body)
            except httpx.HTTPError as exc:
                log.info("%s: unreachable (%s)", url, type(exc).__name__)
                continue
            if response.status_code == 503 and k + 1 < len(replicas):
                log.info("%s: 503, trying the silo's next replica", url)
                continue
            self.current[silo] = at
            return parse_answer(url, response.status_code, response.text)
        return None

    def close(self) -> None:
        self.client.close()
