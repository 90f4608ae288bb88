"""Attacks and empirical privacy audits: what an adversary can actually learn."""

from fedbandits.audit.schedule import AttackResult, AttackSetup, run_attack

__all__ = ["AttackResult", "AttackSetup", "run_attack"]
