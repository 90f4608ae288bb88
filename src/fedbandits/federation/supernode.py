"""``flower-supernode`` with its two idle waits shortened: how fedbandits starts every SuperNode.

    python -m fedbandits.federation.supernode --superlink HOST:PORT ...   (flower-supernode's flags)

Flower 1.42's SuperNode (``flwr.supernode.start_client_internal``) pulls its messages from the
SuperLink in a loop: after a pull that brings nothing it sleeps 3 s, and once a message is handed
to its ClientApp it checks every 0.5 s whether the reply is ready.  A sync round of a deployment is
one message exchange (two for ``distributed-dp``: the masked release, then the unmask answers),
and each exchange waits for the *last* silo's next pull: with M silos on average 3M/(M+1) s
(2.25 s for 3 silos), plus about 0.25 s for the reply; a ``distributed-dp`` round thus waited
about 5 s on idle timers alone.  Here the same entry point runs with those waits at
:data:`PULL_SECONDS` and :data:`REPLY_SECONDS` (every other wait of the module is unchanged); the
environment variable ``FEDBANDITS_SUPERNODE_PULL`` sets the first.  A pull is one small
authenticated request to the SuperLink, so M silos pulling twice a second cost it little.

Flower's module is changed only through its ``time`` name, and only for those two durations: if a
later Flower version waits differently the SuperNode runs as Flower wrote it
(tests/test_federation.py checks that 1.42 still waits as described here).
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

#: Flower's idle waits, as its SuperNode loop writes them, and what this module makes of them
FLOWER_PULL_SECONDS, FLOWER_REPLY_SECONDS = 3, 0.5
PULL_SECONDS, REPLY_SECONDS = 0.5, 0.1
PULL_VARIABLE = "FEDBANDITS_SUPERNODE_PULL"


def pull_seconds() -> float:
    """The idle pull interval: ``FEDBANDITS_SUPERNODE_PULL`` if set (a number in [0.05, 3]), else 0.5 s."""
    raw = os.environ.get(PULL_VARIABLE)
    if raw is None:
        return PULL_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= FLOWER_PULL_SECONDS:
        raise SystemExit(f"{PULL_VARIABLE} must be a number of seconds in [0.05, 3], got {raw!r}")
    return value


def shortened(pull: float) -> SimpleNamespace:
    """A stand-in for the ``time`` module whose ``sleep`` shortens Flower's two idle waits."""
    waits = {FLOWER_PULL_SECONDS: pull, FLOWER_REPLY_SECONDS: REPLY_SECONDS}

    def sleep(seconds: float) -> None:
        time.sleep(waits.get(seconds, seconds))

    names = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    return SimpleNamespace(**{**names, "sleep": sleep})


def main() -> None:
    """Run ``flower-supernode`` with the command line's flags, its idle waits shortened."""
    pull = pull_seconds()
    from flwr.supernode import start_client_internal
    from flwr.supernode.cli import flower_supernode

    start_client_internal.time = shortened(pull)  # type: ignore[assignment]
    sys.argv[0] = "flower-supernode"
    flower_supernode()  # it exits the process itself, with Flower's exit codes


if __name__ == "__main__":
    main()
