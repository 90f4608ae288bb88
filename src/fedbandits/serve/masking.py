"""Secure aggregation for serving silos (``distributed-dp``): the deployment's protocol
(:mod:`fedbandits.crypto.double_masking`, Bonawitz et al. 2017 with signed keys, self-masks and
signed survivor lists) and its round, written once (:mod:`fedbandits.crypto.secure_round`), carried
over the sync API.  This module holds the JSON forms of its messages and of a silo's durable state.

The coordinator (:mod:`fedbandits.serve.coordinator`) carries each step of the round:

1. a key set-up, before the first round (and again only if its state is lost):
   ``POST /v1/sync/keys {"secagg_epoch": e}``: each silo draws its two X25519 key pairs (kept in its
   event log, the private halves never sent) and answers with the public halves, signed with its
   long-term Ed25519 key for set-up e (``cert``, ``signature``; the deployment's signing CA,
   :mod:`fedbandits.crypto.signing`); once every silo has answered the coordinator publishes the
   roster (every member's keys, certificate and signature; the threshold t with
   2t > M + colluders) and ``POST /v1/sync/roster`` hands it to each silo, which checks it as the
   deployment's silos do (:func:`fedbandits.crypto.double_masking.roster_problem`);
2. ``POST /v1/sync/release {"epoch", "round"}``: each silo's noisy residues of round (epoch, round),
   masked with pairwise masks and a fresh self-mask, with its encrypted Shamir shares of the
   self-mask seed and a commitment to it;
3. ``POST /v1/sync/survivors``, only if a silo withdrew its release (below): each survivor signs
   the survivor list;
4. ``POST /v1/sync/unmask``: each survivor's shares of the survivors' self-mask seeds (and, if a
   silo withdrew, its round seeds with it); the coordinator removes the masks and has the sum.

Every step is idempotent: a retried request gets the stored answer (the silo's state is in its
event log, committed before it answers).  The coordinator asks again at its next tick until every
silo has answered a step, so a round waits for a silo that is down.

A release enters one masked sum, ever (issue #44): a silo masks release ``(epoch, round)`` once,
when it makes it.  Asked for it again under the same key set-up it answers the same message; under
another set-up (after the coordinator lost its state), or for a release masked by the earlier,
all-present protocol (an event log from before issue #45), it *withdraws* the release: it answers
``{"withdrawn": reason, "samples": n}`` and the round goes on without it, as with a dropout in the
deployment -- the survivors' sum if the noise provisions for the loss (``dropouts``), else the round
closes without data.  Trust model: :mod:`fedbandits.crypto.double_masking`'s (a coordinator that
cheats learns no silo's release; it can still deny service).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

import numpy as np

from fedbandits.crypto.double_masking import BLOB_BYTES, Masked, MaskingSilo, Reveal, RoundRecord, SignedRoster
from fedbandits.crypto.secure_aggregation import KEY_BYTES, SHARE_BYTES
from fedbandits.online import AgentSetup

#: the round number the masks of (budget epoch e, round r) are drawn for: unique per release
ROUNDS_PER_EPOCH = 1 << 32


def federation_context(setup: AgentSetup) -> bytes:
    """What binds secure aggregation's keys and shares to one federation (its config and entry)."""
    return hashlib.sha256(
        json.dumps({"config": setup.config.to_dict(), "entry": setup.label}, sort_keys=True).encode()
    ).digest()


def mask_round(epoch: int, round_: int) -> int:
    """Secure aggregation's number for sync round ``(epoch, round_)``: increasing, from 1 (the
    deployment's numbering: a silo has masked no round 0)."""
    return epoch * ROUNDS_PER_EPOCH + round_ + 1


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


def silo_state_to_text(silo: MaskingSilo) -> str:
    """A silo's secure-aggregation state as JSON (its private keys: the log is as secret as the data)."""
    return json.dumps(
        {
            "roster": None if silo.roster is None else roster_to_json(silo.roster),
            "offered": silo.offered,
            "joined": silo.joined,
            "keys": {k: b64(getattr(silo, k)) for k in KEY_FIELDS},
            "last_round": silo.last_round,
            "masked_epoch": silo.masked_epoch,
            "rounds": {
                str(r): {
                    "digest": b64(rec.digest),
                    "message": masked_to_json(rec.message),
                    "own_share": b64(rec.own_share),
                }
                for r, rec in silo.rounds.items()
            },
            "signed": {str(r): listed for r, listed in silo.signed.items()},
            "answered": {str(r): reveal_to_json(v) for r, v in silo.answered.items()},
        }
    )


KEY_FIELDS = ("c_private", "s_private", "c_offer", "s_offer")


def silo_state_from_text(text: str, silo: MaskingSilo, silos: int) -> MaskingSilo:
    """``silo`` (made with its identity and CA) with the state ``text`` holds."""
    data = json.loads(text)
    silo.roster = None if data["roster"] is None else roster_from_json(data["roster"], silos)
    silo.offered, silo.joined = int(data["offered"]), int(data["joined"])
    for key in KEY_FIELDS:
        setattr(silo, key, unb64(data["keys"][key], key))
    silo.last_round, silo.masked_epoch = int(data["last_round"]), int(data["masked_epoch"])
    silo.rounds = {
        int(r): RoundRecord(
            unb64(rec["digest"], "digest"),
            masked_from_json(rec["message"], silo.width),
            unb64(rec["own_share"], "own_share"),
        )
        for r, rec in data["rounds"].items()
    }
    silo.signed = {int(r): [int(i) for i in listed] for r, listed in data["signed"].items()}
    silo.answered = {int(r): reveal_from_json(v) for r, v in data["answered"].items()}
    return silo


def masked_to_json(message: Masked) -> dict[str, Any]:
    return {
        "payload": b64(np.ascontiguousarray(message.masked, dtype="<u8").tobytes()),
        "dtype": "<u8",
        "b_blobs": unkeyed(message.blobs),
        "b_commit": b64(message.commitment),
    }


def masked_from_json(value: Any, width: int) -> Masked:
    """A masked release from its JSON form, checked (a ValueError names the field)."""
    if not isinstance(value, dict) or value.get("dtype") != "<u8":
        raise ValueError("masked release: must be an object with dtype '<u8'")
    raw = unb64(value.get("payload"), "payload")
    if len(raw) != 8 * width:
        raise ValueError(f"payload: must be {width} uint64 values, got {len(raw)} bytes")
    blobs = keyed(value.get("b_blobs"), "b_blobs", BLOB_BYTES)
    return Masked(np.frombuffer(raw, dtype="<u8").astype(np.uint64), blobs, unb64(value.get("b_commit"), "b_commit"))


def reveal_to_json(reveal: Reveal) -> dict[str, Any]:
    return {"b_shares": unkeyed(reveal.b_shares), "seeds": unkeyed(reveal.seeds)}


def reveal_from_json(value: Any) -> Reveal:
    if not isinstance(value, dict):
        raise ValueError("unmask answer: must be an object")
    return Reveal(keyed(value.get("b_shares"), "b_shares", SHARE_BYTES), keyed(value.get("seeds"), "seeds", KEY_BYTES))
