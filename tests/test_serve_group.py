"""A replica's group commit (:class:`fedbandits.serve.http.Group`): which requests one transaction
takes.  A fake silo records the groups; the event loop is real."""

from __future__ import annotations

import asyncio

import pytest

from fedbandits.serve.http import Group


class Recorder:
    """A silo that commits whatever it is given, recording each group's size."""

    def __init__(self) -> None:
        self.groups: list[int] = []

    def write_many(self, steps: list) -> list:  # type: ignore[type-arg]
        self.groups.append(len(steps))
        return [step() for step in steps]


async def _traffic(group: Group) -> tuple[float, float]:
    """Three requests in one turn; then three 10 ms apart; then one alone (the seconds the last two
    parts took)."""
    assert await asyncio.gather(*(group.run(lambda: "ok") for _ in range(3))) == ["ok"] * 3

    async def after(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return await group.run(lambda: "ok")

    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await asyncio.gather(after(0), after(0.01), after(0.02)) == ["ok"] * 3
    middle = loop.time()
    await group.run(lambda: "ok")
    return middle - start, loop.time() - middle


@pytest.mark.parametrize("delay", [0.0, 0.25])
def test_a_group_smaller_than_the_last_waits_for_it_at_most_the_delay(delay):
    """As PostgreSQL's commit_delay: a group smaller than the one before waits -- here up to 0.25 s --
    and commits as soon as it is as large (the third request, 20 ms in), or alone at the end of the
    delay; without a delay every request that arrives later is a group of its own.  The thresholds
    leave 0.2 s for a slow machine: the requests 10 ms apart are far inside the delay."""
    silo = Recorder()
    group = Group(silo)  # type: ignore[arg-type]
    group.DELAY = delay
    three, alone = asyncio.run(_traffic(group))
    assert three < 0.2  # the third request ends the wait (or there is none)
    if delay:
        assert silo.groups == [3, 3, 1]
        assert delay <= alone < delay + 0.2  # the lone request waited for others, then went alone
    else:
        assert silo.groups == [3, 1, 1, 1, 1]
        assert alone < 0.2
