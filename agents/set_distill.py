"""``set_distill``: a per-client scorer with a set-level (factored) value, distilled from the lookahead oracle.

Issue #29. The per-client DQN (``pc_dqn``) learns one client a step with a 1/K-round reward, and
docs/TRAINING.md's analysis found that what it learns is not what the deployed top-K needs. This design
learns on the deployed action instead: whole K-client rounds, scored by the real round.

**The value of a set.** For a round's candidate set S (at most K available clients) the model's value is

    V(S) = Σ_{k∈S} s_k  +  w · Σ_{i<j ∈ S} D_ij / C(K, 2)

where s_k = ρ([h_k, context]) is the per-client network of ``agents/per_client_net.py`` (a DeepSets
token encoder: permutation-equivariant and free of N), D_ij is the distance between clients i and j's
PCA rows (``obs["weights"]``) divided by the set's mean pairwise distance, and w is one learned number
(a diversity weight: w > 0 favours sets that span the weight space, as ``kcenter_cover`` does by rule).

**Training** (``agents/training/set_distill.py``): DAgger (Ross, Gordon, Bagnell, "A Reduction of Imitation
Learning and Structured Prediction to No-Regret Online Learning", AISTATS 2011) with the bench's privileged
``lookahead`` oracle as the expert. At every visited round the oracle plays its M candidate sets — every
hand-written heuristic's pick plus random K-subsets — and, added here, the learner's own pick, each one
round ahead on the simulator, and scores them by the scenario's objective. V is fitted to rank the
candidates as those scores do (a pairwise logistic loss over every pair of candidates whose scores differ:
RankNet, Burges et al., ICML 2005). The rounds are visited by the oracle's choice with probability β
(decaying to 0) and the learner's otherwise, so the learner is trained on the states it reaches.

**Deployed** (this agent): greedy maximisation of V over the available clients — K times, the client with
the largest marginal value s_k + w · Σ_{j picked} D_kj / C(K, 2). With w = 0 this is exactly the top-K of s.
It reads only the observation (no simulator, no loss queries): deployable, unlike its teacher.

**Cover-aware tokens** (the named variant ``set_distill_cover``: a model saved with ``cover_features``):
each client's token also carries :data:`COVER_FEATURES`, ``kcenter_cover``'s state followed from the clients
actually selected (:class:`CoverTracker`): whether the client is in the current cover, its distance (on the
profiling round's PCA rows, over their mean pairwise distance) to the cover's nearest member, and whether
``kcenter_cover`` would pick it this round. The plain tokens cannot see that state (the ``weights`` rows are the
clients' latest models, not the profiling round's), and ``kcenter_cover`` is the best hand-written agent on five
of the bench's eight scenarios: with them the learner can follow it and learn from the oracle where to leave it.

A **named variant**, not a paper's algorithm: it borrows FAVOR's state (docs/SPEC.md §2, §4), DAgger's
training loop and the bench oracle's candidates (docs/BENCHMARK.md).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch as th
from gymnasium import spaces
from torch import nn

from fedsel_env.spec import SelectionSpec

from .deploy import register_run_folder
from .registry import AGENTS
from .base import SelectionAgent
from .kcenter import farthest_point
from .per_client_net import ClientSetEncoder, ScoreHead
from .selector_files import MAX_HIDDEN, check_field, check_int, load_tensors, read_json_object

#: the files of a saved model: the weights (read with ``torch.load(weights_only=True)``) and their metadata
WEIGHTS_FILE, META_FILE = "set_distill.pt", "set_distill.json"
_EPS = 1e-6
#: the columns a cover-aware model appends to ``obs["clients"]`` (:class:`CoverTracker`)
COVER_FEATURES = ("in_cover", "cover_distance", "cover_pick")


def pair_distances(weights: th.Tensor) -> th.Tensor:
    """(B, N, N) distances between the clients' PCA rows (``obs["weights"]`` rows 1..N), each state's divided
    by its mean off-diagonal distance (so D is free of the PCA's scale and of N)."""
    rows = weights.float()[:, 1:]
    d = th.cdist(rows, rows)
    n = d.shape[1]
    mean = d.sum(dim=(1, 2), keepdim=True) / max(n * (n - 1), 1)
    return d / (mean + _EPS)


class SetScorer(nn.Module):
    """Per-client scores s (B, N) and the diversity weight w of the set value V (module docstring).

    :param observation_space: the env's Dict observation space (``weights``, ``clients``, ``progress``).
    :param hidden: width of the token encoder and of the score head.
    :param cover_features: the tokens carry :data:`COVER_FEATURES` (the inputs are then augmented observations,
        :meth:`CoverTracker.augment`).
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64, cover_features: bool = False) -> None:
        super().__init__()
        #: whether the tokens carry COVER_FEATURES (``observation_space`` is then the env's, without them)
        self.cover_features = bool(cover_features)
        if self.cover_features:
            observation_space = with_cover_columns(observation_space)
        self.encoder = ClientSetEncoder(observation_space, hidden)
        self.head = ScoreHead(hidden)
        self.div_weight = nn.Parameter(th.zeros(1))

    def forward(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        return self.head(self.encoder(obs))

    def set_values(self, obs: Dict[str, th.Tensor], members: th.Tensor, k: int) -> th.Tensor:
        """V of each candidate: ``members`` (B, M, N) in {0, 1} marks each state's M candidate sets → (B, M)."""
        s = self(obs)                                                     # (B, N)
        m = members.float()
        own = th.einsum("bmn,bn->bm", m, s)
        d = pair_distances(obs["weights"])                                # (B, N, N)
        pairs = 0.5 * th.einsum("bmi,bij,bmj->bm", m, d, m) / max(math.comb(k, 2), 1)
        return own + self.div_weight * pairs


def greedy_set(scores: np.ndarray, dist: np.ndarray, w: float, available: np.ndarray, k: int) -> np.ndarray:
    """The greedy maximiser of V over ``available``: K times the client of largest marginal value
    s_i + w · Σ_{j picked} D_ij / C(K, 2) (ties to the lowest index). With w = 0: the top-K of ``scores``."""
    avail = np.asarray(available, dtype=np.int64)
    picked: list = []
    gain = np.asarray(scores, dtype=np.float64)[avail].copy()
    pair = max(math.comb(k, 2), 1)
    free = np.ones(avail.size, dtype=bool)
    for _ in range(min(k, avail.size)):
        i = int(np.flatnonzero(free)[np.argmax(gain[free])])
        picked.append(int(avail[i]))
        free[i] = False
        gain += w * dist[avail, avail[i]] / pair
    return np.asarray(picked, dtype=np.int64)


def with_cover_columns(space: spaces.Dict) -> spaces.Dict:
    """``space`` with :data:`COVER_FEATURES` appended to the ``clients`` columns."""
    n, f = space["clients"].shape
    return spaces.Dict({**dict(space.spaces),
                        "clients": spaces.Box(-np.inf, np.inf, (n, f + len(COVER_FEATURES)), np.float32)})


class CoverTracker:
    """``kcenter_cover``'s state followed from the clients actually selected, as per-client features.

    The points are the first observation's client rows of ``weights`` (the profiling round's models, fixed for
    the episode); a client joins the cover when an observation says it was selected in the last round
    (``selected_last_round``), and a new cover starts when every client is in (holding the round's selected
    clients that were already in the old one, as ``kcenter_cover``'s refills). ``features`` gives, per client:
    in the cover (0/1); the distance to the cover's nearest member (to the points' mean while the cover is
    empty) over the points' mean pairwise distance; whether ``kcenter_cover``'s farthest-point rule picks it
    among the available clients this round (unused ones first, then used ones, as ``agents/kcenter_cover.py``).
    """

    def __init__(self, k: int, spec: SelectionSpec) -> None:
        self.k, self.spec = int(k), spec
        self.points: Optional[np.ndarray] = None

    def start(self, obs: Dict[str, np.ndarray]) -> None:
        self.points = np.asarray(obs["weights"], dtype=np.float64)[1:].copy()
        self.used = np.zeros(self.points.shape[0], dtype=bool)
        n = self.points.shape[0]
        d = np.sqrt(((self.points[:, None] - self.points[None]) ** 2).sum(-1))
        mean = d.sum() / max(n * (n - 1), 1)
        self.scale = mean if mean > 0 else 1.0

    def observe(self, obs: Dict[str, np.ndarray]) -> None:
        """Fold in the last round's selection (the first call of an episode starts the tracker instead)."""
        if self.points is None:
            self.start(obs)
            return
        self.fold(self.spec.feature(obs, "selected_last_round") > 0.5)

    def fold(self, selected: np.ndarray) -> None:
        """Fold one round's selected clients (N booleans) into the cover."""
        joined = self.used | selected
        # a completed cover starts the next with the round's refills: the selected clients already in the old one
        # (kcenter_cover completes a round from them when its unused clients run out)
        self.used = (selected & self.used) if joined.all() else joined

    def features(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """(N, 3): :data:`COVER_FEATURES` for this observation (after :meth:`observe`)."""
        pts, used = self.points, self.used
        if used.any():
            diff = pts[:, None, :] - pts[used][None, :, :]
            dist = np.sqrt((diff ** 2).sum(-1)).min(axis=1)
        else:
            dist = np.linalg.norm(pts - pts.mean(axis=0), axis=1)
        available = self.spec.feature(obs, "available") > 0.5
        k = min(self.k, int(available.sum()))
        pick = farthest_point(pts, np.flatnonzero(available & ~used), np.flatnonzero(used), k)
        if pick.size < k:
            more = farthest_point(pts, np.setdiff1d(np.flatnonzero(available), pick), pick, k - pick.size)
            pick = np.concatenate([pick, more])
        chosen = np.zeros(pts.shape[0], dtype=np.float32)
        chosen[pick] = 1.0
        return np.stack([used.astype(np.float32), (dist / self.scale).astype(np.float32), chosen], axis=1)

    def augment(self, obs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """``obs`` with the features appended to ``clients`` (call :meth:`observe` first)."""
        out = dict(obs)
        out["clients"] = np.concatenate([np.asarray(obs["clients"], dtype=np.float32), self.features(obs)], axis=1)
        return out


def obs_tensors(obs: Dict[str, np.ndarray]) -> Dict[str, th.Tensor]:
    """One Dict observation as a batch of one tensor each."""
    return {k: th.as_tensor(np.asarray(obs[k], dtype=np.float32))[None] for k in ("weights", "clients", "progress")}


def save_model(model: SetScorer, folder: Union[str, Path], meta: Dict[str, Any]) -> Path:
    """Write the weights and their metadata (``pca_components``, ``hidden``, ``n_features``, the training
    facts) into ``folder``, each file atomically."""
    from .training.atomic import atomic_save, atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    atomic_save(lambda tmp: th.save(state, tmp), folder / WEIGHTS_FILE)
    atomic_write_text(folder / META_FILE, json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return folder


def load_model(folder: Union[str, Path], observation_space: spaces.Dict) -> Tuple[SetScorer, Dict[str, Any]]:
    """A saved :class:`SetScorer` for an observation space of any N (no weight depends on N).

    Every field is checked before the network is built (``agents/selector_files.py``): the metadata is a JSON
    object whose ``hidden`` is an integer in [1, ``MAX_HIDDEN``] (``-1`` or ``10**6`` refused before allocating),
    ``pca_components`` and ``n_features`` integers, ``cover_features`` a boolean; the weights file is read by
    ``torch.load(weights_only=True)`` (a pickle payload is refused) and must hold this network's tensors, finite
    and of magnitude <= ``MAX_WEIGHT``.

    :raises ValueError: naming the file and the field, when the folder holds no model, a field is missing or
        invalid, the PCA width or client features differ, or the weights are damaged or do not fit.
    """
    folder = Path(folder)
    if not (folder / WEIGHTS_FILE).is_file() or not (folder / META_FILE).is_file():
        raise ValueError(f"{folder} holds no set_distill model ({WEIGHTS_FILE} and {META_FILE}): train one with "
                         f"experiments/bench_learned.py --design set_distill, or name the folder it wrote")
    where = f"set_distill metadata {str(folder / META_FILE)!r}"
    meta = read_json_object(folder / META_FILE, "set_distill metadata")
    fields = {name: check_field(meta, where, name, why) for name, why in (
        ("hidden", "the network's width"), ("pca_components", "the PCA width d it reads"),
        ("n_features", "the client features it reads"))}
    hidden = check_int(fields["hidden"], where, "hidden", 1, MAX_HIDDEN)
    saved_d = check_int(fields["pca_components"], where, "pca_components", 1, 1 << 20)
    saved_f = check_int(fields["n_features"], where, "n_features", 0, 1 << 20)
    cover = meta.get("cover_features", False)
    if not isinstance(cover, bool):
        raise ValueError(f"{where}: field 'cover_features' = {cover!r:.60} is invalid: expected true or false")
    d = int(observation_space["weights"].shape[1])
    f = int(observation_space["clients"].shape[1])
    if saved_d != d or saved_f != f:
        raise ValueError(f"the set_distill model in {folder} was trained with pca_components={saved_d} "
                         f"and {saved_f} client features; this env has {d} and {f}: set the env's "
                         f"pca_components to {saved_d}")
    state = load_tensors(folder / WEIGHTS_FILE, "set_distill weights")
    model = SetScorer(observation_space, hidden=hidden, cover_features=cover)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if want != got:
        wrong = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))[:4]
        raise ValueError(f"set_distill weights {str(folder / WEIGHTS_FILE)!r} do not fit the network its metadata "
                         f"describes (hidden={hidden}): {', '.join(f'{k}: {got.get(k)} (expected {want.get(k)})' for k in wrong)}"
                         f"; give the folder a training run wrote")
    model.load_state_dict(state)
    model.eval()
    return model, meta


def observation_space_for(n: int, d: int, n_features: int) -> spaces.Dict:
    """The Dict observation space of N clients (only its shapes matter to the network)."""
    return spaces.Dict({"weights": spaces.Box(-np.inf, np.inf, (n + 1, d), np.float32),
                        "clients": spaces.Box(-np.inf, np.inf, (n, n_features), np.float32),
                        "progress": spaces.Box(0.0, 1.0, (2,), np.float32)})


register_run_folder(WEIGHTS_FILE, "set_distill")  # evaluate.py --policy runs/train/<a set_distill run>


@AGENTS.register("set_distill")
class SetDistillAgent(SelectionAgent):
    """Deploy a trained ``set_distill`` model: greedy maximisation of its set value over the available clients.

    :param spec: the problem's public description.
    :param seed: unused (the choice is deterministic); kept for the registry's signature.
    :param model: the folder a training run wrote (``set_distill.pt`` and ``set_distill.json``), or a live
        :class:`SetScorer`.
    """

    name = "set_distill"
    supported_modes = ("topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, model: Union[str, Path, SetScorer, None] = None) -> None:
        super().__init__(spec, seed)
        if model is None:
            raise ValueError("set_distill needs a trained model: set_distill:model=<folder> (experiments/"
                             "bench_learned.py writes one per scenario and training seed)")
        n_features = len(spec.client_features)
        space = observation_space_for(spec.num_clients, spec.pca_components, n_features)
        self.model = model if isinstance(model, SetScorer) else load_model(model, space)[0]
        self.tracker = CoverTracker(self.k, spec) if self.model.cover_features else None
        #: the model's input of the last ``select`` (the augmented observation for a cover-aware model)
        self.last_input: Optional[Dict[str, np.ndarray]] = None

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        if self.tracker is not None:
            self.tracker.points = None  # the next select starts it on this episode's first observation

    def model_input(self, obs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """What the model reads for ``obs``: the observation, or it with the cover features (the tracker moves
        on: call once per round, as ``select`` does)."""
        if self.tracker is None:
            return obs
        self.tracker.observe(obs)
        return self.tracker.augment(obs)

    def scores(self, obs: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray, float]:
        """(s, D, w) of one model input (:meth:`model_input`)."""
        t = obs_tensors(obs)
        with th.no_grad():
            s = self.model(t)[0].double().numpy()
            dist = pair_distances(t["weights"])[0].double().numpy()
        return s, dist, float(self.model.div_weight.detach())

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        self.last_input = self.model_input(obs)
        s, dist, w = self.scores(self.last_input)
        return greedy_set(s, dist, w, self.available(obs), self.k)


def candidate_members(candidates: Sequence[np.ndarray], n: int) -> np.ndarray:
    """(M, N) 0/1 membership of each candidate set."""
    out = np.zeros((len(candidates), n), dtype=np.float32)
    for i, c in enumerate(candidates):
        out[i, np.asarray(c, dtype=np.int64)] = 1.0
    return out


__all__ = ["COVER_FEATURES", "CoverTracker", "SetDistillAgent", "SetScorer", "candidate_members", "greedy_set",
           "load_model", "obs_tensors", "observation_space_for", "pair_distances", "save_model", "with_cover_columns"]
