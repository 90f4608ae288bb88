"""Secure aggregation for serving silos (``distributed-dp``): the deployment's pairwise masking
(:mod:`fedbandits.crypto.secure_aggregation`, Bonawitz et al. 2017) carried over the sync API.

Set-up, driven by the coordinator before the first round (and again only if its state is lost):

1. ``POST /v1/sync/keys {"secagg_epoch": e}``: each silo draws its two X25519 key pairs (kept in
   its event log, the private halves never sent) and answers with the public halves, signed with
   its long-term Ed25519 key for set-up e (``cert``, ``signature``; the deployment's signing CA,
   :mod:`fedbandits.crypto.signing`);
2. the coordinator publishes the roster (every member's public keys, certificate and signature, the
   threshold t with 2t > M + colluders); each silo checks it as the deployment's silos do
   (:func:`fedbandits.crypto.double_masking.roster_problem`: every entry against its pinned signing
   CA, its own keys, the threshold) before it answers;
   ``POST /v1/sync/roster``: each silo answers with its Shamir shares of its mask key, each encrypted
   for one member (the coordinator reads none of them);
3. ``POST /v1/sync/shares``: the coordinator hands each silo the shares addressed to it.

Each round a silo sends its noisy residues masked with the pairwise masks of round
``(epoch, round)``; the masks cancel in the modular sum, so the coordinator learns the sum and no
single silo's residues.  Every step is idempotent: a retried request gets the stored answer.

Dropouts: a round closes only when every silo has released (the coordinator waits), so masks never
need to be removed and no key is ever revealed; the recovery step of the protocol is not used.

A release enters one masked sum, ever (issue #44): a silo masks release ``(epoch, round)`` once,
when it makes it, and stores the masked bytes; asked again -- after a new key set-up too -- it
answers those bytes, never a fresh masking under other keys.  And every roster lists every silo,
so the one sum a release can enter is the sum over all M (tests/test_serve_masking.py).
Trust model: nothing is ever revealed (no recovery step), so a coordinator that deviates can learn
a silo's residues only by sharing its pairwise seeds, i.e. by putting keys of its own in the roster:
the signatures stop that (a key not signed under a certificate the signing CA issued to that member
is refused, as is a roster for a set-up the silo did not advertise for).  Or by a threshold low
enough that the colluding silos' shares rebuild another silo's mask key: the threshold check stops
that.  It can still deny service.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from fedbandits.crypto.double_masking import SignedRoster
from fedbandits.crypto.secure_aggregation import SecAggClient
from fedbandits.online import AgentSetup

#: the round number the masks of (budget epoch e, round r) are drawn for: unique per release
ROUNDS_PER_EPOCH = 1 << 32


def federation_context(setup: AgentSetup) -> bytes:
    """What binds secure aggregation's keys and shares to one federation (its config and entry)."""
    return hashlib.sha256(
        json.dumps({"config": setup.config.to_dict(), "entry": setup.label}, sort_keys=True).encode()
    ).digest()


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


def roster_to_json(roster: SignedRoster) -> dict[str, Any]:
    return {
        "context": b64(roster.context),
        "epoch": roster.epoch,
        "threshold": roster.threshold,
        "c_public": unkeyed(roster.c_public),
        "s_public": unkeyed(roster.s_public),
        "certs": unkeyed(roster.certs),
        "signatures": unkeyed(roster.signatures),
    }


ROSTER_FIELDS = {"context", "epoch", "threshold", "c_public", "s_public", "certs", "signatures"}


def roster_from_json(value: Any, silos: int) -> SignedRoster:
    if not isinstance(value, dict) or set(value) != ROSTER_FIELDS:
        raise ValueError("roster: must hold context, epoch, threshold, c_public, s_public, certs and signatures")
    epoch, threshold = value["epoch"], value["threshold"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError("roster.epoch: must be an integer >= 1")
    c, s = keyed(value["c_public"], "roster.c_public", 32), keyed(value["s_public"], "roster.s_public", 32)
    if set(c) != set(s) or set(s) != set(range(silos)):
        raise ValueError(f"roster: must list the keys of silos 0 to {silos - 1}")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 1 <= threshold <= silos:
        raise ValueError(f"roster.threshold: must be an integer in [1, {silos}]")
    certs, signatures = keyed(value["certs"], "roster.certs"), keyed(value["signatures"], "roster.signatures", 64)
    if set(certs) != set(s) or set(signatures) != set(s):
        raise ValueError(f"roster: must give the certificate and signature of silos 0 to {silos - 1}")
    return SignedRoster(unb64(value["context"], "roster.context"), epoch, threshold, c, s, certs, signatures)


def client_to_text(client: SecAggClient) -> str:
    """A silo's secure-aggregation state as JSON (its private keys: the log is as secret as the data)."""
    roster = client.roster
    assert roster is None or isinstance(roster, SignedRoster)  # a serving silo takes signed rosters only
    return json.dumps(
        {
            "silo": client.silo,
            "bits": client.bits,
            "width": client.width,
            "roster": None if roster is None else roster_to_json(roster),
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
