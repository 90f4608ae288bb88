"""The pending decisions a loaded snapshot leaves out, re-entered into the agent loaded from it.

A snapshot holds no pending decision (they are in the event log already: :mod:`fedbandits.serve.store`),
so whoever loads one re-enters the decisions that were pending when it was taken -- logged, with no
reward logged by then, and not expired in the snapshot's state -- with :meth:`Agent.recall_left_out`.

* :func:`from_log` reads them from the log: a start, a recovery.
* :func:`carried` takes them from the agent a replica held before it reloaded (a replica reloads at
  each release and adoption another replica of its silo makes, inside the transaction that holds the
  log's write lock: fedbandits.serve.silo).  That agent had read the log up to its event ``applied``,
  so its pending decisions are the log's up to there; the events after ``applied`` up to the
  snapshot, which the replica has just read, add the decisions made since and remove those answered
  since.  The cost is the events since, not the pending window, which ``from_log`` reads whole at
  every round.  The result is the same state: the same numbers, features, deadlines and user keys
  (tests/test_serve_replicas.py compares digests with a replica that read them from the log).  When
  the held agent counts a decision expired that the snapshot's state holds pending (its own clock ran
  past the deadline in a request the log has no trace of), the log alone says whether that decision is
  pending, and :func:`carried` declines (a safeguard: a release and an adoption expire what is due
  before their snapshot).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.online import Agent
from fedbandits.serve.store import Event, Store


def from_log(store: Store, agent: Agent, seq: int) -> None:
    """Re-enter into ``agent`` (loaded from the snapshot at event ``seq``) the decisions the log shows
    unanswered by then and the agent does not count expired."""
    left = [row for row in store.unanswered(seq) if row[0] not in agent.expired]
    agent.recall_left_out(
        [number for number, _, _, _ in left],
        np.frombuffer(b"".join(x for _, _, x, _ in left)),
        [at + agent.expiry_seconds for _, at, _, _ in left],
        [user for _, _, _, user in left],
    )


def carried(agent: Agent, seq: int, held: Agent, applied: int, news: Sequence[Event]) -> bool:
    """Re-enter into ``agent`` (loaded from the snapshot at event ``seq``) the pending decisions of
    ``held`` -- the replica's agent, caught up to event ``applied`` -- and of ``news`` (the events after
    ``applied``); False, having changed nothing, when they cannot stand for the log's (above)."""
    if applied > seq or held.instance != agent.instance or not held.expired <= agent.expired:
        return False
    since = [event for event in news if event.seq <= seq]
    answered = {event.number for event in since if event.kind != "decision"}
    numbers = [n for n in held.pending if n not in answered and n not in agent.expired]
    made = [e for e in since if e.kind == "decision" and e.number not in answered and e.number not in agent.expired]
    x = [held.pending[n][0] for n in numbers] + [np.frombuffer(e.x or b"") for e in made]
    users = [held.pending_users.get(n) for n in numbers] if held.pending_users else [None] * len(numbers)
    agent.recall_left_out(
        numbers + [e.number for e in made],
        np.array(x, dtype=np.float64).reshape(len(x), agent.dim),
        [held.pending[n][1] for n in numbers] + [e.at + agent.expiry_seconds for e in made],
        users + [e.user for e in made],
    )
    return True
