"""Bandit algorithms (policies) batched over runs and agents."""

from fedbandits.algorithms.base import LinUCBParams, Policy
from fedbandits.algorithms.fedlinucb import FedLinUCB, FedLinUCBParams
from fedbandits.algorithms.linucb import IndependentLinUCB, SuperAgentLinUCB

__all__ = ["FedLinUCB", "FedLinUCBParams", "IndependentLinUCB", "LinUCBParams", "Policy", "SuperAgentLinUCB"]
