"""The ClientApp of the serving silos' Flower deployment (needs ``fedbandits[deploy,serve]``).

In a silo's SuperNode it hands each request of the federation's coordinator to the silo's own
service on loopback -- only the sync routes (:data:`fedbandits.serve.links.SYNC_PATHS`), with the
sync token from the file the node config names -- and returns each answer's status and body.  One
message per silo per phase (``query``; ConfigRecord ``sync`` {silo, paths, bodies as JSON texts}:
the silo's requests, served in order); the reply's ConfigRecord ``answer`` {statuses, texts}.  A
node refuses (409) a message addressed to another silo than its ``silo-id``: a SuperNode started
with another silo's key releases nothing.

Flower starts a ClientApp process for every message, on the host where the silo serves its users:
this module imports Flower's records, httpx and the sync paths only (tests/test_lazy.py).  The
ServerApp is :mod:`fedbandits.federation.serving_server_app`.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedbandits.serve.links import SYNC_PATHS

client_app = ClientApp()

#: the most a request or an answer may carry (a roster at M = 100 is ~100 KB)
MAX_TEXT = 1 << 20


@client_app.query()
def forward(msg: Message, context: Context) -> Message:
    """The federation's requests, handed in order to this silo's service on loopback."""
    node = context.node_config
    record = msg.content.config_records.get("sync")
    try:
        paths = [str(x) for x in record["paths"]]  # type: ignore[index, union-attr]
        bodies = [str(x) for x in record["bodies"]]  # type: ignore[index, union-attr]
        if len(paths) != len(bodies) or not 0 < len(paths) <= 8 or sum(map(len, bodies)) > MAX_TEXT:
            raise ValueError
        addressed = int(record["silo"])  # type: ignore[index, arg-type]
    except (TypeError, KeyError, ValueError):
        paths, bodies, addressed = [], [], -1
    if addressed != int(node["silo-id"]):  # a key used by the wrong silo: refuse, release nothing
        refusal = json.dumps({"error": f"this node is silo {node['silo-id']}'s; the message is for silo {addressed}"})
        answer = ConfigRecord({"statuses": [409] * len(paths), "texts": [refusal] * len(paths)})
        return Message(RecordDict({"answer": answer}), reply_to=msg)
    statuses, texts = [], []
    token = Path(str(node["sync-token-file"])).read_text(encoding="utf-8").strip()
    with httpx.Client(
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=10.0,
        verify=False,  # the service is on this machine (127.0.0.1): nothing crosses a network
    ) as client:
        for path, body in zip(paths, bodies, strict=True):
            status, text = _forward_one(client, str(node["sync-url"]), path, body)
            statuses.append(status)
            texts.append(text)
    answer = ConfigRecord({"statuses": statuses, "texts": texts})
    return Message(RecordDict({"answer": answer}), reply_to=msg)


def _forward_one(client: httpx.Client, base: str, path: str, body: str) -> tuple[int, str]:
    if path not in SYNC_PATHS:
        return 404, json.dumps({"error": f"not a sync path: {path[:40]!r}"})
    try:
        response = client.post(base.rstrip("/") + path, content=body.encode())
    except httpx.HTTPError as exc:
        return 503, json.dumps({"error": f"the silo's service is unreachable ({type(exc).__name__})"})
    return response.status_code, response.text
