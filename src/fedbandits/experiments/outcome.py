"""What a reproduction returns per experiment: :class:`Outcome` (the base run), :class:`CauseOutcome`
(a one-change cause run) and :class:`PoweredOutcome` (an inconclusive claim rerun with the runs its
power statement asks for)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass, field
from pathlib import Path

from fedbandits.experiments.claims import ClaimResult
from fedbandits.experiments.figures import Cause, Experiment
from fedbandits.experiments.panels import table_key
from fedbandits.sim.results import Results


@dataclass(frozen=True)
class Cost:
    """What runs cost: wall time, compute time summed over tasks (one core), and the part of the compute
    (and the tasks) loaded from checkpoints of an earlier run (``--resume``) rather than run now."""

    wall: float = 0.0
    compute: float = 0.0
    resumed_compute: float = 0.0
    tasks: int = 0
    resumed_tasks: int = 0

    @classmethod
    def of(cls, results: Iterable[Results]) -> Cost:
        """What ``results`` cost together."""
        return cls.total(
            cls(r.wall_seconds, r.compute_seconds, r.resumed_seconds, r.tasks, r.resumed_tasks) for r in results
        )

    @classmethod
    def total(cls, costs: Iterable[Cost]) -> Cost:
        """The sum of ``costs`` (zero for none)."""
        return sum(costs, cls())

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


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
    cost: Cost

    @property
    def wall_seconds(self) -> float:
        return self.cost.wall

    def checked(self) -> list[int]:
        """The indices of the claims this cause run checks."""
        return [i for i, r in enumerate(self.claims) if r is not None]


@dataclass
class PoweredOutcome:
    """Claim ``claim`` (its index) checked again on ``runs`` fresh runs of its curves alone (the rerun in
    ``folder`` replays the base runs first: see :mod:`fedbandits.experiments.powered`)."""

    claim: int
    runs: int
    result: ClaimResult
    folder: Path
    cost: Cost


@dataclass
class Outcome:
    experiment: Experiment
    results: Results  # the (first) panel's results
    claims: list[ClaimResult]
    folder: Path
    #: every panel's results, in order ({"": results} for a single-environment experiment)
    panels: dict[str, Results] = field(default_factory=dict)
    causes: list[CauseOutcome] = field(default_factory=list)
    powered: list[PoweredOutcome] = field(default_factory=list)

    @property
    def panel_results(self) -> dict[str, Results]:
        """Every panel's results, ``{"": results}`` for a single-environment experiment."""
        return self.panels or {"": self.results}

    @property
    def base_cost(self) -> Cost:
        """What the base run cost (cause and powered runs not included: see ``cost``)."""
        return Cost.of(self.panel_results.values())

    @property
    def causes_cost(self) -> Cost:
        return Cost.total(c.cost for c in self.causes)

    @property
    def powered_cost(self) -> Cost:
        return Cost.total(p.cost for p in self.powered)

    @property
    def cost(self) -> Cost:
        """What the base, cause and powered runs cost together."""
        return self.base_cost + self.causes_cost + self.powered_cost

    @property
    def wall_seconds(self) -> float:
        """The base run's wall time."""
        return self.base_cost.wall

    @property
    def total_seconds(self) -> float:
        """Wall time of the base, cause and powered runs."""
        return self.cost.wall

    def claim_compute_seconds(self, index: int) -> float:
        """What the curves of claim ``index`` cost in the base run: per panel holding some of them, its
        environment plus those algorithms, summed over tasks (one core; the same when resumed)."""
        keys = self.experiment.claims[index].args
        total = 0.0
        for panel, results in self.panel_results.items():
            mine = [r for lab, r in results.algorithms.items() if table_key(panel, lab) in keys]
            if mine:
                total += results.env_seconds + sum(r.seconds for r in mine)
        return total

    def powered_result(self, index: int) -> PoweredOutcome | None:
        """The powered rerun of claim ``index``, if one ran."""
        return next((p for p in self.powered if p.claim == index), None)

    def verdict(self, index: int) -> ClaimResult:
        """Claim ``index``'s result with the most runs: its powered rerun's if one ran, else the base run's."""
        rerun = self.powered_result(index)
        return self.claims[index] if rerun is None else rerun.result
