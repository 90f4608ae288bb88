"""Online agents: one silo's live decisions (choose now, reward later), built from a config.

    agent = Agent.from_config("my.toml", silo=0)
    d = agent.choose(features)          # (K, d) -> Decision(arm, decision_id, scores)
    agent.reward(d.decision_id, 0.7)    # later, once
    payload = agent.sync_payload()      # a federation's sync round (fedlinucb entries)
    agent.apply_sync(prefix)            # the prefix the server (Rounds, Aggregator) returns

See docs/online.md.  The package sits above config (it is built from a validated config and the
registry) and below sim (the simulator never needs it).
"""

from fedbandits.online import setup as _setup
from fedbandits.online.agent import Agent, Decision
from fedbandits.online.aggregator import Aggregator
from fedbandits.online.inputs import AgentError
from fedbandits.online.rounds import Rounds
from fedbandits.online.setup import AGENT_ALGORITHMS, AgentSetup
from fedbandits.online.state import FORMAT, StateFileError

__all__ = [
    "AGENT_ALGORITHMS",
    "AGENT_PROTOCOLS",
    "FORMAT",
    "Agent",
    "AgentError",
    "AgentSetup",
    "Aggregator",
    "Decision",
    "Rounds",
    "StateFileError",
]


def __getattr__(name: str) -> object:
    """``AGENT_PROTOCOLS``, read from the protocol catalog on use (:func:`~fedbandits.online.setup.agent_protocols`)."""
    if name == "AGENT_PROTOCOLS":
        return _setup.agent_protocols()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
