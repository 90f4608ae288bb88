"""fedbandits: differentially private federated linear contextual bandits."""

from fedbandits._version import __version__
from fedbandits.api import quickstart_config, run
from fedbandits.config import Config, ConfigError, config_from_dict, load_config, loads_config
from fedbandits.sim.results import Results

__all__ = [
    "Config",
    "ConfigError",
    "Results",
    "__version__",
    "config_from_dict",
    "load_config",
    "loads_config",
    "quickstart_config",
    "run",
]
