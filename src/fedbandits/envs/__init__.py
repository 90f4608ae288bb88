"""Bandit environments: synthetic instances of the papers, MovieLens and learning-to-rank data."""

from fedbandits.envs.base import Environment, Round
from fedbandits.envs.synthetic import GapInstance, GapInstanceParams, GaussianSphere, GaussianSphereParams

__all__ = ["Environment", "GapInstance", "GapInstanceParams", "GaussianSphere", "GaussianSphereParams", "Round"]
