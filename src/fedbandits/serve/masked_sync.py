"""``distributed-dp`` rounds of the serving coordinator: the protocol layer's secure round
(:func:`fedbandits.crypto.secure_round.secure_round`, the deployment's too) carried over the
coordinator's :class:`~fedbandits.serve.links.SiloLink`, with its durable state in the
coordinator's SQLite log (:mod:`fedbandits.serve.masking` describes the routes).

A tick runs the open round from its start: the key set-up if no roster is in force, the masked
releases, the consistency check if a silo withdrew its release, the unmask step.  What a silo
answered is kept (its masked message, or its withdrawal), so a later tick asks only the silos that
still owe one; a silo that does not answer a step ends the tick (:class:`Later`) and the round
waits for the next one -- every step is idempotent on the silo's side, so running it again from the
start costs messages, never a second masking.  The key set-up waits for every silo's keys: every
roster lists every silo.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

import numpy as np

from fedbandits.crypto.double_masking import Advert, MaskingServer
from fedbandits.crypto.secure_round import KEYS, MASKED, SURVIVORS, Ask, Epoch, Outcome, Replies, Step, drive, open_sum
from fedbandits.crypto.secure_round import secure_round as protocol_round
from fedbandits.online import AgentSetup
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.serve import masking
from fedbandits.serve.links import Answer, Request, SiloLink

log = logging.getLogger("fedbandits.serve")

TABLES = """
CREATE TABLE IF NOT EXISTS masked (
    epoch INTEGER NOT NULL, round INTEGER NOT NULL, silo INTEGER NOT NULL, secagg_epoch INTEGER NOT NULL,
    message TEXT, samples INTEGER NOT NULL, PRIMARY KEY (epoch, round, silo)
);
CREATE TABLE IF NOT EXISTS sums (epoch INTEGER NOT NULL, round INTEGER NOT NULL, total BLOB NOT NULL,
    samples INTEGER NOT NULL, PRIMARY KEY (epoch, round));
"""
#: the ``secagg`` key that marks the double-masking protocol's state (a log without it is older)
PROTOCOL = "double-masking"


class Later(Exception):
    """A silo did not answer a step of the round: the round waits for the next tick."""


class MaskedSync:
    """The secure rounds of the M silos ``link`` reaches, kept in ``db``."""

    def __init__(self, db: sqlite3.Connection, link: SiloLink, setup: AgentSetup, context: bytes) -> None:
        cal = setup.calibration
        assert isinstance(cal, DistributedCalibration)
        self.db, self.link, self.setup = db, link, setup
        self.colluders, self.least = cal.colluders, setup.silos - cal.dropouts
        self.db.executescript(TABLES)
        self.server = MaskingServer(context, cal.bits, setup.width, None)  # the silos check every signature
        kv = dict(self.db.execute("SELECT key, value FROM secagg").fetchall())
        if kv.get("protocol") != PROTOCOL:  # none yet, or the all-present protocol's (before issue #45)
            self.db.execute("DELETE FROM secagg")
            self._put("protocol", PROTOCOL)
            self._put("epoch", kv.get("epoch", "0"))  # the next set-up is a later one than any before
            kv = {"epoch": kv.get("epoch", "0")}
        self.server.epoch = int(kv["epoch"])
        if "roster" in kv:
            self.server.roster = masking.roster_from_json(json.loads(kv["roster"]), setup.silos)

    @property
    def set_up(self) -> bool:
        return self.server.roster is not None

    def _put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO secagg VALUES (?, ?)", (key, value))

    def run(self, epoch: int, round_: int, extra: dict[int, list[Request]]) -> RoundTick:
        """One tick's work on round ``(epoch, round_)``; ``extra``: requests to send each silo with
        the tick's first exchange (a bundled prefix), whose answers come back in the result."""
        tick = RoundTick(epoch, round_, extra)
        steps = protocol_round(
            self.server,
            masking.mask_round(epoch, round_),
            new_epoch=self.server.roster is None,
            colluders=self.colluders,
            least=self.least,
        )
        try:
            tick.outcome = drive(steps, lambda step: self._carry(tick, step))
        except Later:
            self.server.round_, self.server.survivors = None, None
            return tick
        for silo, why in tick.outcome.rejected:
            log.warning("round %d.%d: refused silo %s's answer: %s", epoch, round_, silo, why)
        total, why = open_sum(self.server, tick.outcome.reveals, tick.outcome.why)
        if total is None:
            tick.outcome.reveals, tick.outcome.why = None, why
            log.warning("round %d.%d: %s; closing without data", epoch, round_, why)
            total = np.zeros(self.setup.width, dtype=np.uint64)
        samples = self._samples(epoch, round_, tick.outcome)
        self.db.execute(
            "INSERT OR REPLACE INTO sums VALUES (?, ?, ?, ?)", (epoch, round_, total.astype("<u8").tobytes(), samples)
        )
        tick.closed = True
        return tick

    def total(self, epoch: int, round_: int) -> np.ndarray | None:
        """The modular sum closed round ``(epoch, round_)`` kept (None: closed before issue #45)."""
        got = self.db.execute("SELECT total FROM sums WHERE epoch = ? AND round = ?", (epoch, round_)).fetchone()
        return None if got is None else np.frombuffer(got[0], dtype="<u8").astype(np.uint64)

    def _samples(self, epoch: int, round_: int, outcome: Outcome) -> int:
        if outcome.reveals is None:
            return 0
        rows = self.db.execute("SELECT silo, samples FROM masked WHERE epoch = ? AND round = ?", (epoch, round_))
        return sum(n for silo, n in rows if silo in outcome.survivors)

    # -- carrying the steps ------------------------------------------------------------------------
    def _carry(self, tick: RoundTick, step: Step) -> Replies | None:
        if isinstance(step, Epoch):
            if step.roster.members != list(range(self.link.silos)):
                self.server.roster = None  # (a silo's keys were refused: the next tick runs a new set-up)
                raise Later
            self._put("roster", json.dumps(masking.roster_to_json(step.roster)))
            self._put("epoch", str(step.roster.epoch))
            self.db.execute("DELETE FROM secagg WHERE key LIKE 'joined:%'")
            return None
        if step.phase == KEYS:
            return self._keys(tick, step.fields["epoch"])
        if step.phase == MASKED:
            return self._masked(tick, step)
        body: dict[str, Any] = {"epoch": tick.epoch, "round": tick.round}
        if step.phase == SURVIVORS:
            body["survivors"] = step.fields["survivors"]
            asks = {s: [("/v1/sync/survivors", body)] for s in step.to or []}
            return self._answers(tick, asks, _signature)
        f = step.fields
        body.update(survivors=f["survivors"], dropped=f["dropped"], signatures=masking.unkeyed(f["signatures"]))
        asks = {
            s: [("/v1/sync/unmask", {**body, "held": masking.unkeyed(step.per_silo[s]["held"])})] for s in step.to or []
        }
        return self._answers(tick, asks, _reveal)

    def _exchange(self, tick: RoundTick, asks: dict[int, list[Request]]) -> dict[int, list[Answer]]:
        """The asks (with the tick's extra requests, the first time): each silo's answers to its asks."""
        sent = {s: len(a) for s, a in tick.extra.items()}
        together = {s: [*tick.extra.get(s, []), *asks.get(s, [])] for s in set(asks) | set(tick.extra)}
        tick.extra = {}
        out: dict[int, list[Answer]] = {}
        for silo, answers in self.link.exchange(together).items():
            extra = sent.get(silo, 0)
            if extra:
                tick.extra_answers[silo] = answers[:extra]
            if silo in asks:
                out[silo] = answers[extra:]
        return out

    def _answers(self, tick: RoundTick, asks: dict[int, list[Request]], parse: Any) -> Replies:
        return self._replies(tick, asks, _last(self._exchange(tick, asks)), parse)

    def _replies(
        self, tick: RoundTick, asks: dict[int, list[Request]], answers: dict[int, Answer], parse: Any
    ) -> Replies:
        """Each answer parsed; a silo that did not answer, or not in form, ends the tick (Later)."""
        replies: Replies = {}
        for silo, got in sorted(answers.items()):
            if got is None:  # unreachable or refused (the link logged it)
                continue
            try:
                replies[silo] = (silo, parse(got))
            except (TypeError, KeyError, ValueError) as exc:
                log.warning("silo %d: a malformed answer (%s)", silo, exc)
        tick.unreachable += [s for s in asks if s not in replies and s not in tick.unreachable]
        if tick.unreachable:
            raise Later
        return replies

    def _keys(self, tick: RoundTick, epoch: int) -> Replies:
        """Every silo's signed keys for set-up ``epoch``.  A silo that has advertised or joined a later
        set-up says which it would advertise for (this coordinator lost its state): the next tick
        asks for that one."""
        asks = {s: [("/v1/sync/keys", {"secagg_epoch": epoch})] for s in range(self.link.silos)}
        got = _last(self._exchange(tick, asks))
        later = [a["next_epoch"] for a in got.values() if a is not None and isinstance(a.get("next_epoch"), int)]
        if later:
            log.warning("secure aggregation: the silos have set up epochs up to %d before; starting after", max(later))
            self.server.epoch = max(later) - 1
            self._put("epoch", str(self.server.epoch))
            raise Later
        return self._replies(tick, asks, got, _advert)

    def _masked(self, tick: RoundTick, step: Ask) -> Replies:
        """The masked releases: the stored ones, and the others asked for (the roster first, to a
        silo that has not joined it)."""
        epoch, round_, secagg_epoch = tick.epoch, tick.round, step.fields["epoch"]
        stored = {
            silo: (e, text)
            for silo, e, text in self.db.execute(
                "SELECT silo, secagg_epoch, message FROM masked WHERE epoch = ? AND round = ?", (epoch, round_)
            )
        }
        roster = {"roster": masking.roster_to_json(step.fields["roster"])}
        joined = {int(k.split(":")[1]) for (k,) in self.db.execute("SELECT key FROM secagg WHERE key LIKE 'joined:%'")}
        asks: dict[int, list[Request]] = {}
        for s in range(self.link.silos):
            if s not in stored or (stored[s][1] is not None and stored[s][0] != secagg_epoch):
                join = [] if s in joined else [("/v1/sync/roster", roster)]
                asks[s] = [*join, ("/v1/sync/release", {"epoch": epoch, "round": round_})]
        for silo, answers in sorted(self._exchange(tick, asks).items()):
            if len(asks[silo]) == 2 and len(answers) == 2 and answers[0] is not None:
                self._put(f"joined:{silo}", "yes")  # (the silo took the roster)
            stored[silo] = self._keep(tick, silo, answers[-1] if answers else None, secagg_epoch)
        tick.unreachable += [s for s in asks if s not in stored or stored[s] == (-1, None)]
        if tick.unreachable:
            raise Later
        width = self.setup.width
        return {
            s: (s, (e, masking.masked_from_json(json.loads(text), width))) for s, (e, text) in stored.items() if text
        }

    def _keep(self, tick: RoundTick, silo: int, got: Answer, secagg_epoch: int) -> tuple[int, str | None]:
        """Store a silo's release answer: its masked message, or its withdrawal (message NULL)."""
        if got is None:
            return -1, None
        try:
            if not isinstance(got.get("samples"), int):
                raise ValueError("samples: must be an integer")
            if "withdrawn" in got:
                log.warning("silo %d withdrew its release: %s", silo, str(got["withdrawn"])[:200])
                row: tuple[int, str | None] = (secagg_epoch, None)
            else:
                masking.masked_from_json(got, self.setup.width)  # checked before it is kept
                row = (
                    int(got["secagg_epoch"]),
                    json.dumps({k: got[k] for k in ("payload", "dtype", "b_blobs", "b_commit")}),
                )
        except (TypeError, KeyError, ValueError) as exc:
            log.warning("silo %d: a malformed release refused (%s)", silo, exc)
            return -1, None
        self.db.execute(
            "INSERT OR REPLACE INTO masked VALUES (?, ?, ?, ?, ?, ?)",
            (tick.epoch, tick.round, silo, row[0], row[1], int(got["samples"])),
        )
        tick.released.append(silo)
        return row


class RoundTick:
    """What one tick did on a masked round."""

    def __init__(self, epoch: int, round_: int, extra: dict[int, list[Request]]) -> None:
        self.epoch, self.round = epoch, round_
        self.extra = dict(extra)
        self.extra_answers: dict[int, list[Answer]] = {}
        self.released: list[int] = []
        self.unreachable: list[int] = []
        self.closed = False
        self.outcome: Outcome | None = None


def _last(answers: dict[int, list[Answer]]) -> dict[int, Answer]:
    return {silo: got[-1] if got else None for silo, got in answers.items()}


def _advert(got: dict[str, Any]) -> Advert:
    return Advert(*(masking.unb64(got[k], k) for k in ("c_public", "s_public", "cert", "signature")))


def _signature(got: dict[str, Any]) -> bytes:
    return masking.unb64(got["signature"], "signature")


def _reveal(got: dict[str, Any]) -> object:
    return masking.reveal_from_json(got)
