"""Batched ridge/LinUCB building blocks shared by every algorithm."""

from fedbandits.core.clipping import clip_norm, clip_rewards
from fedbandits.core.ridge import RidgeState, spd_inverse
from fedbandits.core.ucb import ConfidenceRadius, UCBScorer

__all__ = ["ConfidenceRadius", "RidgeState", "UCBScorer", "clip_norm", "clip_rewards", "spd_inverse"]
