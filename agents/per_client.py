"""The per-client selector (``per_client``): a trained permutation-equivariant scorer, deployed as top-K.

Issue #19. The network (``agents/per_client_net.py``) gives every client a score from its own token and
a pooled summary of the federation; the agent selects the K available clients with the highest scores.
Because no weight depends on N or on the clients' order, a model trained on one federation (or on
many: ``federation_seed: null`` draws a new one each episode) runs on any other with the same PCA
width d, at any N — FAVOR's flat Q-network cannot (docs/SPEC.md §4).

Every training form loads here: PPO/A2C with :class:`~agents.per_client_net.PerClientActorCriticPolicy`
(``topk`` scores; the Gaussian's mean is used), (Double) DQN with
:class:`~agents.per_client_net.PerClientDQNPolicy` (per-client Q-values), and PPO/A2C with the K-of-N
:class:`~agents.plackett_luce.PlackettLucePolicy` (its logits).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces
from stable_baselines3 import A2C, PPO

from fedsel_env.spec import SelectionSpec

from . import per_client_net, plackett_luce
from .base import SelectionAgent
from .cover_tokens import cover_columns
from .deploy import (ALGORITHMS, Algorithm, Deployment, deployment_config, detect_algorithm, model_class,
                     register_algorithm, register_deployment)
from .favor import DoubleDQN
from .registry import AGENTS
from .saved_models import check_zip, load_model
from .set_distill import CoverTracker, with_cover_columns


def _zip_of(path: Union[str, Path]) -> Path:
    p = Path(path)
    return p if p.suffix == ".zip" else p.with_name(p.name + ".zip")


def saved_pca_components(path: Union[str, Path]) -> Optional[int]:
    """The PCA width d a saved per-client model reads (from the input width of its token encoder φ).

    ``None`` when it cannot be told: no such file, not a per-client model, a damaged file (loading it
    later says which), or a custom encoder without φ.
    """
    from stable_baselines3.common.save_util import load_from_zip_file

    from .per_client_net import token_size

    zip_path = _zip_of(path)
    if not zip_path.is_file():
        return None
    try:
        check_zip(zip_path)  # its size before torch reads it
        _, params, _ = load_from_zip_file(zip_path, load_data=False, device="cpu")
    except Exception:  # noqa: BLE001 - torch, zipfile, pickle: load_per_client reports it with the fix
        return None
    for key, tensor in (params or {}).get("policy", {}).items():
        if key.endswith("features_extractor.phi.0.weight") and getattr(tensor, "ndim", 0) == 2:
            return int(tensor.shape[1]) - token_size(0) - saved_cover_columns(zip_path)
    return None


def saved_cover_columns(path: Union[str, Path]) -> int:
    """How many of ``kcenter_cover``'s columns (``agents/cover_tokens.py``) a saved per-client model's tokens carry
    after the client features: ``len(COVER_FEATURES)`` for a policy class saying ``cover_features`` (``pl_ppo_cover``),
    else 0 (also when the file cannot be read: loading it later says why)."""
    from .saved_models import read_zip_data
    from .set_distill import COVER_FEATURES

    try:
        policy = read_zip_data(_zip_of(path), "model").get("policy_class")
    except (ValueError, OSError):
        return 0
    return len(COVER_FEATURES) if isinstance(policy, dict) and policy.get("cover_features") is True else 0


def check_pca_components(path: Union[str, Path], d: int, num_clients: Optional[int] = None) -> None:
    """Refuse a per-client model saved at ``path`` for observations whose PCA width is ``d``.

    The network's weights do not depend on N but do on d (each client's token holds its d PCA
    coordinates), so a model runs only where ``pca_components`` is the d it was trained with.

    :param path: the model (``.zip``; a file whose d cannot be told passes, its loading reports it).
    :param d: the PCA width of the problem's observations (``SelectionSpec.pca_components``).
    :param num_clients: N, to say when the model's d cannot be had (d <= N + 1).
    :raises ValueError: naming the model's d and the config field that fixes it.
    """
    saved = saved_pca_components(path)
    if saved is None or saved == int(d):
        return
    fix = (f"set the config field pca_components: {saved} (evaluate.py: --env-kwargs pca_components={saved}; "
           f"FedSelectStrategy(config={{..., 'pca_components': {saved}}}))")
    if num_clients is not None and saved > int(num_clients) + 1:
        fix += f"; d <= N + 1, so it needs N >= {saved - 1} clients (this problem has {int(num_clients)})"
    raise ValueError(f"per_client agent: model {str(_zip_of(path))!r} reads d = {saved} PCA components per "
                     f"client, but this problem's observations have d = {int(d)}: {fix}")


def load_per_client(path: Union[str, Path], spec: SelectionSpec, obs_space: spaces.Dict, device: str = "cpu") -> Any:
    """Load a per-client model saved at ``path`` for the problem ``spec`` (any N, the same d).

    The saved spaces are replaced by this problem's (no weight depends on N); the replay buffer of a
    DQN-family model is not rebuilt (``buffer_size`` 1).
    """
    zip_path = _zip_of(path)
    if not zip_path.is_file():
        raise ValueError(f"per_client agent: model_path {str(path)!r} does not exist")
    form = detect_algorithm(zip_path)  # ValueError: not an SB3 zip
    forms = [a.name for a in ALGORITHMS.values() if a.deploy == "per_client"]
    if form not in forms:
        raise ValueError(f"per_client agent: {str(zip_path)!r} was not trained with a per-client policy "
                         f"(train_agent.py --algo {' or '.join(forms)}); FAVOR's flat models load with the 'favor' "
                         f"agent")
    check_pca_components(zip_path, int(obs_space["weights"].shape[1]), spec.num_clients)
    if saved_cover_columns(zip_path) and cover_columns(obs_space, spec) == 0:
        obs_space = with_cover_columns(obs_space)  # the tokens it was trained on carry kcenter_cover's state
    cls, q_values = model_class(form), ALGORITHMS[form].off_policy  # DQN-family: per-client Q-values
    n = spec.num_clients
    action_space = spaces.Discrete(n) if q_values else spaces.Box(-1.0, 1.0, shape=(n,), dtype=np.float32)
    custom: Dict[str, Any] = {"observation_space": obs_space, "action_space": action_space}
    if q_values:
        custom["buffer_size"] = 1
    return load_model(cls, zip_path, what="per_client agent: model", device=device, custom_objects=custom)


@AGENTS.register("per_client")
class PerClientAgent(SelectionAgent):
    """The K available clients with the highest per-client scores (issue #19).

    :param spec: the problem's public description.
    :param seed: unused (deterministic); kept for the common signature.
    :param model_path: a model trained with a per-client policy (``train_agent.py --algo pc_ppo`` or
        ``pc_dqn``), or a list of them: an ensemble, whose score is the sum of its members' scores, each
        standardised over the available clients (so no member's scale dominates).
    :param model: an already-loaded per-client SB3 model (instead of ``model_path``).
    :param device: torch device for the network.
    :param sample: a Plackett-Luce model (``pl_ppo``, ``pl_a2c``) draws its set from the policy it was trained as
        (Gumbel-top-K of its logits among the available clients, from this agent's seeded generator) instead of
        taking the K largest logits: the stochastic policy PPO optimised, not its mode (docs/TRAINING.md says
        why the two can differ). Refused for other models (their scores are no log-weights).
    """

    name = "per_client"

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None,
                 model_path: Union[str, Path, Sequence[Union[str, Path]], None] = None,
                 model: Any = None, device: str = "cpu", sample: bool = False) -> None:
        super().__init__(spec, seed=seed)
        if not isinstance(sample, (bool, np.bool_)):
            raise ValueError(f"per_client agent: sample = {sample!r}: expected true or false")
        self.sample = bool(sample)
        if (model_path is None) == (model is None):
            raise ValueError("per_client agent: give exactly one of model_path= (a saved model .zip, or a list "
                             "of them for an ensemble) or model=")
        if isinstance(model_path, (list, tuple)):
            if not model_path:
                raise ValueError("per_client agent: model_path is an empty list; give one or more model files")
            self.members = [PerClientAgent(spec, model_path=p, device=device) for p in model_path]
        else:
            self.members = []
            if model_path is not None:  # the wrong d fails here, not at the first selection
                check_pca_components(model_path, spec.pca_components, spec.num_clients)
            elif isinstance(getattr(model, "observation_space", None), spaces.Dict) and "weights" in \
                    model.observation_space.spaces:
                d = int(model.observation_space["weights"].shape[1])
                if d != spec.pca_components:
                    raise ValueError(f"per_client agent: the live model reads d = {d} PCA components per client, "
                                     f"but this problem has d = {spec.pca_components}: set the config field "
                                     f"pca_components: {d}")
        self.model_path = model_path
        self.device = device
        self.model = model
        self._n = None if model is None else self._model_n(model)
        # a model trained on cover-aware tokens (pl_ppo_cover) reads kcenter_cover's state: this agent follows it
        if model is not None:
            space = getattr(model, "observation_space", None)
            cover = isinstance(space, spaces.Dict) and "clients" in space.spaces and cover_columns(space, spec) > 0
        else:
            cover = not self.members and saved_cover_columns(model_path) > 0
        if self.members and any(m.tracker is not None for m in self.members):
            raise ValueError("per_client agent: an ensemble of models trained on cover-aware tokens (pl_ppo_cover) "
                             "is not supported: deploy each model on its own")
        self.tracker: Optional[CoverTracker] = CoverTracker(spec.clients_per_round, spec) if cover else None

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        if self.tracker is not None:
            self.tracker.points = None  # the next select starts it on this episode's first observation

    @staticmethod
    def _model_n(model: Any) -> int:
        space = model.action_space
        return int(space.n) if isinstance(space, spaces.Discrete) else int(space.shape[0])

    def _ensure_model(self, obs: Dict[str, np.ndarray]) -> None:
        """Load (or re-load for another N) the model for the observation's problem."""
        n = int(np.asarray(obs["clients"]).shape[0])
        if self.model is not None and self._n == n:
            return
        if self.model_path is None:
            raise ValueError(f"per_client agent: the live model was built for N = {self._n} clients, the "
                             f"observation has {n}; load it from its file (model_path=) to run at another N")
        obs_space = spaces.Dict({k: spaces.Box(-np.inf, np.inf, shape=np.asarray(v).shape, dtype=np.float32)
                                 for k, v in obs.items()})
        self.model = load_per_client(self.model_path, self.spec, obs_space, device=self.device)
        self._n = n

    def scores(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """Each client's score for one Dict observation: (N,); an ensemble's is the sum of its members'
        scores standardised over the available clients."""
        from .per_client_net import per_client_scores

        if self.members:
            avail = self.available(obs)
            total = np.zeros(int(np.asarray(obs["clients"]).shape[0]))
            for member in self.members:
                s = member.scores(obs)
                ref = s[avail] if avail.size else s
                total += (s - ref.mean()) / (ref.std() + 1e-12)
            return total
        self._ensure_model(obs)
        return per_client_scores(self.model, obs)

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """The K available clients with the highest scores, best first (ties: lower index first)."""
        avail = self.available(obs)
        if self.tracker is not None:  # once a round: fold in the last round's selection, add the cover's columns
            self.tracker.observe(obs)
            obs = self.tracker.augment(obs)
        s = self.scores(obs)[avail]
        if self.sample:
            from .plackett_luce import PlackettLucePolicy

            models = [m.model for m in self.members] if self.members else [self.model]
            if not all(isinstance(getattr(m, "policy", None), PlackettLucePolicy) for m in models):
                raise ValueError("per_client agent: sample=true draws from a Plackett-Luce policy's logits; this "
                                 "model is not one (train_agent.py --algo pl_ppo or pl_a2c): leave sample out")
            s = s + self.rng.gumbel(size=s.shape)  # Gumbel-top-K: a draw of Plackett-Luce's top-K set
        return avail[np.argsort(-s, kind="stable")[: self.k]]


def deploy_per_client(model: Any, spec: SelectionSpec, train_config: Mapping[str, Any],
                      seed: Optional[int] = None) -> PerClientAgent:
    """``agents.deploy``'s ``per_client``: a per-client model's saved file (loaded for the episode's N), or a
    loaded model, as :class:`PerClientAgent`."""
    if isinstance(model, (str, Path)):
        return PerClientAgent(spec, seed=seed, model_path=model)
    return PerClientAgent(spec, seed=seed, model=model)


register_deployment("per_client", Deployment(
    selector=deploy_per_client, from_path=True, env_config=deployment_config, agent="per_client",
    check=check_pca_components, about="the per-client scorer: top-K of its scores, at any N"))
for _entry in (  # after sb3-contrib's maskable_ppo, before SB3's sac (the table's order); their zips name these policies
    Algorithm("pc_ppo", PPO, ("topk",), False, "per_client", (per_client_net.__name__,), ("clip_range",),
              about="the per-client selector (agents/per_client_net.py, issue #19) trained by PPO on the 'topk' "
                    "scores (configs/pc_ppo.yml); runs at any N"),
    Algorithm("pc_dqn", DoubleDQN, ("one",), True, "per_client", (per_client_net.__name__,), lacks=("clip_range",),
              about="the per-client selector as per-client Q-values, Double DQN in the 'one' mode "
                    "(configs/pc_dqn.yml), deployed as top-K; runs at any N"),
    Algorithm("pl_ppo", PPO, ("topk",), False, "per_client", (plackett_luce.__name__,), ("clip_range",),
              about="the K-of-N policy (agents/plackett_luce.py, issue #41): Plackett-Luce over per-client logits, "
                    "trained by PPO (configs/pl_ppo.yml), deployed as the K largest logits; runs at any N"),
    Algorithm("pl_ppo_cover", PPO, ("topk",), False, "per_client", (plackett_luce.__name__,), ("clip_range",),
              about="the named variant pl_ppo_cover (issue #41): the Plackett-Luce policy on cover-aware tokens "
                    "(kcenter_cover's state, agents/cover_tokens.py), its logits started at kcenter_cover's picks, "
                    "trained by PPO (configs/pl_ppo_cover.yml); its zips deploy as pl_ppo's do"),
    Algorithm("pl_ppo_cover_long", PPO, ("topk",), False, "per_client", (plackett_luce.__name__,), ("clip_range",),
              about="the named variant pl_ppo_cover_long (issue #41): pl_ppo_cover with cover_prior 1 and 98,304 "
                    "rounds (configs/pl_ppo_cover_long.yml, chosen on FreeRiders' tuning seeds); deploys as pl_ppo's do"),
    Algorithm("pl_a2c", A2C, ("topk",), False, "per_client", (plackett_luce.__name__,), lacks=("clip_range",),
              about="the Plackett-Luce K-of-N policy trained by A2C (configs/pl_a2c.yml)"),
):
    register_algorithm(_entry, before="sac")
