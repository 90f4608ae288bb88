"""The messages of the deployment's Flower app, and the record helpers both of its ends use
(needs ``fedbandits[deploy]``): :mod:`~fedbandits.federation.server_app` writes them,
:mod:`~fedbandits.federation.client_app` reads them and answers.

Messages (Flower Message API, one per silo per synchronisation):

* server -> silo ``train``: ConfigRecord ``meta`` {phase "sync", round k, digest, prefix_round
  k-1, spec (the deployment spec as JSON)}, ArrayRecord ``synced`` {"prefix": the synced
  prefix after k-1} (absent for k = 1);
* silo -> server reply: ``meta`` {silo_id, digest, phase, round}, ArrayRecord {"psum": the
  silo's released noisy p-sum (``ldp``) or exact batch statistics (``none``)}; with
  ``sdp-amplification`` the p-sum goes to the shuffler instead
  (:mod:`fedbandits.federation.shuffler`) and the reply carries no arrays: the server takes the
  round's anonymous batch from the shuffler when the round closes;
* server -> silo ``evaluate`` (phase "finish") with the last prefix; the reply is the silo's
  trial report (regret curve on the time grid and counts).

``distributed-dp`` adds secure aggregation against a server that cheats
(:mod:`fedbandits.crypto.double_masking`): before the first round of an epoch, ``query`` phase
"keys" (with the new epoch; each silo replies with two public keys, its signing certificate and its
signature of them); the first ``train`` request of the epoch carries the signed roster
(``roster_*`` fields), which each silo checks before it masks.  A silo's sync reply carries
``masked`` (its residues plus a fresh self-mask plus its pairwise masks, uint64), its encrypted
self-mask shares (``b_to``/``b_blobs``) and their commitment (``b_commit``).  Then, if some silo
is missing, ``query`` phase "survivors" to the silos whose message the server holds (each signs
the survivor list, ``signature``); and every round phase "unmask" with the list, the dropped silos, the signatures
(``signers``/``signatures``) and the self-mask shares addressed to that silo
(``held_from``/``held``); each replies with its self-mask shares of the survivors
(``b_owners``/``b_shares``) and its round seeds with the dropped (``seed_for``/``seeds``).  The
server removes the masks and closes the round; too few survivors or signatures close it without
data.  No key is ever revealed: an epoch survives dropouts.

Nothing else crosses the network.  Message sizes are measured as the bytes of the objects Flower
serialises and ships (before TLS framing).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # flwr is the deploy extra's; the coordinator imports WITHHELD without it
    from flwr.app import ArrayRecord

#: a silo's finish reply without its trial report (its operator did not opt in)
WITHHELD = "withheld"


def wire_bytes(obj: Any) -> int:
    """Bytes of every serialised object Flower ships for a message (its content tree)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(o.deflate()) for o in get_all_nested_objects(obj).values())


def file_logger(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger("fedbandits")
    root.setLevel(logging.INFO)
    if not any(isinstance(h, logging.FileHandler) and h.baseFilename == str(path) for h in root.handlers):
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)


def arrays_of(record: ArrayRecord | None) -> dict[str, np.ndarray] | None:
    if record is None:
        return None
    return {key: arr.numpy() for key, arr in record.items()}


def byte_list(meta: dict[str, Any], key: str, size: int | None = None) -> list[bytes] | None:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(v, bytes) for v in value):
        return None
    if size is not None and any(len(v) != size for v in value):
        return None
    return value


def int_list(meta: dict[str, Any], key: str) -> list[int] | None:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return value
