"""One round of secure aggregation on the server's side, with no transport in it (issue #45).

The order of a round of :mod:`fedbandits.crypto.double_masking` is written here once: a key set-up
when the epoch needs one (steps 1-2 of that module's docstring), the masked messages (3), the
consistency check when somebody dropped (4) and the unmask step (5); the sum is
:meth:`~fedbandits.crypto.double_masking.MaskingServer.total` of the round's reveals, which the
coordinator takes when it closes the round.  A transport drives it -- the Flower ServerApp, the
serving coordinator over the silos' sync API (:mod:`fedbandits.serve.masked_sync`), or
:mod:`fedbandits.federation.parity`, which hands the messages between objects in memory:

    outcome = drive(secure_round(server, k, new_epoch=..., colluders=...), carry)

where ``carry(step)`` sends a step's request and returns the answers, collected and parsed.

A step is an :class:`Ask` (send ``phase`` with ``fields`` to the silos ``to``, or to every silo the
transport can reach when ``to`` is None) or an :class:`Epoch` (a roster was published: the transport
records it and delivers it with the next request; it answers None).  Replies map a silo index to
``(tag, answer)``: ``tag`` is the transport's name for the sender (a Flower node id), kept with any
refusal; ``answer`` is the parsed answer -- an :class:`~fedbandits.crypto.double_masking.Advert`,
``(epoch, Masked)``, a signature (bytes) or a :class:`~fedbandits.crypto.double_masking.Reveal` --
or a string saying why the transport could not parse it.  The transport validates only the
envelope (who sent it, for which round); everything the protocol checks is checked here.

What the transport decides, not this module: how long it waits for answers (a silo that does not
answer by then has dropped), which silos it can reach, and when an epoch needs new keys.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedbandits.crypto.double_masking import (
    Advert,
    Masked,
    MaskingServer,
    Reveal,
    SignedRoster,
    check_advert,
    secure_threshold,
)
from fedbandits.crypto.secure_aggregation import SecAggError

KEYS, MASKED, SURVIVORS, UNMASK = "keys", "masked", "survivors", "unmask"

#: silo -> (the transport's tag for the sender, the parsed answer or why it could not be parsed)
Replies = dict[int, tuple[Any, Any]]


@dataclass(frozen=True)
class Ask:
    """Send ``phase`` with ``fields`` to the silos ``to`` (None: every silo the transport reaches),
    each with its own ``per_silo`` fields too."""

    phase: str
    fields: dict[str, Any]
    to: list[int] | None = None
    per_silo: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Epoch:
    """A roster was published for the silos whose tags are ``tags`` (silo -> tag)."""

    roster: SignedRoster
    tags: dict[int, Any]


@dataclass
class Outcome:
    """How the round ended: the survivors' unmask answers (the sum is the server's ``total`` of
    them), or None and why the round closes without data."""

    reveals: dict[int, Reveal] | None = None
    why: str = ""
    survivors: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    signers: list[int] = field(default_factory=list)
    #: (tag, reason) of every answer the protocol refused (phase by phase, silo by silo)
    rejected: list[tuple[Any, str]] = field(default_factory=list)

    def without_data(self, why: str) -> Outcome:
        self.reveals, self.why = None, why
        return self


Step = Ask | Epoch


def secure_round(
    server: MaskingServer, round_: int, *, new_epoch: bool, colluders: int, least: int = 1
) -> Generator[Step, Replies | None, Outcome]:
    """Round ``round_`` of the epoch in force (after a key set-up first when ``new_epoch``);
    ``least``: the fewest survivors whose sum the noise is calibrated for (M - dropouts: the honest
    silos refuse to sign a shorter list, so such a round closes without data at once)."""
    out = Outcome()
    if new_epoch:
        adverts: dict[int, Advert] = {}
        tags: dict[int, Any] = {}
        got = yield Ask(KEYS, {"epoch": server.next_epoch})
        for silo, (tag, advert) in _replies(got):
            why = _refusal(advert, Advert)
            if why is None and server.authority is not None:
                why = check_advert(server.authority, server.context, server.next_epoch, silo, advert)
            if why is None:
                adverts[silo], tags[silo] = advert, tag
            else:
                out.rejected.append((tag, why))
        if not adverts:
            return out.without_data("no silo answered the secure-aggregation key set-up")
        yield Epoch(server.publish(adverts, secure_threshold(len(adverts), colluders)), tags)
    assert server.roster is not None, "no epoch: ask for a key set-up first"
    server.open_round(round_)
    epoch, t = server.epoch, server.roster.threshold
    got = yield Ask(MASKED, {"epoch": epoch, "round": round_, "roster": server.roster})
    for silo, (tag, answer) in _replies(got):
        why = _refusal(answer, tuple)
        if why is None:
            sent_epoch, message = answer
            why = _refusal(message, Masked) or server.accept(silo, sent_epoch, round_, message)
        if why is not None:
            out.rejected.append((tag, why))
    out.survivors, out.dropped = server.close_messages(), server.dropped()
    if len(out.survivors) < t:
        return out.without_data(f"{len(out.survivors)} masked message(s), fewer than t = {t}")
    if len(out.survivors) < least:
        return out.without_data(f"{len(out.survivors)} masked message(s); the noise needs sums of at least {least}")
    if out.dropped:  # consistency check: round seeds are revealed only on a signed list
        got = yield Ask(SURVIVORS, {"epoch": epoch, "round": round_, "survivors": out.survivors}, out.survivors)
        for silo, (tag, signature) in _replies(got):
            why = _refusal(signature, bytes) or server.accept_signature(silo, signature)
            if why is not None:
                out.rejected.append((tag, why))
        out.signers = sorted(server.signatures)
        if len(out.signers) < t:
            return out.without_data(f"{len(out.signers)} survivor signature(s), fewer than t = {t}")
    out.reveals = yield from _unmask(server, round_, out)
    return out


def drive(steps: Generator[Step, Replies | None, Outcome], carry: Callable[[Step], Replies | None]) -> Outcome:
    """Run a round to its end, ``carry`` taking each step to the silos and bringing back the answers."""
    replies: Replies | None = None
    while True:
        try:
            step = steps.send(replies)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        replies = carry(step)


def open_sum(server: MaskingServer, reveals: dict[int, Reveal] | None, why: str) -> tuple[np.ndarray | None, str]:
    """The survivors' modular sum of a driven round (:attr:`Outcome.reveals`), or None and the reason the
    round closes without data: ``why`` when it ended without reveals, or the masks do not come off (a
    share or a seed does not check).  Without a sum the server forgets the round: nobody's data is
    released, and the epoch's keys stay secret.  Both transports close a round through this."""
    if reveals is not None:
        try:
            return server.total(reveals), ""
        except SecAggError as exc:
            why = f"the masks cannot be removed ({exc})"
    server.round_, server.survivors = None, None
    return None, why


def _unmask(server: MaskingServer, round_: int, out: Outcome) -> Generator[Step, Replies | None, dict[int, Reveal]]:
    """Step 5: each survivor's self-mask shares of the survivors and its round seeds with the dropped."""
    fields = {
        "epoch": server.epoch,
        "round": round_,
        "survivors": out.survivors,
        "dropped": out.dropped,
        "signatures": {i: server.signatures[i] for i in out.signers},
    }
    held = {silo: {"held": server.shares_for(silo)} for silo in out.survivors}
    got = yield Ask(UNMASK, fields, out.survivors, held)
    reveals: dict[int, Reveal] = {}
    for silo, (tag, reveal) in _replies(got):
        why = _refusal(reveal, Reveal)
        if why is None and silo in out.survivors:
            reveals[silo] = reveal
        else:
            out.rejected.append((tag, why or f"silo {silo} is not a survivor of round {round_}"))
    return reveals


def _replies(got: Replies | None) -> list[tuple[int, tuple[Any, Any]]]:
    return sorted((got or {}).items(), key=lambda item: item[0])


def _refusal(answer: object, kind: type) -> str | None:
    """The transport's reason when it could not parse an answer, or a wrong kind of answer."""
    if isinstance(answer, str):
        return answer
    if not isinstance(answer, kind):
        return f"expected {kind.__name__}, got {type(answer).__name__}"
    return None
