"""Named reproductions of published figures (:mod:`.figures`), claim checks and a runner.

from fedbandits.experiments import reproduce
reproduce("zhou-fig2a", scale="quick", out="results/reproduce")
"""

from fedbandits.experiments.figures import EXPERIMENTS, SCALES, Claim, Experiment, get_experiment
from fedbandits.experiments.reproduce import reproduce

__all__ = ["EXPERIMENTS", "SCALES", "Claim", "Experiment", "get_experiment", "reproduce"]
