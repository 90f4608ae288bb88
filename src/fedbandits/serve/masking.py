"""Secure aggregation for serving silos (``distributed-dp``): the deployment's pairwise masking
(:mod:`fedbandits.federation.secure_aggregation`, Bonawitz et al. 2017) carried over the sync API.

Set-up, driven by the coordinator before the first round (and again only if its state is lost):

1. ``POST /v1/sync/keys {"secagg_epoch": e}``: each silo draws its two X25519 key pairs (kept in
   its event log, the private halves never sent) and answers with the public halves;
2. the coordinator publishes the roster (every member's public keys, the threshold t);
   ``POST /v1/sync/roster``: each silo answers with its Shamir shares of its mask key, each encrypted
   for one member (the coordinator reads none of them);
3. ``POST /v1/sync/shares``: the coordinator hands each silo the shares addressed to it.

Each round a silo sends its noisy residues masked with the pairwise masks of round
``(epoch, round)``; the masks cancel in the modular sum, so the coordinator learns the sum and no
single silo's residues.  Every step is idempotent: a retried request gets the stored answer.

Dropouts: a round closes only when every silo has released (the coordinator waits), so masks never
need to be removed and no key is ever revealed; the recovery step of the protocol is not used.
Trust model as in the deployment: the coordinator is honest but curious.  A coordinator that lies
about the roster (its own keys for a silo) is outside it (issue #32: authenticated keys).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from fedbandits.federation.secure_aggregation import Roster, SecAggClient

#: the round number the masks of (budget epoch e, round r) are drawn for: unique per release
ROUNDS_PER_EPOCH = 1 << 32


def mask_round(epoch: int, round_: int) -> int:
    return epoch * ROUNDS_PER_EPOCH + round_


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{name}: must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{name}: not valid base64") from None


def keyed(values: Any, name: str, size: int | None = None) -> dict[int, bytes]:
    """``{"0": base64, ...}`` as ``{0: bytes}``, checked (``size``: every value's length)."""
    if not isinstance(values, dict):
        raise ValueError(f"{name}: must be an object of silo index -> base64")
    out = {}
    for key, value in values.items():
        if not (isinstance(key, str) and key.isdigit() and str(int(key)) == key):
            raise ValueError(f"{name}: keys must be silo indices, got {key!r:.20}")
        raw = unb64(value, f"{name}[{key}]")
        if size is not None and len(raw) != size:
            raise ValueError(f"{name}[{key}]: must be {size} bytes, got {len(raw)}")
        out[int(key)] = raw
    return out


def unkeyed(values: dict[int, bytes]) -> dict[str, str]:
    return {str(i): b64(v) for i, v in sorted(values.items())}


def roster_to_json(roster: Roster) -> dict[str, Any]:
    return {
        "context": b64(roster.context),
        "epoch": roster.epoch,
        "threshold": roster.threshold,
        "c_public": unkeyed(roster.c_public),
        "s_public": unkeyed(roster.s_public),
    }


def roster_from_json(value: Any, silos: int) -> Roster:
    if not isinstance(value, dict) or set(value) != {"context", "epoch", "threshold", "c_public", "s_public"}:
        raise ValueError("roster: must hold context, epoch, threshold, c_public and s_public")
    epoch, threshold = value["epoch"], value["threshold"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError("roster.epoch: must be an integer >= 1")
    c, s = keyed(value["c_public"], "roster.c_public", 32), keyed(value["s_public"], "roster.s_public", 32)
    if set(c) != set(s) or set(s) != set(range(silos)):
        raise ValueError(f"roster: must list the keys of silos 0 to {silos - 1}")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 1 <= threshold <= silos:
        raise ValueError(f"roster.threshold: must be an integer in [1, {silos}]")
    return Roster(unb64(value["context"], "roster.context"), epoch, threshold, c, s)


def client_to_text(client: SecAggClient) -> str:
    """A silo's secure-aggregation state as JSON (its private keys: the log is as secret as the data)."""
    return json.dumps(
        {
            "silo": client.silo,
            "bits": client.bits,
            "width": client.width,
            "roster": None if client.roster is None else roster_to_json(client.roster),
            "c_private": b64(client.c_private),
            "s_private": b64(client.s_private),
            "held": unkeyed(client.held),
        }
    )


def client_from_text(text: str, silos: int) -> SecAggClient:
    data = json.loads(text)
    roster = None if data["roster"] is None else roster_from_json(data["roster"], silos)
    return SecAggClient(
        int(data["silo"]),
        int(data["bits"]),
        int(data["width"]),
        roster,
        unb64(data["c_private"], "c_private"),
        unb64(data["s_private"], "s_private"),
        keyed(data["held"], "held"),
    )
