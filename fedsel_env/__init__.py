"""fedsel_env: the FedSelect Gymnasium environment and its federation simulator."""
from .config import DEFAULT_CONFIG, ENV_IDS, PRESETS, load_config, make_config
from .spec import CLIENT_FEATURES, SelectionSpec

__all__ = ["DEFAULT_CONFIG", "ENV_IDS", "PRESETS", "load_config", "make_config", "CLIENT_FEATURES", "SelectionSpec"]
