"""The server's view (docs/SPEC.md §2): what a real FL server knows of its clients, as the agents' observation.

One definition, used by the env (``fedsel_env/env.py``), FAVOR's deployment (``agents/favor.py``)
and the Flower strategy (``fedsel_flower/strategy.py``):

- :class:`WeightPCA` — FAVOR's PCA of flat weights, fitted once on the profiling round and kept;
- :class:`ServerView` — the per-client records, folded in from each round's report
  (:meth:`ServerView.start`, :meth:`ServerView.open_round`, :meth:`ServerView.record`) and turned
  into the observation (:meth:`ServerView.observe`);
- :data:`OBSERVATION_PARTS` — the observation's parts by name (``weights``, ``clients``,
  ``progress``), each a space and a value; a registered part appears in the Dict observation and
  can be named in the config's ``flat_parts``;
- :func:`flatten` — the one rule that turns a Dict observation into the flat one.

The records are kept per step: in the ``one`` mode with ``one_mode_step`` < 1 a step is a fraction
of a round, and the "last round" flags (``selected_last_round``, ``responded_last_round``) name the
clients of the last step, so an agent that learns from feedback (``rbcsf``, ``fedcs``, ``oort``) sees
each response exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import torch
from gymnasium import spaces
from sklearn.decomposition import PCA

from .registry import Registry
from .sim.limits import refuse_if_too_big
from .sim.training import all_finite
from .spec import CLIENT_FEATURES, FEATURE_INDEX

#: Reported losses are clipped to this bound in the observation.
LOSS_CAP = 1e4
#: PCA coordinates are clipped to ±this bound.
WEIGHT_CAP = 1e6
#: Peak bytes per weight of the profiling round's N + 1 models and FAVOR's PCA over them (float64 copies and
#: the SVD; measured 46-50 on an MLP of 1.5M parameters, N = 6 and 20), checked before an episode starts.
PCA_BYTES_PER_WEIGHT = 48.0


class WeightPCA:
    """FAVOR's fixed PCA of flat weights, fitted once on the profiling round (docs/SPEC.md §2) and kept.

    :param stacked: (N+1, P) the profiling round's weights, row 0 = w_0 (numpy, or a float64 tensor).
    :param components: d; fewer are fitted when the data allow fewer, and the rest padded with zeros.
    :param seed: the PCA's ``random_state``.
    :param gram: fit with :func:`gram_pca` (a tensor on its device); ``None``: when ``stacked`` is a CUDA tensor.
    :param dtype: what the projections compute in (the fit is float64 either way): ``torch.float64`` (the
        committed records' coordinates) or ``torch.float32`` (config ``pca_dtype: float32``, the named variant
        "float32 projections": half the bytes of the basis read every round; coordinates to ~1e-7 relative).

    On the CPU the fit is scikit-learn's (``stacked`` as numpy; the committed records hold its coordinates).
    Given a CUDA tensor it is :func:`gram_pca` on that device (issue #33: scikit-learn's SVD of FAVOR's 101 ×
    431,080 matrix took 4.7-6 s of a 10 s reset on an H100's host). The projection runs on the device of the
    weights it is given (the simulator's ``device``: the basis is copied there once) and returns numpy.
    """

    def __init__(self, stacked, components: int, seed: int, gram: Optional[bool] = None,
                 dtype: torch.dtype = torch.float64) -> None:
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"WeightPCA dtype = {dtype!r}: expected torch.float64 or torch.float32")
        self.dtype = dtype
        d = min(components, stacked.shape[0], stacked.shape[1])
        if gram is None:
            gram = isinstance(stacked, torch.Tensor) and stacked.device.type == "cuda"
        if gram:
            self.mean, comps = gram_pca(stacked.to(torch.float64), d)
        else:
            stacked = np.asarray(stacked.cpu() if isinstance(stacked, torch.Tensor) else stacked, dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):  # all rows equal: explained-variance ratio 0/0
                pca = PCA(n_components=d, random_state=seed).fit(stacked)
            self.mean = torch.from_numpy(pca.mean_)
            comps = torch.from_numpy(pca.components_)
        if d < components:
            comps = torch.cat([comps, comps.new_zeros(components - d, comps.shape[1])])
        self.components = comps
        self._on: Dict[torch.device, tuple] = {}

    def project(self, flat: torch.Tensor) -> np.ndarray:
        """PCA coordinates: (P,) → (d,), (K, P) → (K, d), computed where ``flat`` lives, in :attr:`dtype`."""
        if flat.device not in self._on:
            self._on[flat.device] = (self.mean.to(flat.device, self.dtype), self.components.to(flat.device, self.dtype))
        mean, components = self._on[flat.device]
        # float32 weights minus the float64 mean in one kernel: the same numbers as converting first (exact),
        # one pass and one copy fewer (issue #43)
        centred = torch.sub(flat, mean) if torch.promote_types(flat.dtype, self.dtype) == self.dtype \
            else flat.to(self.dtype) - mean
        return (centred @ components.T).cpu().numpy()


def gram_pca(x: torch.Tensor, d: int, rcond: float = 1e-7):
    """The top ``d`` principal axes of the rows of ``x`` (n, P), n ≪ P, from the n × n Gram matrix: (mean, (d, P)).

    With X_c = X − mean = U S Vᵀ: X_c X_cᵀ = U S² Uᵀ (``eigh``, n × n), and the axes are Vᵀ = S⁻¹ Uᵀ X_c — two
    (n, P) matrix products instead of an SVD of X_c. Signs follow scikit-learn's ``svd_flip(u_based_decision=False)``
    (each axis's largest-magnitude entry positive), so the axes are scikit-learn's full-SVD ones up to rounding
    (``tests/test_server_view.py``). An axis whose singular value is below ``rcond`` × the largest is zero, where
    an SVD would return an arbitrary unit vector orthogonal to the data, and its coordinate is then 0: no
    variance along it (rows all equal; the n-th axis of n centred rows), or too little for the Gram matrix to
    resolve (its eigenvalues carry rounding of float64 ε × the largest, so singular values below about
    √ε ≈ 1.5e-8 of the largest are noise; an H200 gave 1e-9 on the default preset's axis of no variance).
    """
    mean = x.mean(dim=0)
    xc = x - mean
    evals, evecs = torch.linalg.eigh(xc @ xc.T)  # ascending
    evals = evals.flip(0)[:d].clamp_min(0.0)
    u = evecs.flip(1)[:, :d]
    s = evals.sqrt()
    keep = s > rcond * s[:1].clamp_min(torch.finfo(s.dtype).tiny)
    vt = (u.T @ xc) / torch.where(keep, s, torch.ones_like(s)).unsqueeze(1)
    vt = vt * keep.unsqueeze(1).to(vt.dtype)
    top = vt.abs().argmax(dim=1, keepdim=True)
    signs = torch.sign(vt.gather(1, top))
    vt = vt * torch.where(signs == 0, torch.ones_like(signs), signs)
    return mean, vt


def fit_profiling_pca(w0: torch.Tensor, local: torch.Tensor, components: int, seed: int,
                      gram: Optional[bool] = None, dtype: torch.dtype = torch.float64):
    """FAVOR's map, fitted on w_0 and the N profiling-round models: (pca, their rows (N+1, d), # broken).

    A local model that blew up (an exploding learning rate) says nothing about the weight space: the
    map is fitted with w_0 in its place, and its row is w_0's. On CUDA the rows stay on the device
    (:func:`gram_pca`); elsewhere they go to the host for scikit-learn, as the server receives them.
    ``gram`` forces either fit (``None``: the Gram fit on CUDA; config ``pca_fit``); ``dtype``: the projections'
    (:class:`WeightPCA`; config ``pca_dtype``).
    """
    if gram is None:
        gram = w0.device.type == "cuda"
    if gram:
        stacked_t = torch.cat([w0.unsqueeze(0), local]).to(torch.float64)
        broken_t = ~torch.isfinite(torch.linalg.vector_norm(stacked_t, dim=1))
        stacked_t[broken_t] = stacked_t[0].clone()  # (row 0 is a view of the written tensor: CUDA refuses it)
        pca = WeightPCA(stacked_t, components, seed, gram=True, dtype=dtype)
        return pca, pca.project(stacked_t), int(broken_t.sum())
    stacked = torch.cat([w0.unsqueeze(0), local]).cpu().to(torch.float64).numpy()  # the server receives them
    with np.errstate(over="ignore"):
        broken = ~np.isfinite(np.linalg.norm(stacked, axis=1))
    stacked[broken] = stacked[0]
    pca = WeightPCA(stacked, components, seed, gram=False, dtype=dtype)
    return pca, pca.project(torch.from_numpy(stacked).to(w0.device)), int(broken.sum())


# ---------------------------------------------------------------------------------- the parts
@dataclass(frozen=True)
class ObservationPart:
    """One part of the observation: its space for a config, and its value from a :class:`ServerView`."""

    space: Callable[[Mapping[str, Any], int, int, int], spaces.Box]  # (cfg, N, d, P) -> Box
    value: Callable[["ServerView"], np.ndarray]                      # unclipped; observe() clips it


#: The observation's parts by name; ``OBSERVATION_PARTS.register("name")(ObservationPart(...))`` adds one.
OBSERVATION_PARTS: Registry = Registry("observation part")


def client_feature_high(system: Mapping[str, Any], model_size: int) -> np.ndarray:
    """The upper bound of each ``clients`` column (all lower bounds are 0)."""
    high = np.ones(len(CLIENT_FEATURES), dtype=np.float32)
    high[FEATURE_INDEX["loss"]] = LOSS_CAP
    high[FEATURE_INDEX["loss_rms"]] = LOSS_CAP
    high[FEATURE_INDEX["ctx_cpu"]] = 1.0 / system["cpu_share"][0]
    high[FEATURE_INDEX["ctx_comm"]] = 4.0 * model_size / system["bandwidth"][0]
    high[FEATURE_INDEX["last_exchange_time"]] = 1e6
    return high


OBSERVATION_PARTS.register("weights")(ObservationPart(  # FAVOR's s_t: PCA of w_t and of each latest local model
    space=lambda cfg, n, d, p: spaces.Box(-WEIGHT_CAP, WEIGHT_CAP, shape=(n + 1, d), dtype=np.float32),
    value=lambda v: np.nan_to_num(v.weights, nan=0.0, posinf=WEIGHT_CAP, neginf=-WEIGHT_CAP)))
OBSERVATION_PARTS.register("clients")(ObservationPart(  # columns: fedsel_env.spec.CLIENT_FEATURES
    space=lambda cfg, n, d, p: spaces.Box(np.zeros((n, len(CLIENT_FEATURES)), np.float32),
                                          np.tile(client_feature_high(cfg["system"], p), (n, 1)), dtype=np.float32),
    value=lambda v: np.nan_to_num(v.client_features(), nan=LOSS_CAP, posinf=LOSS_CAP)))
OBSERVATION_PARTS.register("progress")(ObservationPart(  # rounds played / budget, global accuracy
    space=lambda cfg, n, d, p: spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
    value=lambda v: np.array([min(v.rounds / v.budget, 1.0), v.accuracy])))


def dict_observation_space(cfg: Mapping[str, Any], num_clients: int, pca_components: int,
                           model_size: int) -> spaces.Dict:
    """The Dict observation space of a config: every registered part (N clients, d components, P parameters)."""
    return spaces.Dict({name: part.space(cfg, num_clients, pca_components, model_size)
                        for name, part in OBSERVATION_PARTS.items()})


def flat_observation_space(dict_space: spaces.Dict, parts: Sequence[str]) -> spaces.Box:
    """One ``Box``: the ``parts`` of ``dict_space`` flattened and concatenated in order."""
    lows = [dict_space[p].low.reshape(-1) for p in parts]
    highs = [dict_space[p].high.reshape(-1) for p in parts]
    return spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)


def flatten(obs: Mapping[str, np.ndarray], parts: Sequence[str]) -> np.ndarray:
    """The flat observation from a Dict one: ``obs[part]`` flattened, for each part in order.

    Accepts one observation or a batch (a leading batch axis on every part): (D,) or (B, D), float32.
    :raises ValueError: for an empty list or a part that is not registered.
    """
    bad = [p for p in parts if p not in OBSERVATION_PARTS]
    if bad or not parts:
        raise ValueError(f"flat_parts = {list(parts)!r} is invalid: expected parts from {sorted(OBSERVATION_PARTS)}")
    if np.asarray(obs["weights"]).ndim == 3:  # a batch
        b = np.asarray(obs["weights"]).shape[0]
        return np.concatenate([np.asarray(obs[p], dtype=np.float32).reshape(b, -1) for p in parts], axis=1)
    return np.concatenate([np.asarray(obs[p], dtype=np.float32).reshape(-1) for p in parts])


# ---------------------------------------------------------------------------------- the records
class ServerView:
    """The server's per-client records, and the observation built from them.

    :param cfg: the validated config (``max_rounds``, ``system`` bounds, ``observation``, ``flat_parts``).
    :param num_samples: n_k as the clients report them (N,).
    :param model_size: P.
    :param pca_components: d.
    :param step_fraction: the fraction of a round one step stands for (``one_mode_step``; 1 otherwise).
    """

    def __init__(self, cfg: Mapping[str, Any], num_samples: np.ndarray, model_size: int, pca_components: int,
                 step_fraction: float = 1.0) -> None:
        self.n, self.budget, self.unit = len(num_samples), int(cfg["max_rounds"]), float(step_fraction)
        refuse_if_too_big(PCA_BYTES_PER_WEIGHT * (self.n + 1) * model_size,
                          f"config fields 'num_clients' = {self.n} and 'model' = {cfg['model']!r} / 'model_params' = "
                          f"{cfg['model_params']} ({model_size:,} parameters; the profiling round's {self.n + 1} "
                          f"models and FAVOR's PCA over them)", "use fewer clients or a smaller model")
        self.num_samples = np.asarray(num_samples, dtype=np.int64)
        self.pca_components = int(pca_components)
        self.space = dict_observation_space(cfg, self.n, pca_components, model_size)
        self.flat_parts: Optional[list] = list(cfg["flat_parts"]) if cfg["observation"] == "flat" else None
        self.pca: Optional[WeightPCA] = None
        self.pca_gram: Optional[bool] = {"auto": None, "svd": False, "gram": True}[cfg.get("pca_fit", "auto")]
        self.pca_dtype = getattr(torch, cfg.get("pca_dtype", "float64"))

    @property
    def rounds(self) -> float:
        """Rounds played so far (steps × the fraction of a round each stands for)."""
        return self.step * self.unit

    def start(self, report, pca_seed: int, context: Optional[np.ndarray] = None) -> int:
        """The profiling round's report (round 0): fit FAVOR's PCA and start the records.

        The profiling round counts as round 0 for ``rounds_since_selected`` and is not an exchange the
        ``last_exchange_time`` column reports. :return: how many profiling models were not finite.
        """
        n = self.n
        self.pca, rows, broken = fit_profiling_pca(report.global_params, report.local_models,
                                                   self.pca_components, pca_seed, gram=self.pca_gram,
                                                   dtype=self.pca_dtype)
        self.weights = rows
        self.loss = np.array(report.losses, dtype=np.float64)
        self.loss_rms = np.array(report.loss_rms, dtype=np.float64)
        self.last_tau = np.zeros(n)
        self.participation = np.zeros(n, dtype=np.int64)
        self.last_responded_step = np.zeros(n)
        self.selected_last = np.zeros(n, dtype=bool)
        self.responded_last = np.zeros(n, dtype=bool)
        self.step = 0
        self.available = np.ones(n, dtype=bool)
        self.context = np.zeros((n, 3)) if context is None else context
        ev = report.evaluation
        self.accuracy = ev.accuracy if ev is not None else 0.0
        self.loss_global = ev.loss if ev is not None else float("nan")
        self.client_accuracies = ev.client_accuracies.copy() if ev is not None else np.zeros(n)
        return broken

    def open_round(self, opening) -> None:
        """The coming round's availability (N,) and contexts (N, 3) (a ``RoundOpening``)."""
        self.available, self.context = np.asarray(opening.available, dtype=bool), np.asarray(opening.context)

    def record(self, report) -> None:
        """Fold one step's ``RoundReport`` into the records."""
        self.step += 1
        resp = np.asarray(report.responders, dtype=np.int64)
        self.selected_last[:] = False
        self.selected_last[np.asarray(report.selected, dtype=np.int64)] = True
        self.responded_last[:] = False
        self.responded_last[resp] = True
        if resp.size:
            self.loss[resp] = report.losses
            self.loss_rms[resp] = report.loss_rms
            self.last_tau[resp] = report.exchange_times
            self.participation[resp] += 1
            self.last_responded_step[resp] = self.step
            local = report.local_models
            if local is not None and all_finite(local):  # FAVOR's state: latest local models
                self.weights[1 + resp] = np.nan_to_num(self.pca.project(local), nan=0.0, posinf=0.0, neginf=0.0)
        ev = report.evaluation
        if ev is not None and not report.diverged:
            self.accuracy, self.loss_global, self.client_accuracies = ev.accuracy, ev.loss, ev.client_accuracies
        self.weights[0] = self.pca.project(report.global_params)

    def client_features(self) -> np.ndarray:
        """The ``clients`` part (N, F), columns ``CLIENT_FEATURES`` (unclipped)."""
        c = np.zeros((self.n, len(CLIENT_FEATURES)), dtype=np.float64)
        f = FEATURE_INDEX
        c[:, f["loss"]] = self.loss
        c[:, f["loss_rms"]] = self.loss_rms
        ns = self.num_samples.astype(np.float64)
        c[:, f["num_samples"]] = ns / ns.max()
        c[:, f["rounds_since_selected"]] = (self.step - self.last_responded_step) * self.unit / self.budget
        c[:, f["participation_rate"]] = self.participation / max(self.rounds, 1)
        c[:, f["available"]] = self.available
        c[:, [f["ctx_cpu"], f["ctx_cold"], f["ctx_comm"]]] = self.context
        c[:, f["last_exchange_time"]] = self.last_tau
        c[:, f["selected_last_round"]] = self.selected_last
        c[:, f["responded_last_round"]] = self.responded_last
        return c

    def observe(self):
        """The observation for the coming round: the Dict of every part, or the flat ``Box`` of ``flat_parts``."""
        obs: Dict[str, np.ndarray] = {
            name: np.clip(part.value(self), self.space[name].low, self.space[name].high).astype(np.float32)
            for name, part in OBSERVATION_PARTS.items()}
        return obs if self.flat_parts is None else flatten(obs, self.flat_parts)
