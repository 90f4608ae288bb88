"""What a reproduction returns per experiment: :class:`Outcome` (the base run) and :class:`CauseOutcome`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedbandits.experiments.claims import ClaimResult
from fedbandits.experiments.figures import Cause, Experiment
from fedbandits.sim.results import Results


@dataclass
class CauseOutcome:
    """A one-change cause run: its claims' results, in the experiment's claim order.

    ``claims[i]`` is None for a claim the cause run does not check: a claim settled in the base
    run (with ``causes = "unsettled"``), or one whose algorithms the run does not play -- a cause
    run plays only the curves of the claims it is for (:mod:`fedbandits.experiments.causes`).
    """

    cause: Cause
    claims: list[ClaimResult | None]
    folder: Path
    wall_seconds: float

    def checked(self) -> list[int]:
        """The indices of the claims this cause run checks."""
        return [i for i, r in enumerate(self.claims) if r is not None]


@dataclass
class Outcome:
    experiment: Experiment
    results: Results  # the (first) panel's results
    claims: list[ClaimResult]
    folder: Path
    #: every panel's results, in order ({"": results} for a single-environment experiment)
    panels: dict[str, Results] = field(default_factory=dict)
    causes: list[CauseOutcome] = field(default_factory=list)

    @property
    def wall_seconds(self) -> float:
        """The base run's wall time (cause runs not included: see ``total_seconds``)."""
        return sum(r.wall_seconds for r in self.panels.values()) if self.panels else self.results.wall_seconds

    @property
    def total_seconds(self) -> float:
        return self.wall_seconds + sum(c.wall_seconds for c in self.causes)
