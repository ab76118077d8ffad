"""rl-zoo3 with FedSelect's algorithms and search space: ``python -m agents.training.zoo`` is ``python -m rl_zoo3.train``
(same flags, same run folders) that also knows FAVOR.

    python -m agents.training.zoo --algo favor --env fedsel/FedSelect-Tiny-v0 -n 2000 -tb runs/zoo_tb
    python -m agents.training.zoo --algo favor+ --env fedsel/FedSelect-v0 -optimize --n-trials 20 -n 5000
    python -m rl_zoo3.train --algo dqn --env fedsel/FedSelect-v0 --gym-packages fedsel_env -conf configs/dqn.yml

Before it hands over to :func:`rl_zoo3.train.train`, it

- registers the env ids (``import fedsel_env``; ``--gym-packages fedsel_env`` is then optional);
- adds ``favor`` and ``favor+`` (:class:`agents.favor.DoubleDQN`) to ``rl_zoo3.utils.ALGOS``. This cannot
  come through ``--gym-packages``: rl-zoo3 checks ``--algo`` against ``ALGOS`` while it parses the command
  line, before it imports those packages;
- registers FedSelect's search space (:func:`sample_fedsel_dqn_params`) in rl-zoo3's
  ``HYPERPARAMS_SAMPLER`` (and its ``HYPERPARAMS_CONVERTER``, which ``--storage/--study-name/--trial-id``
  use) for ``favor``, ``favor+`` and ``dqn``;
- uses ``configs/<algo>.yml`` when no ``-conf`` is given (rl-zoo3's default, its own
  ``hyperparams/<algo>.yml``, has no FedSelect entry);
- evaluates in the env the entry's ``env_kwargs`` make (:class:`FedSelectExperimentManager`): rl-zoo3 2.9.2
  builds its evaluation envs (``--eval-freq``, and every ``-optimize`` trial's) from the command line's
  ``--env-kwargs`` only, so with the config's ``env_kwargs`` alone a DQN trained on the flat ``one`` mode
  was evaluated in the preset's ``topk`` Dict env and crashed.

Importing this module changes rl-zoo3's tables in this process only (rl-zoo3 itself patches Gymnasium's
``TimeLimit`` on import; ``train_agent.py`` does not import rl-zoo3: docs/TRAINING.md, "rl-zoo3").
"""
from __future__ import annotations

import reprlib
import sys
from typing import Any, Dict, List, Optional, Sequence

import fedsel_env  # noqa: F401  (registers the env ids)
from agents.deploy import ALGORITHMS, model_class

from .hyperparams import CONFIG_DIR
#: ``net_arch`` choices of the search space (the Q-network's hidden layers); FAVOR's is "512".
NET_ARCHS = {"256": [256], "512": [512], "256x256": [256, 256]}


def sample_fedsel_dqn_params(trial: Any, n_actions: int = 0, n_envs: int = 1,
                             additional_args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """FedSelect's search space for DQN-family algorithms (rl-zoo3's ``HYPERPARAMS_SAMPLER`` signature).

    Scaled to this env, where a step is an FL round and an episode tens of rounds (rl-zoo3's DQN space
    is Atari's: ``target_update_interval`` up to 20,000, ``batch_size`` up to 2,048, γ ≥ 0.97). The
    discount ranges down to 0.5 because the measured best for FAVOR+ was 0.9 (docs/TRAINING.md). The
    entry's other keys (``buffer_size``, ``learning_starts``, ``mask_actions``, ``env_kwargs``) stay as
    the config file has them.
    """
    return convert_fedsel_dqn_params({
        "gamma": trial.suggest_categorical("gamma", [0.5, 0.75, 0.9, 0.95, 0.99]),
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128]),
        "train_freq": trial.suggest_categorical("train_freq", [1, 2, 4]),
        "gradient_steps": trial.suggest_categorical("gradient_steps", [1, 2]),
        "target_update_interval": trial.suggest_int("target_update_interval", 50, 2000, log=True),
        "exploration_fraction": trial.suggest_float("exploration_fraction", 0.1, 0.5),
        "exploration_final_eps": trial.suggest_float("exploration_final_eps", 0.01, 0.1),
        "net_arch": trial.suggest_categorical("net_arch", sorted(NET_ARCHS)),
    })


def convert_fedsel_dqn_params(params: Dict[str, Any]) -> Dict[str, Any]:
    """A trial's sampled values → the algorithm's keyword arguments (``net_arch`` → ``policy_kwargs``)."""
    kwargs = {k: v for k, v in params.items() if k != "net_arch"}
    kwargs["policy_kwargs"] = {"net_arch": list(NET_ARCHS[params["net_arch"]])}
    return kwargs


#: the entry keys whose string values rl-zoo3 2.9.2 passes to ``eval`` (``exp_manager.py``, ``utils.py``)
EVAL_KEYS = ("policy_kwargs", "replay_buffer_class", "replay_buffer_kwargs", "monitor_kwargs", "normalize")


def literal_hyperparams(hp: Dict[str, Any]) -> Dict[str, Any]:
    """A config entry with no string left for rl-zoo3 to ``eval``: ``policy_kwargs`` parsed as literals
    (``dict(net_arch=[64], activation_fn=nn.ReLU)``, as ``train_agent.py`` does), the other keys of
    :data:`EVAL_KEYS` refused as strings (write them as YAML mappings).

    :raises ValueError: naming the key, for a string that is not ``dict(key=literal, ...)``.
    """
    from .hyperparams import parse_policy_kwargs

    out = dict(hp)
    for key in EVAL_KEYS:
        value = out.get(key)
        if not isinstance(value, str):
            continue
        if key == "policy_kwargs":
            out[key] = parse_policy_kwargs(value)
        else:
            raise ValueError(f"hyper-parameter {key} = {reprlib.repr(value)} is a string, which rl-zoo3 would run "
                             f"as Python code; write it as a YAML mapping (e.g. {key}: {{norm_obs: true}})")
    return out


def experiment_manager_class() -> type:
    """rl-zoo3's ``ExperimentManager`` whose evaluation envs take the config entry's ``env_kwargs`` (unless
    ``--eval-env-kwargs`` is given), as its training envs do."""
    from rl_zoo3.exp_manager import ExperimentManager

    class FedSelectExperimentManager(ExperimentManager):
        def _preprocess_hyperparams(self, hyperparams: Dict[str, Any]) -> Any:
            hyperparams = literal_hyperparams(hyperparams)  # rl-zoo3 would eval() these strings
            out = super()._preprocess_hyperparams(hyperparams)  # sets self.env_kwargs from the entry
            if self._eval_env_kwargs_args is None:
                self.eval_env_kwargs = self.env_kwargs
            return out

    return FedSelectExperimentManager


def register() -> None:
    """Add FAVOR's algorithms and FedSelect's search space to rl-zoo3's tables (idempotent)."""
    from rl_zoo3 import hyperparams_opt
    from rl_zoo3.utils import ALGOS

    ALGOS.update(zoo_algorithms())
    for algo in (a.name for a in ALGORITHMS.values() if a.zoo_search):
        hyperparams_opt.HYPERPARAMS_SAMPLER[algo] = sample_fedsel_dqn_params
        hyperparams_opt.HYPERPARAMS_CONVERTER[algo] = convert_fedsel_dqn_params


def zoo_algorithms() -> Dict[str, type]:
    """The algorithms this module adds to rl-zoo3's ``ALGOS`` (the same names as ``train_agent.py --algo``): the
    table's entries with FedSelect's search space whose class is this package's (rl-zoo3 knows SB3's own)."""
    classes = {a.name: model_class(a.name) for a in ALGORITHMS.values() if a.zoo_search}
    return {name: cls for name, cls in classes.items() if cls.__module__.split(".")[0] == "agents"}


def with_default_conf(argv: Sequence[str]) -> List[str]:
    """``argv`` with ``-conf configs/<algo>.yml`` added when it names no ``-conf`` / ``--conf-file``."""
    argv = list(argv)
    if any(a in ("-conf", "--conf-file") or a.startswith("--conf-file=") for a in argv):
        return argv
    algo = "ppo"  # rl-zoo3's default --algo
    for i, a in enumerate(argv):
        if a == "--algo" and i + 1 < len(argv):
            algo = argv[i + 1]
        elif a.startswith("--algo="):
            algo = a.split("=", 1)[1]
    path = CONFIG_DIR / f"{algo}.yml"
    return [*argv, "-conf", str(path)] if path.is_file() else argv


def check_trained_agent(argv: Sequence[str]) -> List[str]:
    """``argv`` without ``--trust-file``; unless it was given, the ``-i`` / ``--trained-agent`` zip and the
    ``replay_buffer.pkl`` rl-zoo3 loads beside it are first read by ``agents.saved_models``' restricted
    unpickler, so that rl-zoo3's own loading (SB3's) meets nothing but the plain data it admits.

    :raises ValueError: naming the file and the entry when a file names code (``--trust-file`` opts out).
    """
    argv = list(argv)
    trust = "--trust-file" in argv
    argv = [a for a in argv if a != "--trust-file"]
    path = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-i", "--trained-agent")),
                next((a.split("=", 1)[1] for a in argv if a.startswith("--trained-agent=")), None))
    if path and not trust:
        import os

        from agents.saved_models import MODEL_GLOBALS, TRUST_FIX, _admit_class, safe_data_objects
        from fedsel_env.sim.safe_pickle import RefusedGlobal, restricted_load

        if os.path.isfile(path):
            safe_data_objects(path, "trained agent")
        buffer = os.path.join(os.path.dirname(path), "replay_buffer.pkl")
        if os.path.isfile(buffer):
            try:
                with open(buffer, "rb") as f:
                    restricted_load(f, MODEL_GLOBALS, _admit_class)
            except RefusedGlobal as e:
                raise ValueError(f"replay buffer {buffer!r} is refused: {e}; {TRUST_FIX}") from None
    return argv


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run rl-zoo3's ``train`` (training or ``-optimize``) on ``argv`` (default ``sys.argv[1:]``)."""
    register()
    import rl_zoo3.train

    rl_zoo3.train.ExperimentManager = experiment_manager_class()  # train() builds the one its module names
    argv = check_trained_agent(sys.argv[1:] if argv is None else argv)  # -i: read as data first
    sys.argv = [sys.argv[0], *with_default_conf(argv)]
    rl_zoo3.train.train()


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"agents.training.zoo: error: {e}")
