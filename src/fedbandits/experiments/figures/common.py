"""What every registered figure reproduction is made of: :class:`Experiment`, :class:`Claim`, the scales.

Shared by :mod:`~fedbandits.experiments.figures.zhou`, :mod:`~fedbandits.experiments.figures.dubey`
and :mod:`~fedbandits.experiments.figures.liu`: the scale names and their validation
(:func:`check_scale`), the seed and the confidence level ``alpha`` they use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: "paper": the published setting wherever one machine holds it (else the largest honest scale, stated
#: in the experiment's ``shrunk``); "published": the published setting everywhere (Dubey & Pentland's
#: T = 10^7 needs a cluster: ``--backend ray``); "quick": shrunk, every figure together about 3 min with two
#: workers on 2 cores (without cause runs, its default); "tiny": smoke tests
SCALES = ("quick", "paper", "tiny", "published")
#: the confidence level ``alpha`` of the theory radius (section 6 of Zhou & Chowdhury) and the seed
ALPHA, SEED = 0.01, 2023


@dataclass(frozen=True)
class Claim:
    """One claim of the paper, checked by :mod:`fedbandits.experiments.claims`.

    ``kind`` is ``"lower_than"`` (``args = (a, b)``: algorithm ``a`` ends with lower regret than
    ``b``, or than ``factor`` times ``b``), ``"decreasing"`` (``args = (label_1, label_2, ...)``
    ordered by increasing epsilon: regret decreases along them) or ``"sublinear"`` (``args = (a,)``,
    ``metric = "regret rate"``: a's per-round regret over (T/2, T] is below that over (T/4, T/2]).
    """

    text: str
    kind: str
    args: tuple[str, ...]
    #: what is compared: "regret" (final group regret), "messages" (messages sent) or "regret rate"
    #: (per-round regret over two stretches of the run, for ``sublinear``)
    metric: str = "regret"
    #: ``lower_than`` only: ``a`` ends below ``factor`` times ``b`` ("within a factor of b")
    factor: float = 1.0


@dataclass(frozen=True)
class Cause:
    """A one-change variant of an experiment: the same config with exactly one field changed.

    ``change`` maps one dotted path to its new value: ``"environment.<field>"`` or
    ``"algorithms.<field>"`` (the field of every algorithm whose entry sets it).  The field must be
    stated in the base config; :func:`fedbandits.experiments.causes.cause_config` builds the run and
    refuses anything else.  ``text`` completes "the claimed ordering appears only when ...", e.g.
    "the noise is calibrated tightly (our accountant) instead of by the paper's closed form".
    """

    name: str
    change: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    paper: str
    figure: str
    scale: str
    config: dict[str, Any]
    claims: tuple[Claim, ...]
    shrunk: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: extra setting text for the report, e.g. "B = 25, alpha = 0.01; "
    setting: str = ""
    #: several environments in one figure: ((panel label, config), ...); ``config`` is then the
    #: first panel's (see :mod:`fedbandits.experiments.panels`)
    panels: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: "curves" (regret against t) or "final-vs-x" (final regret against ``x_values[label]``)
    figure_kind: str = "curves"
    x_values: dict[str, float] = field(default_factory=dict)
    x_label: str = ""
    #: one-change variants run when a claim is not settled (:mod:`fedbandits.experiments.causes`)
    causes: tuple[Cause, ...] = ()

    def configs(self) -> list[tuple[str, dict[str, Any]]]:
        """(panel label, config) of every environment this experiment runs ("" for a single one)."""
        return list(self.panels) if self.panels else [("", self.config)]


def sized(table: dict[str, Any], scale: str) -> Any:
    """``table[scale]``; for ``"published"``, the ``"paper"`` entry unless the table has its own
    (a figure whose paper scale is the published setting)."""
    return table["paper" if scale == "published" and "published" not in table else scale]


def check_scale(scale: str, runs: int | None) -> None:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(map(repr, SCALES))}, got {scale!r}")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
