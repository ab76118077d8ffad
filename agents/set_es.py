"""``set_es``: a set selector whose few weights are searched by CMA-ES on the real episode objective.

Issue #29. ``set_distill`` learns a one-round value (the oracle's one-round ranking) and ``pc_dqn`` a 1/K-round
one-client return; docs/TRAINING.md's analysis found that what holds both back is the target: the best
heuristics' advantage (``kcenter_cover``'s spread over a whole cover, ``pow_d``'s steady pull of the worst
clients) shows over many rounds. This design optimises the scenario's own objective over whole episodes —
rounds to Ω, worst-10% accuracy, seconds to Ω — by direct policy search.

**The policy.** Each round, every client i has a token φ_i: the env's client features (``obs["clients"]``, the
columns of ``SelectionSpec.client_features``) followed by ``kcenter_cover``'s state (:class:`~agents.set_distill.
CoverTracker`: in the current cover, distance to the cover, the cover's pick this round), each column standardised
over the round's available clients (so φ is free of the features' scales and of N). The set value is

    V(S) = Σ_{k∈S} θ·φ_k  +  w · Σ_{i<j ∈ S} D_ij / C(K, 2),

D the clients' distances in PCA space over their mean (``agents.set_distill.pair_distances``), and the round's
set is V's greedy maximiser (``agents.set_distill.greedy_set``). With θ on ``cover_pick`` alone it is
``kcenter_cover``; on ``loss`` alone, a stale-loss ``pow_d`` without queries; it reads only the observation
(no loss queries, no simulator): deployable.

**The named variant ``set_es_q``: the same policy with ``pow_d``'s loss queries** (``queries = d`` in the policy
file or the constructor). Each round the d available clients with the highest θ·φ (ties by client id) report
their loss on the current global model through the env's counted ``query_losses`` — the channel and the count
``pow_d`` uses (d = 2K by default, as ``pow_d``'s) — and the set is chosen among those d only, by the set value
with one more column: the queried loss, standardised over the d candidates, weighted ``queried_loss``. With θ on
``queried_loss`` alone (and the ``num_samples`` column ranking the candidates) it is a ``pow_d`` that queries the d
largest clients instead of drawing them ∝ n_k; the search adds what else separates the clients worth asking.

**Training** (``agents/training/set_es.py``): CMA-ES (N. Hansen, "The CMA Evolution Strategy: A Tutorial",
arXiv:1604.00772; the ``cma`` package) over the 16 numbers (θ, w), each generation's candidates all played on the
same fresh federations (common random numbers) and ranked per federation by the scenario's objective — the real
multi-round return, as in evolution strategies for RL (T. Salimans et al., "Evolution Strategies as a Scalable
Alternative to Reinforcement Learning", arXiv:1703.03864, 2017). The deployed weights are the search's mean.

A **named variant**, not a paper's algorithm: FAVOR's state (docs/SPEC.md §2, §4), ``kcenter_cover``'s cover
(``agents/kcenter_cover.py``) and a linear set value, searched by CMA-ES.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .deploy import register_run_folder
from .registry import AGENTS
from .selector_files import check_field, check_weight, read_json_object
from .set_distill import COVER_FEATURES, CoverTracker, greedy_set, obs_tensors, pair_distances

#: the file a trained policy is saved in (JSON: the weights by feature name, and the training facts)
POLICY_FILE = "set_es.json"
_EPS = 1e-8


def token_names(spec: SelectionSpec) -> list:
    """The token's columns: the env's client features, then :data:`~agents.set_distill.COVER_FEATURES`."""
    return [*spec.client_features, *COVER_FEATURES]


def param_names(spec: SelectionSpec, queries: int = 0) -> list:
    """The searched numbers: one weight per token column, the queried-loss weight when the policy asks ``queries``
    clients for their loss (``set_es_q``), then the diversity weight ``w``."""
    return [*token_names(spec), *(["queried_loss"] if queries else []), "w"]


def check_queries(queries: Any, spec: SelectionSpec) -> int:
    """``queries`` as an int: 0 (no queries) or K ≤ d ≤ N. :raises ValueError: otherwise."""
    k, n = spec.clients_per_round, spec.num_clients
    if isinstance(queries, bool) or not isinstance(queries, (int, np.integer)) or not (
            queries == 0 or k <= queries <= n):
        raise ValueError(f"set_es: queries = {queries!r} is invalid: expected 0 (no loss queries) or an integer d "
                         f"with K <= d <= N (K = {k}, N = {n}); pow_d's default is 2K = {min(2 * k, n)}")
    return int(queries)


def standardise(tokens: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Each column minus its mean over the available clients, over its standard deviation there (a constant column
    becomes 0)."""
    x = np.asarray(tokens, dtype=np.float64)
    if not available.any():
        return np.zeros_like(x)
    a = x[available]
    mean, std = a.mean(axis=0), a.std(axis=0)
    return np.where(std > _EPS, (x - mean) / np.where(std > _EPS, std, 1.0), 0.0)


def load_policy(folder: Union[str, Path], spec: SelectionSpec) -> Dict[str, Any]:
    """A saved policy's JSON, every field checked (``agents/selector_files.py``) and matched to ``spec``'s client
    features; ``params`` comes back as a mapping of names to floats.

    :raises ValueError: naming the file and the field: the folder holds no policy; the file is too big, nested too
        deep, not JSON or not a JSON object; ``params`` is missing or not a mapping of the token's names to finite
        numbers of magnitude <= ``MAX_WEIGHT`` (a string, ``10**400``, ``1e308`` and NaN are refused); ``queries``
        is invalid; the policy was made for other client features.
    """
    path = Path(folder) / POLICY_FILE
    if not path.is_file():
        raise ValueError(f"{folder} holds no set_es policy ({POLICY_FILE}): train one with experiments/"
                         f"bench_learned.py --design set_es, or name the folder it wrote")
    where = f"set_es policy {str(path)!r}"
    policy = read_json_object(path, "set_es policy")
    params = check_field(policy, where, "params", "a mapping of the token's feature names to weights")
    if not isinstance(params, dict):
        raise ValueError(f"{where}: field 'params' is a JSON {type(params).__name__}; expected an object mapping "
                         f"the token's feature names to weights")
    try:
        queries = check_queries(policy.get("queries", 0), spec)
    except ValueError as e:
        raise ValueError(f"{where}: field 'queries': {e}") from None
    if list(params) != param_names(spec, queries):
        raise ValueError(f"the set_es policy in {folder} was trained with the token {list(params)[:-1]}; "
                         f"this env's is {param_names(spec, queries)[:-1]}: train it on this env's client features")
    return {**policy, "queries": queries,
            "params": {n: check_weight(v, where, f"params.{n}") for n, v in params.items()}}


register_run_folder(POLICY_FILE, "set_es")  # evaluate.py --policy runs/train/<a set_es run>


@AGENTS.register("set_es")
class SetESAgent(SelectionAgent):
    """Deploy a ``set_es`` policy: greedy maximisation of its linear set value (module docstring).

    :param spec: the problem's public description.
    :param seed: unused (the choice is deterministic); kept for the registry's signature.
    :param model: the folder a training run wrote (``set_es.json``), or the weights themselves: a sequence of
        ``len(param_names(spec, queries))`` numbers, or a mapping from those names to numbers.
    :param queries: d, the clients asked for their current loss each round (``set_es_q``); 0 = none. A folder's
        policy file sets it (a different value here is refused).
    """

    name = "set_es"
    supported_modes = ("topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None,
                 model: Union[str, Path, Sequence[float], Dict[str, float], None] = None,
                 queries: Optional[int] = None) -> None:
        super().__init__(spec, seed)
        if model is None:
            raise ValueError("set_es needs a trained policy: set_es:model=<folder> (experiments/bench_learned.py "
                             "--design set_es writes one per scenario and training seed)")
        if isinstance(model, (str, Path)):
            policy = load_policy(model, spec)
            saved = int(policy.get("queries", 0))
            if queries is not None and check_queries(queries, spec) != saved:
                raise ValueError(f"set_es: queries = {queries} but the policy in {model} was trained with "
                                 f"queries = {saved}: leave 'queries' out to use the policy's")
            queries = saved
            params = policy["params"]
            model = [params[n] for n in param_names(spec, queries)]
        self.queries = check_queries(0 if queries is None else queries, spec)
        names = param_names(spec, self.queries)
        if isinstance(model, dict):
            missing = sorted(set(names) - set(model))
            if missing:
                raise ValueError(f"set_es weights lack {missing}: give every one of {names}")
            model = [model[n] for n in names]
        if isinstance(model, np.ndarray):
            model = model.reshape(-1).tolist()
        if not isinstance(model, (list, tuple)) or len(model) != len(names):
            raise ValueError(f"set_es needs {len(names)} finite weights ({names}); got {model!r:.80}")
        theta = np.array([check_weight(v, f"set_es needs {len(names)} finite weights", n)
                          for n, v in zip(names, model)], dtype=np.float64)
        self.theta, self.w = theta[:len(token_names(spec))], float(theta[-1])
        self.theta_q = float(theta[-2]) if self.queries else 0.0
        self.tracker = CoverTracker(self.k, spec)
        self.query_losses: Optional[Any] = None
        self.last_candidates = np.empty(0, dtype=np.int64)

    def bind(self, env: Any) -> None:
        """``set_es_q``'s channel: the env's counted ``query_losses`` (as ``pow_d``'s)."""
        self.query_losses = env.query_losses

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        self.tracker.points = None  # the next select starts it on this episode's first observation

    def scores(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """Each client's θ·φ for this round (moves the cover tracker on: call once per round, as ``select`` does)."""
        self.tracker.observe(obs)
        tokens = np.concatenate([np.asarray(obs["clients"], dtype=np.float64), self.tracker.features(obs)], axis=1)
        available = self.spec.feature(obs, "available") > 0.5
        return standardise(tokens, available) @ self.theta

    def candidates(self, scores: np.ndarray, available: np.ndarray) -> np.ndarray:
        """``set_es_q``'s d clients to ask: the available ones with the highest θ·φ (ties by client id)."""
        order = available[np.argsort(-scores[available], kind="stable")]
        return np.sort(order[: self.queries])

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        s = self.scores(obs)
        pool = self.available(obs)
        if self.queries:
            if self.query_losses is None:
                raise ValueError("set_es_q asks d clients for their loss on the current global model: bind it to the "
                                 "env first (agent.bind(env.unwrapped); evaluate.py and fedsel_eval do)")
            pool = self.candidates(s, pool)
            self.last_candidates = pool
            q = np.asarray(self.query_losses(pool), dtype=np.float64)
            s = s.copy()
            s[pool] += self.theta_q * standardise(q[:, None], np.ones(pool.size, dtype=bool))[:, 0]
        dist = pair_distances(obs_tensors(obs)["weights"])[0].double().numpy() if self.w != 0.0 else \
            np.zeros((s.size, s.size))
        return greedy_set(s, dist, self.w, pool, self.k)


__all__ = ["POLICY_FILE", "SetESAgent", "check_queries", "load_policy", "param_names", "standardise", "token_names"]
