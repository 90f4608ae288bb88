"""The deployment's ClientApp: a silo's side of the Flower app (needs ``fedbandits[deploy]``).

Flower starts a process for every message; each handler loads the silo's durable state
(:class:`~fedbandits.federation.silo.Silo`), turns the request into one call on it, and replies.  The
messages are described in :mod:`fedbandits.federation.wire`.  This module imports only the silo's
side: the server's modules (coordinator, results, the shuffler's server) stay out of every
ClientApp process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedbandits.crypto.double_masking import Advert, Masked, SignedRoster
from fedbandits.crypto.secure_aggregation import KEY_BYTES
from fedbandits.crypto.signing import SIGNATURE_BYTES, Authority, Identity, load_signing
from fedbandits.federation.processes import serving_lock
from fedbandits.federation.shuffler_client import ShufflerClient
from fedbandits.federation.silo import Silo, SiloError, check_pinned_spec
from fedbandits.federation.spec import cached_spec_from_json
from fedbandits.federation.wire import WITHHELD, arrays_of, byte_list, file_logger, int_list

log = logging.getLogger("fedbandits.federation")

#: a silo's node config for secure aggregation's signatures (distributed-dp)
SIGNING_CONFIG = ("signing-key", "signing-cert", "signing-ca")

client_app = ClientApp()

Handler = Callable[[Message, Context], Message]


def _one_at_a_time(handler: Handler) -> Handler:
    """Serve ``handler`` under the silo's :func:`~fedbandits.federation.processes.serving_lock`."""

    @functools.wraps(handler)
    def serve(msg: Message, context: Context) -> Message:
        with serving_lock(Path(str(context.node_config["state-dir"]))):
            return handler(msg, context)

    return serve


def _silo(context: Context, meta: dict[str, Any]) -> Silo:
    node = context.node_config
    state_dir = Path(str(node["state-dir"]))
    file_logger(state_dir / "silo.log")
    spec = cached_spec_from_json(str(meta["spec"]), state_dir / "spec.pickle")
    if spec.digest != meta.get("digest"):
        raise SiloError("the request's config hash does not match its spec")
    check_pinned_spec(spec, node.get("spec-digest"))
    data_file = str(node.get("data-file", "")) or None
    # secret noise and no trial report unless the silo's operator asked otherwise (node config)
    noise = str(node.get("noise-source", "os"))
    share = str(node.get("share-report", "false")).lower() == "true"
    silo_id = int(node["silo-id"])
    return Silo(spec, silo_id, state_dir, noise, data_file, share_report=share, signing=_signing(node, silo_id))


@functools.cache
def _signing_files(silo: int, key: str, cert: str, ca: str) -> tuple[Identity, Authority]:
    return load_signing(silo, key, cert, ca)


def _signing(node: dict[str, Any], silo: int) -> tuple[Identity, Authority] | None:
    """The silo's signing identity and the pinned signing CA from its node config, if given."""
    files = [str(node.get(k, "")) for k in SIGNING_CONFIG]
    if not any(files):
        return None
    if not all(files):
        raise SiloError(f"give all of the node config's {', '.join(SIGNING_CONFIG)}, or none")
    try:
        return _signing_files(silo, *files)
    except (OSError, ValueError) as exc:
        raise SiloError(f"the silo's signing files: {exc}") from None


def _meta_int(meta: dict[str, Any], key: str) -> int:
    """An integer field of a request (the silo trusts nothing it receives)."""
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SiloError(f"request field {key!r} must be an integer, got {value!r}")
    return value


def _faults(context: Context) -> dict[int, str]:
    """Test hook (node config ``inject-fault``, e.g. "nan@2,replay@3"): misbehave in given rounds."""
    text = str(context.node_config.get("inject-fault", ""))
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, _, at = item.partition("@")
        out[int(at)] = kind
    return out


def _patience(context: Context) -> float:
    value = context.node_config.get("shuffler-patience", 30.0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 30.0


def _reply(msg: Message, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Message:
    content = RecordDict({"meta": ConfigRecord(meta)})
    if arrays:
        content["data"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    return Message(content, reply_to=msg)


@client_app.train()
@_one_at_a_time
def silo_sync(msg: Message, context: Context) -> Message:
    meta = dict(msg.content["meta"])
    silo = _silo(context, meta)
    k = _meta_int(meta, "round")
    arrays = arrays_of(msg.content.array_records.get("synced")) if "synced" in msg.content.array_records else None
    prefix = arrays["prefix"] if arrays else None
    psum = silo.release(k, prefix, _meta_int(meta, "prefix_round"))
    out_meta = {"silo_id": silo.silo_id, "digest": silo.spec.digest, "phase": "sync", "round": k}
    fault = _faults(context).get(k)
    if silo.spec.masked:
        masked = _masked(silo, meta, k)
        to = sorted(masked.blobs)
        out_meta.update(
            {
                "epoch": meta.get("epoch"),
                "b_to": to,
                "b_blobs": [masked.blobs[j] for j in to],
                "b_commit": masked.commitment,
            }
        )
        return _reply(msg, out_meta, {"masked": masked.masked})
    if silo.spec.shuffled:
        # the p-sum goes to the shuffler (mutual TLS); the server only hears that it was sent
        shuffler = ShufflerClient.from_config(context.node_config)
        status = shuffler.send(silo.silo_id, silo.spec.digest, k, psum, patience=_patience(context))
        log.info("silo %d: release %d handed to the shuffler (%s)", silo.silo_id, k, status)
        if fault == "leak":  # test hook: a silo that also sends its p-sum to the server
            return _reply(msg, out_meta, {"psum": psum})
        return _reply(msg, out_meta, {})
    if fault == "nan":
        psum = psum.copy()
        psum[0] = np.nan
    elif fault == "shape":
        psum = psum[:-1].copy()
    elif fault == "replay" and k > 1:
        out_meta["round"] = k - 1
        psum = silo.state.messages[k - 1]
    if fault:
        log.warning("silo %d: injecting fault %r in round %d (test hook)", silo.silo_id, fault, k)
    return _reply(msg, out_meta, {"psum": psum})


def _roster_from(meta: dict[str, Any], context: bytes) -> SignedRoster:
    """The roster a request delivers (``roster_*`` fields), checked for shape; the silo checks the rest."""
    members = int_list(meta, "roster_members")
    c_public, s_public = byte_list(meta, "roster_c_public", KEY_BYTES), byte_list(meta, "roster_s_public", KEY_BYTES)
    certs, signatures = byte_list(meta, "roster_certs"), byte_list(meta, "roster_signatures", SIGNATURE_BYTES)
    if members is None or c_public is None or s_public is None or certs is None or signatures is None:
        raise SiloError(
            "a roster lists members (integers), their 32-byte c_public and s_public keys, certificates and "
            f"{SIGNATURE_BYTES}-byte signatures"
        )
    if not len(members) == len(c_public) == len(s_public) == len(certs) == len(signatures):
        raise SiloError("a roster gives two keys, a certificate and a signature per member")
    adverts = {
        m: Advert(c, s_, cert, sig)
        for m, c, s_, cert, sig in zip(members, c_public, s_public, certs, signatures, strict=True)
    }
    return SignedRoster.of(context, _meta_int(meta, "roster_epoch"), _meta_int(meta, "roster_threshold"), adverts)


def _masked(silo: Silo, meta: dict[str, Any], k: int) -> Masked:
    """The silo's release k masked for the request's epoch (joining the epoch the request delivers)."""
    if "roster_members" in meta:
        silo.join(_roster_from(meta, silo.spec.digest.encode()))
    secagg = silo.state.secagg
    if secagg is None or secagg.roster is None or secagg.roster.epoch != meta.get("epoch"):
        raise SiloError(f"request for epoch {meta.get('epoch')!r}, but this silo holds no keys of that epoch")
    return silo.masked(k)


def _keyed(meta: dict[str, Any], keys: str, values: str, size: int | None = None) -> dict[int, bytes]:
    who, blobs = int_list(meta, keys), byte_list(meta, values, size)
    if who is None or blobs is None or len(who) != len(blobs):
        raise SiloError(f"a request must pair {keys} (integers) with {values} (bytes)")
    return dict(zip(who, blobs, strict=True))


@client_app.query()
@_one_at_a_time
def silo_secure_aggregation(msg: Message, context: Context) -> Message:
    """Key set-up ("keys"), consistency check ("survivors") and unmask step ("unmask") of secure
    aggregation (distributed-dp; :mod:`fedbandits.crypto.double_masking`)."""
    meta: dict[str, Any] = dict(msg.content["meta"])
    silo = _silo(context, meta)
    phase = meta.get("phase")
    k = _meta_int(meta, "round")
    out: dict[str, Any] = {"silo_id": silo.silo_id, "digest": silo.spec.digest, "phase": phase, "round": k}
    secagg = silo.state.secagg
    if phase != "keys" and (secagg is None or secagg.roster is None or secagg.roster.epoch != meta.get("epoch")):
        raise SiloError(f"request for epoch {meta.get('epoch')!r}, but this silo holds no keys of that epoch")
    if phase == "keys":
        advert = silo.advertise(_meta_int(meta, "epoch"))
        out.update(c_public=advert.c_public, s_public=advert.s_public, cert=advert.cert, signature=advert.signature)
    elif phase == "survivors":
        out["signature"] = silo.sign_survivors(k, meta.get("survivors"))
    elif phase == "unmask":
        signatures = _keyed(meta, "signers", "signatures", SIGNATURE_BYTES)
        held = _keyed(meta, "held_from", "held")
        reveal = silo.unmask(k, meta.get("survivors"), meta.get("dropped"), signatures, held)
        out["b_owners"] = sorted(reveal.b_shares)
        out["b_shares"] = [reveal.b_shares[j] for j in out["b_owners"]]
        out["seed_for"] = sorted(reveal.seeds)
        out["seeds"] = [reveal.seeds[j] for j in out["seed_for"]]
    else:
        raise SiloError(f"unknown secure-aggregation phase {phase!r}")
    return _reply(msg, out, {})


@client_app.evaluate()
@_one_at_a_time
def silo_finish(msg: Message, context: Context) -> Message:
    meta = dict(msg.content["meta"])
    silo = _silo(context, meta)
    arrays = arrays_of(msg.content.array_records.get("synced")) if "synced" in msg.content.array_records else None
    report = silo.finish(arrays["prefix"] if arrays else None, _meta_int(meta, "prefix_round"))
    out_meta = {
        "silo_id": silo.silo_id,
        "digest": silo.spec.digest,
        "phase": "finish",
        "round": _meta_int(meta, "round"),
    }
    if report is None:  # the operator did not opt in: acknowledge without a report
        return _reply(msg, {**out_meta, "report": WITHHELD}, {})
    curve = report.pop("curve")
    return _reply(msg, {**out_meta, **report}, {"curve": curve})
