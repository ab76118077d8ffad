"""fedsel_env: the FedSelect Gymnasium environment and its federation simulator.

Importing the package registers ``fedsel/FedSelect-v0`` and the presets' ids
(``fedsel_env.config.ENV_IDS``) with Gymnasium, and ``fedsel/MOFedSelect-v0``: the default preset with
the vector reward (``reward: vector``, MO-Gymnasium's convention; ``preset=`` picks another preset).
"""
from gymnasium.envs.registration import register
from gymnasium.envs.registration import registry as gym_registry  # fedsel_env.registry is our module

from . import objectives  # noqa: F401  (registers the "vector" reward)
from . import threads  # noqa: F401  (forked children run torch on one thread: fork-safe vector envs)
from .config import DEFAULT_CONFIG, ENV_IDS, PRESETS, load_config, make_config
from .spec import CLIENT_FEATURES, SelectionSpec

#: every id's vector env: E federations in one batched simulator (issue #27; ``gym.make_vec(id, num_envs=E)``)
_VECTOR = "fedsel_env.vector:FedSelectVectorEnv"

for _preset, _env_id in ENV_IDS.items():
    if _env_id not in gym_registry:
        register(id=_env_id, entry_point="fedsel_env.env:FedSelectEnv", kwargs={"preset": _preset},
                 vector_entry_point=_VECTOR)
# FedSelect-Bench (issue #28): importing the bench registers its scenarios, each with its id fedsel/Bench-<Name>-v0
# and the objective as the reward (issue #41: an episode's return is its score, negated when lower is better)
from . import bench  # noqa: E402,F401
from . import families  # noqa: E402,F401  (the built-in scenario families register themselves, issue #42)
#: the multi-objective env: a vector reward, so Gymnasium's checker (which wants a scalar) is off, as
#: ``mo_gymnasium.make`` turns it off
MO_ENV_ID = "fedsel/MOFedSelect-v0"
if MO_ENV_ID not in gym_registry:
    register(id=MO_ENV_ID, entry_point="fedsel_env.env:FedSelectEnv", kwargs={"preset": "default", "reward": "vector"},
             disable_env_checker=True, vector_entry_point=_VECTOR)


def make_env(preset: str = "default", **config):
    """``FedSelectEnv(config=config, preset=preset)`` without going through ``gymnasium.make``."""
    from .env import FedSelectEnv

    return FedSelectEnv(config=config, preset=preset)


__all__ = ["DEFAULT_CONFIG", "ENV_IDS", "MO_ENV_ID", "PRESETS", "load_config", "make_config", "make_env",
           "CLIENT_FEATURES", "SelectionSpec"]
