"""Why the per-client selector does not beat pow_d: what its scores depend on, and the one-step bound.

Issue #19 ("if the goal is not reached, the result as measured with the analysis of why"); docs/SPEC.md §2 (the
state: the PCA rows and the server's per-client record), §4 (the agents: ``pow_d``, the per-client
selector, FAVOR's one-step oracle), §6. ``experiments/per_client_study.py`` measured the selector
(``agents/per_client_net.py``, trained as ``pc_dqn``) on held-out seeds: it beats random by about three
rounds to Ω and is level with the best heuristic, ``pow_d``. This script asks why, in the study's own
setting (``federation_seed`` 0, ``init: federation``, the study's Ω and round cap) on the first ten of
its tuning seeds (1000–1009, seen by the study's steps 1–2 only):

    python experiments/per_client_analysis.py --setting digits       # after per_client_study --part train
    python experiments/per_client_analysis.py --setting fmnist_e1
    python experiments/per_client_analysis.py --smoke                # seconds: trains a tiny model itself

1. **What the scores depend on.** Each trained model (``--models``; default: the study's
   ``runs/repro/per_client_study/<setting>/train/pc_dqn_s{0,1,2}``) plays its deployed top-K on the
   seeds, and at every round each available client's token (``agents.per_client_net.client_tokens``:
   the PCA row, its distance, the server's per-client record) is recorded beside its score, its loss on
   the current global model (queried as ``pow_d`` queries it; the selector never sees it) and, unless
   ``--no-oracle-values``, its one-step oracle value (the accuracy one ``one``-mode step with it alone
   reaches: ``agents/one_step_oracle.py``). Per feature: the within-round Spearman correlation with the
   score (over the available clients; the mean over rounds per episode, a 95% t interval over the
   episodes, each episode's value averaged over the models first); the R² of a least-squares fit of
   the within-round standardised scores on the standardised features; and the share of the K picks
   that are among the K clients with the highest current loss (what ``pow_d`` aims at), the highest
   reported loss, the most rounds since selected, and the K oracle-best — against random's K/N.
   ``pow_d``, ``rpow_d`` (pow_d's rule on the reported losses: what the selector knows, no queries) and
   random are traced on the same seeds for reference.
2. **The one-step bound.** ``agents.one_step_oracle.OneStepOracle`` (top-K of the one-step values: a
   perfectly learned myopic Q-function deployed as the selector is) plays the same seeds through
   ``fedsel_eval`` beside random, ``pow_d``, ``rpow_d`` and the selector (each model, and their ensemble); rounds
   to Ω (a miss counts as the cap) paired by seed, with 95% t intervals. Each oracle round plays every
   available client ahead on a copy of the env (the digits default: about 0.1 s a client here; Fashion-MNIST's
   MLP with N = 100: about 0.5 s), so ``--oracle-seeds N`` limits the oracle to the first N seeds.
3. **Learning curves.** Not recomputed here: the study saves no checkpoints, so a greedy evaluation
   during training would mean training again (what the table says).

Every part is cached in ``runs/repro/per_client_analysis/<setting>/`` (the episodes as evaluate.py run
folders, the traces one file per episode), so an interrupted run continues. Published:
``experiments/results/per_client_analysis_<setting>.json`` and ``docs/img/repro_per_client_analysis_<setting>.png``
(docs/TRAINING.md quotes them by hand; nothing is spliced into a document).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from experiments.favor_study import TUNE_SEEDS, ci_text, paired, rounds, target_and_best  # noqa: E402
from experiments.per_client_study import ALGO, SETTINGS, SMOKE_TRAIN_HP  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import t_interval  # noqa: E402

NAME = "per_client_analysis"
SEEDS = TUNE_SEEDS[:10]  # 1000–1009: the study's tuning seeds (its steps 1–2 looked at them; its report did not)
TRAIN_SEEDS = (0, 1, 2)
ORACLE = "oracle=agents.one_step_oracle:OneStepOracle"  # its default step: 1/K (one_mode_step: 1/K, as pc_dqn trains)
#: the overlaps of the picks reported: reference name -> what it ranks the available clients by
OVERLAPS = {"current_loss": "the K highest losses on the current global model (what pow_d aims at)",
            "reported_loss": "the K highest last reported losses (the token's loss column)",
            "rounds_since_selected": "the K clients least recently selected",
            "oracle": "the K best one-step oracle values"}
TRACE_VERSION = 1
#: the hand-written policies played beside the selector: random, pow_d (the study's best heuristic, which
#: queries 2K candidates' current losses) and rpow_d (the same rule on the reported losses: the selector's information)
REFERENCES = ("random", "pow_d", "rpow_d")


# ============================================================================ statistics (tested by hand)
def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two vectors (average ranks for ties); NaN when either is constant
    or they have fewer than two entries."""
    from scipy.stats import rankdata

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    ra, rb = rankdata(a) - (a.size + 1) / 2, rankdata(b) - (b.size + 1) / 2
    return float(np.dot(ra, rb) / math.sqrt(np.dot(ra, ra) * np.dot(rb, rb)))


def topk_overlap(picks: Sequence[int], values: Sequence[float], k: int) -> float:
    """The expected share of ``picks`` (positions in ``values``) among the ``k`` entries with the highest
    ``values``, ties at the k-th value broken uniformly at random; 1 when ``values`` has at most ``k``.

    Uniformly random picks of K out of N score K/N on average.
    """
    v = np.asarray(values, dtype=np.float64)
    picks = np.asarray(picks, dtype=np.int64)
    if picks.size == 0:
        return math.nan
    if v.size <= k:
        return 1.0
    kth = np.sort(v)[::-1][k - 1]
    above, tied = v > kth, v == kth
    p = np.where(above, 1.0, np.where(tied, (k - above.sum()) / tied.sum(), 0.0))
    return float(p[picks].sum() / picks.size)


def standardise(x: np.ndarray) -> np.ndarray:
    """Columns of ``x`` (or a vector) as z-scores; a constant column becomes 0."""
    x = np.asarray(x, dtype=np.float64)
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def r_squared(y: np.ndarray, x: np.ndarray) -> float:
    """R² of the least-squares fit of ``y`` on the columns of ``x`` with an intercept."""
    y = np.asarray(y, dtype=np.float64)
    a = np.column_stack([np.ones(y.size), np.asarray(x, dtype=np.float64)])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    total = float(np.sum((y - y.mean()) ** 2))
    return float(1.0 - np.sum((y - a @ coef) ** 2) / total) if total > 0 else math.nan


# ================================================================================== the token's columns
def feature_names(d: int) -> List[str]:
    """The columns of a client's token (``agents.per_client_net.client_tokens``) for a d-component PCA."""
    from agents.per_client_net import Z_COLUMNS
    from fedsel_env.spec import CLIENT_FEATURES

    return [f"pca_{j}" for j in range(d)] + ["pca_distance"] + list(CLIENT_FEATURES) + [f"z_{c}" for c in Z_COLUMNS]


def analysed_features(names: Sequence[str]) -> List[str]:
    """The token's columns that are analysed: the ``z_`` columns are left out, because within a round they
    are an increasing affine function of their plain column (same ranks, same standardised values)."""
    return [n for n in names if not n.startswith("z_")]


# ================================================================================================ traces
def trace_episode(env: Any, make_agent: Any, seed: int, scores: Any = None, oracle_step: Any = None
                  ) -> Dict[str, np.ndarray]:
    """Play one deployed episode from ``env.reset(seed=seed)``, recording every available client of every round.

    :param make_agent: ``make_agent(spec, seed)`` builds the episode's agent from the env's ``selection_spec``
        after the reset (as ``fedsel_eval.run_episode`` does); it is bound to the env and acts through
        ``predict``.
    :param scores: ``scores(agent, obs) -> (N,)``, the agent's per-client scores (None: not recorded).
    :param oracle_step: also record each client's one-step oracle value with this ``one``-mode step
        (``"1/K"`` or a number; ``agents.one_step_oracle.oracle_scores``: played on copies, the episode is
        unchanged).
    :return: flat arrays over (round, available client): ``round``, ``client``, ``tokens`` (M, T),
        ``score``, ``current_loss``, ``oracle`` (NaN where not recorded), ``picked``; and ``rounds``
        (played) and ``reached`` (Ω reached).
    """
    import torch

    from agents.per_client_net import client_tokens
    from agents.one_step_oracle import one_mode_step, oracle_scores

    obs, _ = env.reset(seed=int(seed))
    agent = make_agent(env.selection_spec, int(seed))
    agent.bind(env)
    if env.selection_spec.action_mode != "topk":
        raise ValueError(f"trace_episode plays the deployed top-K: the env's action_mode is "
                         f"{env.selection_spec.action_mode!r}, expected 'topk'")
    cols: Dict[str, List[np.ndarray]] = {k: [] for k in ("round", "client", "tokens", "score", "current_loss",
                                                         "oracle", "picked")}
    done, t, terminated = False, 0, False
    while not done:
        avail = np.flatnonzero(env.action_masks())
        tok = client_tokens({k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()})[0].numpy()
        s = np.asarray(scores(agent, obs), dtype=np.float64) if scores is not None else np.full(env.num_clients, np.nan)
        loss = env.query_losses(avail) if avail.size else np.zeros(0)  # counted as queries; changes nothing else
        o = oracle_scores(env, one_mode_step(oracle_step, env.k)) if oracle_step is not None else \
            np.full(env.num_clients, np.nan)
        action, _ = agent.predict(obs, deterministic=True)
        picked = np.asarray(action) > -1.0  # top-K actions: the picks score in (0, 1], the others -1
        for key, val in (("round", np.full(avail.size, t)), ("client", avail), ("tokens", tok[avail]),
                         ("score", s[avail]), ("current_loss", np.asarray(loss, dtype=np.float64)),
                         ("oracle", o[avail]), ("picked", picked[avail])):
            cols[key].append(val)
        obs, _, terminated, truncated, _ = env.step(action)
        done, t = bool(terminated or truncated), t + 1
    out = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    out.update(rounds=np.int64(t), reached=np.bool_(terminated))
    return out


def _traces(folder: Path, env_cfg: Mapping[str, Any], policies: Mapping[str, Any], seeds: Sequence[int],
            oracle_step: Any, oracle_for: Mapping[str, Sequence[int]], progress: bool) -> Dict[str, Dict[int, Any]]:
    """Every (policy, seed) trace, one ``.npz`` per episode in ``folder``, reused when its key matches.

    :param policies: label -> (make_agent, scores or None, key material: what identifies the policy).
    :param oracle_for: label -> the seeds whose traces also record the one-step oracle values.
    """
    from fedsel_env.env import FedSelectEnv

    folder.mkdir(parents=True, exist_ok=True)
    env = None
    out: Dict[str, Dict[int, Any]] = {}
    for label, (make_agent, scores, ident) in policies.items():
        out[label] = {}
        for seed in seeds:
            step = oracle_step if seed in oracle_for.get(label, ()) else None
            key = json.dumps({"env": env_cfg, "policy": ident, "oracle_step": step, "version": TRACE_VERSION},
                             sort_keys=True, default=str)
            path = folder / f"{label}_{seed}.npz"
            if path.is_file():
                with np.load(path) as z:
                    if str(z["key"]) == key:
                        out[label][seed] = {k: z[k] for k in z.files if k != "key"}
                        continue
            if env is None:
                env = FedSelectEnv(config=dict(env_cfg))
            tr = trace_episode(env, make_agent, seed, scores, step)
            tmp = folder / f".{label}_{seed}.tmp.npz"
            np.savez_compressed(tmp, key=np.str_(key), **tr)
            tmp.replace(path)
            out[label][seed] = tr
            if progress:
                print(f"traced {label} seed {seed}: {int(tr['rounds'])} rounds", flush=True)
    if env is not None:
        env.close()
    return out


# ============================================================================================ analysis
def _rounds_of(tr: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    """Row indices of each round of a trace."""
    r = np.asarray(tr["round"])
    return [np.flatnonzero(r == t) for t in range(int(tr["rounds"]))]


def episode_stats(tr: Mapping[str, np.ndarray], names: Sequence[str], k: int) -> Dict[str, Any]:
    """One traced episode's per-round statistics, averaged over its rounds.

    :return: ``spearman`` (feature -> mean within-round correlation with the score; NaN: constant in
        every round), ``oracle_spearman`` (the same for the one-step oracle value), ``overlap``
        (reference -> mean share of the picks among its top K), ``random_overlap`` (mean K/N), and the
        pooled within-round standardised rows for the R² fits (``z_score``, ``z_oracle``, ``z_features``).
    """
    feats = {n: i for i, n in enumerate(names)}
    rows = _rounds_of(tr)
    tokens = np.asarray(tr["tokens"], dtype=np.float64)
    extra = {"current_loss": np.asarray(tr["current_loss"], dtype=np.float64),
             "oracle_value": np.asarray(tr["oracle"], dtype=np.float64)}
    sp: Dict[str, List[float]] = {n: [] for n in (*names, *extra)}
    osp: Dict[str, List[float]] = {n: [] for n in (*names, "current_loss")}
    lsp: Dict[str, List[float]] = {n: [] for n in names}
    ov: Dict[str, List[float]] = {n: [] for n in OVERLAPS}
    rand, zs, zo, zl, zx = [], [], [], [], []
    for idx in rows:
        if idx.size == 0:
            continue
        score, oracle = np.asarray(tr["score"])[idx], extra["oracle_value"][idx]
        picks = np.flatnonzero(np.asarray(tr["picked"])[idx])
        for n, i in feats.items():
            sp[n].append(spearman(score, tokens[idx, i]) if np.isfinite(score).all() else math.nan)
            osp[n].append(spearman(oracle, tokens[idx, i]) if np.isfinite(oracle).all() else math.nan)
            lsp[n].append(spearman(extra["current_loss"][idx], tokens[idx, i]))
        for n, v in extra.items():
            sp[n].append(spearman(score, v[idx]) if np.isfinite(score).all() and np.isfinite(v[idx]).all() else math.nan)
        osp["current_loss"].append(spearman(oracle, extra["current_loss"][idx]) if np.isfinite(oracle).all()
                                   else math.nan)
        refs = {"current_loss": extra["current_loss"][idx], "reported_loss": tokens[idx, feats["loss"]],
                "rounds_since_selected": tokens[idx, feats["rounds_since_selected"]], "oracle": oracle}
        for n, v in refs.items():
            ov[n].append(topk_overlap(picks, v, k) if np.isfinite(v).all() else math.nan)
        rand.append(min(k, idx.size) / idx.size)
        if idx.size > 1:
            zx.append(standardise(tokens[idx][:, [feats[n] for n in names]]))
            zs.append(standardise(score) if np.isfinite(score).all() else np.full(idx.size, np.nan))
            zo.append(standardise(oracle) if np.isfinite(oracle).all() else np.full(idx.size, np.nan))
            zl.append(standardise(extra["current_loss"][idx]))

    def mean(v: List[float]) -> float:
        v = [x for x in v if math.isfinite(x)]
        return float(np.mean(v)) if v else math.nan

    return {"spearman": {n: mean(v) for n, v in sp.items()}, "oracle_spearman": {n: mean(v) for n, v in osp.items()},
            "loss_spearman": {n: mean(v) for n, v in lsp.items()},
            "z_current_loss": np.concatenate(zl) if zl else np.zeros(0),
            "overlap": {n: mean(v) for n, v in ov.items()}, "random_overlap": mean(rand),
            "z_score": np.concatenate(zs) if zs else np.zeros(0), "z_oracle": np.concatenate(zo) if zo else np.zeros(0),
            "z_features": np.concatenate(zx) if zx else np.zeros((0, len(names))),
            "rounds": int(tr["rounds"]), "reached": bool(tr["reached"])}


def _interval(values: Sequence[float]) -> Dict[str, Any]:
    return t_interval(values).figures()


#: feature groups of the R² fits
def _groups(names: Sequence[str]) -> Dict[str, List[str]]:
    pca = [n for n in names if n.startswith("pca_")]
    return {"all": list(names), "pca": pca, "server": [n for n in names if n not in pca]}


def summarise(traces: Mapping[str, Mapping[int, Any]], names: Sequence[str], k: int,
              selectors: Sequence[str]) -> Dict[str, Any]:
    """Part 1's numbers from the traces: per feature the within-round Spearman correlation with the
    selectors' scores (and with the one-step oracle values), R² of the linear fits, the pick overlaps.

    Each episode's value is averaged over the ``selectors`` (the training seeds' models) first; the
    intervals are 95% t intervals over the episodes."""
    stats = {lab: {s: episode_stats(tr, names, k) for s, tr in per.items()} for lab, per in traces.items()}
    seeds = sorted(next(iter(traces.values())))

    def over(labels: Sequence[str], get: Any) -> Dict[str, Any]:
        per_seed = [float(np.nanmean([get(stats[lab][s]) for lab in labels])) if any(
            math.isfinite(get(stats[lab][s])) for lab in labels) else math.nan for s in seeds]
        iv = _interval(per_seed)
        iv["per_model"] = {lab: float(np.nanmean([get(stats[lab][s]) for s in seeds]))
                           if any(math.isfinite(get(stats[lab][s])) for s in seeds) else None for lab in labels}
        return iv

    first = stats[selectors[0]][seeds[0]]
    res: Dict[str, Any] = {"features": {}, "oracle_features": {}, "loss_features": {}, "r2": {}, "overlap": {}}
    for n in first["spearman"]:
        res["features"][n] = over(selectors, lambda e, n=n: e["spearman"][n])
    for n in first["loss_spearman"]:  # how much of the current loss's order the token carries (in the selectors' states)
        res["loss_features"][n] = over(selectors, lambda e, n=n: e["loss_spearman"][n])
    has_oracle = any(np.isfinite(stats[lab][s]["z_oracle"]).any() for lab in selectors for s in seeds)
    if has_oracle:
        for n in first["oracle_spearman"]:
            res["oracle_features"][n] = over(selectors, lambda e, n=n: e["oracle_spearman"][n])
    index = {n: i for i, n in enumerate(names)}
    for target in ("score", "current_loss", "oracle") if has_oracle else ("score", "current_loss"):
        res["r2"][target] = {}
        for group, cols in _groups(names).items():
            per_model = {}
            for lab in selectors:
                y = np.concatenate([stats[lab][s][f"z_{target}"] for s in seeds])
                x = np.concatenate([stats[lab][s]["z_features"] for s in seeds])[:, [index[c] for c in cols]]
                ok = np.isfinite(y)
                per_model[lab] = r_squared(y[ok], x[ok]) if ok.sum() > len(cols) + 1 else math.nan
            res["r2"][target][group] = {"mean": float(np.nanmean(list(per_model.values()))), "per_model": per_model}
    for lab_group, labels in (("per_client", list(selectors)),
                              *((lab, [lab]) for lab in traces if lab not in selectors)):
        res["overlap"][lab_group] = {n: over(labels, lambda e, n=n: e["overlap"][n]) for n in OVERLAPS}
        res["overlap"][lab_group]["random_expected"] = over(labels, lambda e: e["random_overlap"])
    res["trace_rounds"] = {lab: [stats[lab][s]["rounds"] for s in seeds] for lab in traces}
    res["constant_features"] = [n for n, v in res["features"].items() if not math.isfinite(v["mean"])]
    return res


# ================================================================================================ main
def main(argv: Sequence[str] = None) -> Path:
    """Run the analysis as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--setting", choices=[s for s in SETTINGS if s != "smoke"], default="digits")
    p.add_argument("--models", nargs="+", default=None, metavar="PATH",
                   help="trained per-client models (run folders or .zip; default: per_client_study's "
                        "runs/repro/per_client_study/<setting>/train/pc_dqn_s{0,1,2})")
    p.add_argument("--no-oracle-values", action="store_true",
                   help="do not record the one-step oracle values in the traced episodes (part 1; the slow part)")
    p.add_argument("--oracle-seeds", type=int, default=None, metavar="N",
                   help="the one-step oracle plays, and its values are recorded on, only the first N seeds (default: "
                        "all; each of its rounds plays every available client ahead: about a second each on "
                        "Fashion-MNIST here)")
    args = p.parse_args(argv)
    if args.oracle_seeds is not None and args.oracle_seeds < 1:
        raise ValueError(f"--oracle-seeds = {args.oracle_seeds} is invalid: expected >= 1")
    setting, clock, out = common.start_setting(NAME, args, args.setting)
    progress = not args.no_progress
    seeds = list(args.seeds) if args.seeds is not None else ([0, 1] if args.smoke else SEEDS)
    oracle_seeds = seeds[:args.oracle_seeds] if args.oracle_seeds is not None else list(seeds)
    cap = SETTINGS[setting]["cap"]

    models = _given_models(setting, args.models)  # checked before anything runs
    env, best = _study_env(setting, out, args.workers, progress)
    if models is None:  # the smoke setting trains its own
        models = _smoke_model(out, env, progress)
    d = _pca_width(models)
    env_pc = {**env, "pca_components": d}

    # 2. rounds to Ω through fedsel_eval: the references, the one-step oracle, the selector (each model, the ensemble)
    base, _, _ = common.evaluate(out.out / "episodes", env, list(REFERENCES), seeds, workers=args.workers,
                                 progress=progress, env_name=setting, plots=False)
    oracle, _, _ = common.evaluate(out.out / "episodes_oracle", env, [ORACLE], oracle_seeds, workers=args.workers,
                                   progress=progress, env_name=setting, plots=False)
    mine = [f"per_client_s{i}={m}" for i, m in enumerate(models)]
    if len(models) > 1:
        mine.append("per_client_ens=per_client:model_path=[" + ",".join(str(m) for m in models) + "]")
    own, _, _ = common.evaluate(out.out / "episodes_per_client", env_pc, mine, seeds, workers=args.workers,
                                progress=progress, env_name=setting, plots=False)
    records = list(base) + list(oracle) + list(own)
    selectors = [f"per_client_s{i}" for i in range(len(models))]
    bound = _bound(records, cap, selectors)

    # 1. what the scores depend on: traces of the deployed selectors (and the references)
    traces = _traces(out.out / "traces", env_pc, _trace_policies(models), seeds, "1/K",
                     {lab: [] if args.no_oracle_values else oracle_seeds for lab in selectors}, progress)
    names = analysed_features(feature_names(d))
    k = int(_spec_k(env_pc))
    part1 = summarise(traces, names, k, selectors)
    # the traces replay the evaluated episodes: the same rounds per seed (a check that they are the deployed ones)
    replay = {lab: [int(r) for r in rounds(records, lab, cap)] == [int(tr["rounds"]) if tr["reached"] else cap
                                                                    for _, tr in sorted(traces[lab].items())]
              for lab in traces}
    res = {"setting": setting, "env": env, "cap": cap, "omega": env["target_accuracy"], "best_heuristic": best,
           "seeds": seeds, "oracle_seeds": oracle_seeds, "K": k, "pca_components": d, "models": [str(m) for m in models],
           "oracle_step": "1/K", "scores": part1, "bound": bound, "traces_replay_evaluation": replay,
           "learning_curves": "not recomputed: per_client_study saves no checkpoints (common.train_dqn, "
                              "--save-freq 0), so a greedy evaluation during training needs new trainings"}
    out.results(res)
    _figure(out, res, names, setting)
    _table(out, res, names, argv, clock)
    print((out.out / "table.md").read_text())
    return out.out


def _study_env(setting: str, out: Any, workers: int, progress: bool) -> Tuple[Dict[str, Any], str]:
    """The study's env (with its Ω) and best heuristic: per_client_study's progress file; for the smoke
    setting, computed here with the study's steps 1-2 (favor_study.target_and_best)."""
    s = SETTINGS[setting]
    if setting == "smoke":
        base = {**s["env"], "max_rounds": s["cap"], "init": "federation", "federation_seed": 0}
        _, _, env, _, best = target_and_best(out, base, ("pow_d",), [0, 1], s["cap"], workers, progress, setting)
        return env, best
    path = common.RESULTS_DIR / f"per_client_study_{setting}_progress.json"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: run per_client_study.py --setting {setting} --part tune first "
                         f"(it calibrates Ω and writes that file)")
    doc = json.loads(path.read_text())
    env = dict(doc["env"])
    if env.get("max_rounds") != s["cap"] or "target_accuracy" not in env:
        raise ValueError(f"{path}: its env (max_rounds {env.get('max_rounds')}, target "
                         f"{env.get('target_accuracy')}) is not per_client_study's {setting!r} setting (cap "
                         f"{s['cap']}): re-run per_client_study.py --setting {setting} --part tune")
    return env, doc["best_heuristic"]


def _given_models(setting: str, given: Optional[Sequence[str]]) -> Optional[List[Path]]:
    """The trained models' .zip files: ``--models``, or per_client_study's; None for the smoke setting
    without ``--models`` (:func:`_smoke_model` trains one)."""
    if given is None and setting == "smoke":
        return None
    if given is None:
        folder = common.RUNS_DIR / "per_client_study" / setting / "train"
        given = [str(folder / f"{ALGO}_s{seed}") for seed in TRAIN_SEEDS]
    zips = []
    for g in given:
        z = Path(g) / "model.zip" if Path(g).is_dir() else Path(g)
        if not z.is_file():
            raise ValueError(f"--models: {g!r} has no trained model (expected a .zip or a run folder with model.zip): "
                             f"train them with per_client_study.py --setting {setting} --part train, or pass "
                             f"--models PATH ...")
        zips.append(z.resolve())
    return zips


def _smoke_model(out: Any, env: Mapping[str, Any], progress: bool) -> List[Path]:
    """One tiny per-client model for the smoke setting, trained here as per_client_study trains (seconds)."""
    s = SETTINGS["smoke"]
    train_env = {**{k: v for k, v in env.items() if k not in ("federation_seed", "init")},
                 "federation_seed": None, "init": "episode", "action_mode": "one", "one_mode_step": "1/K",
                 "observation": "dict", "pca_components": 3}
    run_dir, _, _ = common.train_dqn(out.out / "train" / f"{ALGO}_s0", ALGO, train_env,
                                     {"n_timesteps": s["steps"], "n_envs": 1, "max_rounds": s["cap"],
                                      "hyperparams": SMOKE_TRAIN_HP}, 0, progress)
    return [run_dir / "model.zip"]


def _pca_width(models: Sequence[Path]) -> int:
    """The PCA width the models read (their training env's ``pca_components``; all must agree)."""
    from agents.favor import read_env_config

    widths = {int(read_env_config(m)["pca_components"]) for m in models}
    if len(widths) != 1:
        raise ValueError(f"--models read different PCA widths {sorted(widths)}: analyse models of one training "
                         f"setting together")
    return widths.pop()


def _spec_k(env: Mapping[str, Any]) -> int:
    from fedsel_env.config import make_config

    return int(make_config(dict(env))["clients_per_round"])


def _trace_policies(models: Sequence[Path]) -> Dict[str, Any]:
    """label -> (make_agent(spec, seed), scores, identity) for :func:`_traces`: each model, then pow_d and
    random seeded as fedsel_eval seeds them (``agent_seed``), so every trace replays an evaluated episode."""
    import agents
    from fedsel_eval.policies import _sha256, agent_seed

    pols: Dict[str, Any] = {}
    for i, m in enumerate(models):
        pols[f"per_client_s{i}"] = (lambda spec, seed, m=m: agents.make("per_client", spec, model_path=str(m)),
                                    lambda agent, obs: agent.scores(obs), {"model": str(m), "sha256": _sha256(m)})
    for name in REFERENCES:
        pols[name] = (lambda spec, seed, name=name: agents.make(name, spec, seed=agent_seed(seed)), None,
                      {"agent": name})
    return pols


def _rounds_by_seed(records: Sequence[Mapping[str, Any]], policy: str, cap: int) -> Dict[int, float]:
    """Rounds to Ω per episode seed of one policy (a miss counts as the cap)."""
    eps = common.episodes_of(records, policy)
    return {int(r["seed"]): float(v) for r, v in zip(eps, rounds(records, policy, cap))}


def _bound(records: Sequence[Mapping[str, Any]], cap: int, selectors: Sequence[str]) -> Dict[str, Any]:
    """Part 2: mean rounds to Ω per policy and the paired differences over the seeds both played (95% t
    intervals; the oracle may have played only the first ``--oracle-seeds`` of them)."""
    per = {pol: _rounds_by_seed(records, pol, cap) for pol in (*REFERENCES, "oracle", *selectors)}
    per["per_client"] = {s: float(np.mean([per[m][s] for m in selectors])) for s in per[selectors[0]]}
    names = [*REFERENCES, "per_client", "oracle"]
    if any(r["policy"] == "per_client_ens" for r in records):
        per["per_client_ens"] = _rounds_by_seed(records, "per_client_ens", cap)
        names.insert(3, "per_client_ens")
    shown = [*names, *selectors]
    out: Dict[str, Any] = {"mean_rounds": {n: float(np.mean(list(per[n].values()))) for n in shown},
                           "missed": {n: int(sum(v >= cap for v in per[n].values())) for n in shown
                                      if n != "per_client"},
                           "rounds": {n: {str(s): v for s, v in sorted(per[n].items())} for n in shown},
                           "oracle_seeds": sorted(per["oracle"]), "paired": {}}
    for a, b in (("pow_d", "random"), ("rpow_d", "random"), ("rpow_d", "pow_d"), ("per_client", "random"),
                 ("per_client", "pow_d"), ("per_client", "rpow_d"), ("oracle", "random"),
                 ("oracle", "pow_d"), ("oracle", "per_client"), ("per_client_ens", "random"),
                 ("per_client_ens", "pow_d"), ("oracle", "per_client_ens")):
        if a in per and b in per:
            common_seeds = sorted(set(per[a]) & set(per[b]))
            out["paired"][f"{a}-{b}"] = paired(np.array([per[a][s] for s in common_seeds]),
                                               np.array([per[b][s] for s in common_seeds]))
    return out


# ============================================================================================= outputs
_LABELS = {"random": "random", "pow_d": "pow_d (queries 2K current losses)",
           "rpow_d": "rpow_d (pow_d on the reported losses)", "per_client": "per-client (mean of models)",
           "per_client_ens": "per-client ensemble", "oracle": "one-step oracle"}


def _figure(out: Any, res: Mapping[str, Any], names: Sequence[str], setting: str) -> None:
    """Three panels: the within-round rank correlations per feature, the pick overlaps, rounds to Ω vs random."""
    part, bound = res["scores"], res["bound"]
    fig, axes = common.figure(16.0, 5.8, ncols=3)
    ax = axes[0, 0]
    rows = [n for n, v in part["features"].items() if v["mean"] is not None and math.isfinite(v["mean"])]
    labelled = set()
    for i, n in enumerate(rows):
        for shift, v, fmt, color, what in ((0.0, part["features"][n], "o", "tab:red", "selector's score"),
                                           (0.27, part["oracle_features"].get(n), "s", "tab:blue",
                                            "one-step oracle value"),
                                           (-0.27, part["loss_features"].get(n), "^", "tab:green",
                                            "current loss (pow_d's ranking)")):
            if not v or v["mean"] is None or not math.isfinite(v["mean"]):
                continue
            err = [[v["mean"] - v["lo"]], [v["hi"] - v["mean"]]] if v["lo"] is not None and math.isfinite(v["lo"]) \
                else None
            ax.errorbar(v["mean"], i + shift, xerr=err, fmt=fmt, color=color, capsize=2, markersize=4,
                        label=None if what in labelled else what)
            labelled.add(what)
    ax.axvline(0, color="black", linewidth=1)
    ax.set_xlim(-1.05, 1.05)
    ax.set_yticks(range(len(rows)), rows, fontsize="small")
    ax.invert_yaxis()
    ax.set(title="within-round Spearman with each feature\n(mean over rounds; 95% t CI over episodes)",
           xlabel="rank correlation over the available clients")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    ax = axes[0, 1]
    refs = [r for r in OVERLAPS if part["overlap"]["per_client"][r]["mean"] is not None
            and math.isfinite(part["overlap"]["per_client"][r]["mean"])]
    pols = [p for p in ("per_client", "pow_d", "rpow_d", "random") if p in part["overlap"]]
    width = 0.8 / len(pols)
    for j, pol in enumerate(pols):
        for i, r in enumerate(refs):
            v = part["overlap"][pol][r]
            if v["mean"] is None or not math.isfinite(v["mean"]):
                continue
            ax.bar(i + (j - (len(pols) - 1) / 2) * width, v["mean"], width,
                   yerr=[[v["mean"] - v["lo"]], [v["hi"] - v["mean"]]] if v["n"] > 1 else None, capsize=2,
                   color={"per_client": "tab:red", "pow_d": "tab:green", "rpow_d": "tab:olive",
                          "random": "tab:gray"}[pol],
                   label=_LABELS.get(pol, pol) if i == 0 else None)
    ax.axhline(part["overlap"]["per_client"]["random_expected"]["mean"], color="black", linestyle="--", linewidth=1,
               label="uniform picks: K/N")
    ax.set_xticks(range(len(refs)), [{"rounds_since_selected": "rounds since\nselected", "oracle": "one-step\n"
                                      "oracle value"}.get(r, r.replace("_", " ")) for r in refs], fontsize="small")
    ax.set(title="share of the K picks among the K clients\nranked highest by …", ylabel="share of the picks",
           ylim=(0, 1))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="x-small")
    ax = axes[0, 2]
    pols = [p for p in ("pow_d", "rpow_d", "per_client", "per_client_ens", "oracle") if f"{p}-random" in bound["paired"]]
    for i, pol in enumerate(pols):
        d = bound["paired"][f"{pol}-random"]
        ax.errorbar(d["mean"], i, xerr=[[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]], fmt="o", capsize=3,
                    color={"oracle": "tab:blue", "pow_d": "tab:green", "rpow_d": "tab:olive"}.get(pol, "tab:red"))
        ax.annotate(f"{bound['mean_rounds'][pol]:.1f} rounds", (d["mean"], i), textcoords="offset points",
                    xytext=(0, 7), ha="center", fontsize="x-small")
    ax.axvline(0, color="black", linewidth=1)
    ax.set_yticks(range(len(pols)), [_LABELS.get(p, p) for p in pols], fontsize="small")
    ax.invert_yaxis()
    ax.set(title=f"rounds to Ω = {res['omega']:.2f} vs random ({bound['mean_rounds']['random']:.1f})\n"
                 f"paired by seed, 95% t CI", xlabel="Δ rounds to Ω (a miss counts as the cap)")
    ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{setting}: what the per-client selector's scores depend on, and the one-step bound "
                 f"(seeds {res['seeds'][0]}–{res['seeds'][-1]})")
    out.figure(fig, f"{NAME}_{setting}")


def _iv_text(v: Mapping[str, Any], spec: str = "+.2f", missing: str = "— (constant)") -> str:
    if v["mean"] is None or not math.isfinite(v["mean"]):
        return missing
    if v["lo"] is None or not math.isfinite(v["lo"]):
        return f"{v['mean']:{spec}}"
    return f"{v['mean']:{spec}} [{v['lo']:{spec}}, {v['hi']:{spec}}]"


def _table(out: Any, res: Mapping[str, Any], names: Sequence[str], argv: Sequence[str], clock: Any) -> Path:
    """``table.md`` in the run folder: the numbers, how they were made, the commit (not spliced anywhere)."""
    part, bound = res["scores"], res["bound"]
    lines = [f"**{res['setting']}** (`{json.dumps(res['env'])}`; the per-client models read a "
             f"{res['pca_components']}-component PCA), K = {res['K']}, Ω = {res['omega']:.2f}, round cap "
             f"{res['cap']}, seeds {res['seeds'][0]}–{res['seeds'][-1]}; models: "
             + ", ".join(f"`{Path(m).parent.name}`" for m in res["models"]) + ".\n",
             "What the scores depend on (within-round Spearman correlation over the available clients, the mean "
             "over rounds; 95% t CI over episodes, each averaged over the models; the `z_` columns of the token "
             "rank as their plain columns and are left out):\n"]
    rows = [[f"`{n}`", _iv_text(v), _iv_text(part["oracle_features"][n]) if n in part["oracle_features"] else "—",
             _iv_text(part["loss_features"][n]) if n in part["loss_features"] else "—"]
            for n, v in part["features"].items()]
    lines += [markdown.table(["feature", "with the selector's score", "with the one-step oracle value",
                               "with the current loss"], rows, align="lrrr")]
    for target, what in (("score", "the selector's score"), ("current_loss", "the current loss (what pow_d queries)"),
                         ("oracle", "the one-step oracle value")):
        if target in part["r2"]:
            r = part["r2"][target]
            lines.append(f"- R² of {what} (within-round z-scores, least squares on the within-round z-scored "
                         f"features, pooled over rounds and episodes, mean over the models): all features "
                         f"{r['all']['mean']:.2f}, the PCA columns alone {r['pca']['mean']:.2f}, the server's record "
                         f"alone {r['server']['mean']:.2f}.")
    lines.append("")
    rows = []
    for pol, ov in part["overlap"].items():
        rows.append([_LABELS.get(pol, pol)] + [_iv_text(ov[r], ".2f", "— (not recorded)") for r in OVERLAPS]
                    + [f"{ov['random_expected']['mean']:.2f}"])
    lines += ["Share of each policy's K picks among the K clients ranked highest by (mean over rounds, 95% t CI "
              "over episodes; ties at the K-th value shared out):\n",
              markdown.table(["policy", "current loss", "reported loss", "rounds since selected",
                               "one-step oracle value", "uniform picks (K/N)"], rows, align="lrrrrr")]
    rows = [[_LABELS.get(p, p), f"{bound['mean_rounds'][p]:.1f}",
             "—" if p == "random" else ci_text(bound["paired"][f"{p}-random"]),
             "—" if p == "pow_d" or f"{p}-pow_d" not in bound["paired"] else ci_text(bound["paired"][f"{p}-pow_d"])]
            for p in ("random", *REFERENCES[1:], "per_client", "per_client_ens", "oracle") if p in bound["mean_rounds"]]
    lines += ["Rounds to Ω on the same seeds (fedsel_eval; a miss counts as the cap; paired by seed, 95% t CI):\n",
              markdown.table(["policy", "rounds to Ω", "Δ vs random", "Δ vs pow_d"], rows, align="lrrr")]
    if len(res["oracle_seeds"]) < len(res["seeds"]):
        lines.append(f"- the one-step oracle played (and its values were recorded on) the first {len(res['oracle_seeds'])} "
                     f"seeds only (`--oracle-seeds`): its differences pair those seeds.")
    if "oracle-per_client" in bound["paired"]:
        lines.append(f"- one-step oracle − per-client selector: {ci_text(bound['paired']['oracle-per_client'])}")
    lines.append("- the traces replay the evaluated episodes (same rounds per seed): "
                 + ", ".join(f"{lab} {'yes' if ok else '**no**'}" for lab, ok in res["traces_replay_evaluation"].items()))
    lines.append(f"- learning curves: {res['learning_curves']}.")
    command = common.command_line(f"{NAME}.py", argv)
    lines.append(common.wall_time_note(clock.seconds(), 1, command,
                                       longest=out.invocation(clock.seconds(), command)))
    images = "".join(f"\n![{stem}](img/repro_{stem}.png)\n" for stem in out.figures)
    text = "\n".join(lines).rstrip() + "\n\n" + common.provenance_note(out.provenance) + "\n" + images
    path = out.out / "table.md"
    path.write_text(text)
    return path


if __name__ == "__main__":
    common.run_cli(main, "per_client_analysis.py")
