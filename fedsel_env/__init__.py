"""fedsel_env: the FedSelect Gymnasium environment and its federation simulator.

Importing the package registers ``fedsel/FedSelect-v0`` and the presets' ids
(``fedsel_env.config.ENV_IDS``) with Gymnasium.
"""
from gymnasium.envs.registration import register, registry

from . import threads  # noqa: F401  (forked children run torch on one thread: fork-safe vector envs)
from .config import DEFAULT_CONFIG, ENV_IDS, PRESETS, load_config, make_config
from .spec import CLIENT_FEATURES, SelectionSpec

for _preset, _env_id in ENV_IDS.items():
    if _env_id not in registry:
        register(id=_env_id, entry_point="fedsel_env.env:FedSelectEnv", kwargs={"preset": _preset})


def make_env(preset: str = "default", **config):
    """``FedSelectEnv(config=config, preset=preset)`` without going through ``gymnasium.make``."""
    from .env import FedSelectEnv

    return FedSelectEnv(config=config, preset=preset)


__all__ = ["DEFAULT_CONFIG", "ENV_IDS", "PRESETS", "load_config", "make_config", "make_env",
           "CLIENT_FEATURES", "SelectionSpec"]
