"""The ServerApp of the serving silos' Flower deployment: their sync rounds over Flower (needs
``fedbandits[deploy,serve]``).

With ``fedbandits serve server --flower`` the coordinator's requests ride the deployment of
``fedbandits deploy``: its SuperLink (TLS), each silo's SuperNode (authenticated by the silo's
registered key, so a reply from node n is silo ``registry[n]``'s) and a submitted Flower app whose
components are here.

* :data:`server_app`: runs the coordinator (:class:`fedbandits.serve.coordinator.Coordinator`,
  its wall-clock schedule, SQLite log and budget policy: nothing differs from the HTTP link) with a
  :class:`FlowerLink`, and writes the coordinator's status to ``state-dir/status.json`` after
  every tick (``fedbandits serve server`` serves it on its status port).
* the ClientApp, :mod:`fedbandits.federation.serving_client_app` (a module of its own, so that the
  process Flower starts for every message on a silo's host loads none of the coordinator): in a
  silo's SuperNode, hands each request to the silo's own service on loopback and returns its
  status and body.

One message per silo per phase (``query``; ConfigRecord ``sync`` {silo, paths, bodies as JSON texts}:
the silo's requests, served in order); the reply's ConfigRecord ``answer`` {statuses, texts}.  A
node refuses (409) a message addressed to another silo than its ``silo-id``: a SuperNode started
with another silo's key releases nothing.  Flower
1.42 starts a ClientApp process for every message (about 2 s of CPU on the silo's host, measured
below in docs/serving.md), so the link *bundles*: a closed round's prefix travels with the next
tick's release request, one message per silo per tick.  The silo's sync routes are idempotent (a retried
release is the stored one, byte for byte), so asking twice is never a second release: a silo that
is online but silent for a third of the deadline is asked once more, since a Flower 1.42
SuperNode that was pulling a request when the server died holds each reply until its next pull
(:func:`fedbandits.federation.server_app._exchange` has the story).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedbandits.config import load_config
from fedbandits.core.files import atomic_write_bytes
from fedbandits.federation.serving_client_app import MAX_TEXT
from fedbandits.federation.shuffler_client import ShufflerClient
from fedbandits.federation.spec import make_spec
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.links import Answers, Requests, check_path, parse_answer
from fedbandits.serve.shuffling import ServerShuffling

log = logging.getLogger("fedbandits.serve")

server_app = ServerApp()


class FlowerLink:
    """The coordinator's requests as Flower messages to the silos' nodes (``registry``: node id ->
    silo index, from the deployment's registration of the silos' keys); one message per silo per
    phase, carrying that silo's requests."""

    bundles = True  # every message starts a ClientApp process on the silo's host

    def __init__(self, grid: Grid, registry: dict[int, int], timeout: float = 30.0, poll: float = 0.2) -> None:
        self.grid = grid
        self.node_of = {silo: node for node, silo in registry.items()}
        self.silos = len(self.node_of)
        self.timeout = float(timeout)
        self.poll = float(poll)

    def exchange(self, requests: Requests) -> Answers:
        out: Answers = {silo: [None] * len(asks) for silo, asks in requests.items()}
        online = {int(n) for n in self.grid.get_node_ids()}
        contents = {
            silo: RecordDict(
                {
                    "sync": ConfigRecord(
                        {
                            "silo": silo,
                            "paths": [check_path(p) for p, _ in asks],
                            "bodies": [json.dumps(b) for _, b in asks],
                        }
                    )
                }
            )
            for silo, asks in requests.items()
            if self.node_of.get(silo) in online and asks
        }
        sent: dict[str, int] = {}  # message id -> silo
        answered: set[int] = set()
        deadline = time.time() + self.timeout

        def push(silos: list[int]) -> None:
            ttl = max(1.0, deadline - time.time())
            messages = [Message(contents[s], dst_node_id=self.node_of[s], message_type="query", ttl=ttl) for s in silos]
            ids = list(self.grid.push_messages(messages))
            if len(ids) != len(messages):  # the SuperLink refused the push (e.g. too large): nobody asked
                log.warning("the SuperLink took %d of %d messages", len(ids), len(messages))
                return
            for mid, s in zip(ids, silos, strict=True):
                if mid is not None:
                    sent[mid] = s

        push(sorted(contents))
        pushed, nudged = time.time(), False
        while set(sent.values()) - answered and time.time() < deadline:
            for msg in self.grid.pull_messages([m for m, s in sent.items() if s not in answered]):
                got = sent.get(msg.metadata.reply_to_message_id)
                if got is None or got in answered:
                    continue
                silo = got
                answered.add(silo)
                where = f"silo {silo}"
                if int(msg.metadata.src_node_id) != self.node_of[silo] or msg.has_error():
                    reason = msg.error.reason if msg.has_error() else "a reply from another node"
                    log.info("%s: no answer (%s)", where, str(reason)[:200])
                    continue
                out[silo] = _answers(where, msg, [p for p, _ in requests[silo]])
            silent = sorted(set(sent.values()) - answered)
            if silent and not nudged and time.time() - pushed > self.timeout / 3:
                nudged = True
                push(silent)
            time.sleep(self.poll)
        return out

    def close(self) -> None:
        pass


def _answers(where: str, msg: Message, paths: list[str]) -> list[dict[str, Any] | None]:
    """A silo's reply: one answer per request it was sent (all None if the reply is malformed)."""
    record = msg.content.config_records.get("answer")
    try:
        statuses = [int(x) for x in record["statuses"]]  # type: ignore[index, union-attr]
        texts = [str(x) for x in record["texts"]]  # type: ignore[index, union-attr]
        if len(statuses) != len(paths) or len(texts) != len(paths) or sum(map(len, texts)) > MAX_TEXT:
            raise ValueError("the answers do not match the requests")
    except (TypeError, KeyError, ValueError) as exc:
        log.warning("%s: a malformed reply (%s)", where, str(exc)[:100])
        return [None] * len(paths)
    return [parse_answer(f"{where} {p}", st, t) for p, st, t in zip(paths, statuses, texts, strict=True)]


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    state_dir = Path(str(cfg["state-dir"]))
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        registry = {int(n): int(s) for n, s in json.loads(Path(str(cfg["registry-file"])).read_text()).items()}
        link = FlowerLink(grid, registry, float(cfg["round-timeout"]), float(cfg["poll-interval"]))
        config = load_config(str(cfg["config-file"]))
        entry = str(cfg["entry"]) or None
        shuffling = None
        if str(cfg.get("shuffler", "")):  # sdp-amplification: rounds close with the shuffler's batch
            setup = Coordinator.check(config, entry, str(cfg["budget-policy"]), float(cfg["sync-seconds"]), True)
            digest = make_spec(config, setup.label).digest
            shuffling = ServerShuffling(ShufflerClient.from_config(cfg), digest, setup.width, setup.silos)
        coordinator = Coordinator(
            config,
            link,
            state_dir,
            entry=entry,
            sync_seconds=float(cfg["sync-seconds"]),
            policy=str(cfg["budget-policy"]),
            shuffling=shuffling,
        )
        status = state_dir / "status.json"
        log.info("serving federation up (run %s): round %d.%d", context.run_id, coordinator.epoch, coordinator.round)
        coordinator.run(after_tick=lambda: atomic_write_bytes(status, json.dumps(coordinator.status()).encode()))
    except Exception:
        atomic_write_bytes(state_dir / "error.txt", f"run {context.run_id}\n{traceback.format_exc()}".encode())
        log.exception("serving federation failed")
        raise
