"""``FedSelectVectorEnv`` (issue #27): E federations in one batched simulator, each sub-env the single env.

Each sub-env's trajectory (observations, rewards, terminated / truncated, every ``info`` entry) must equal
the single env's with the same seed, config and actions, bit for bit, through Gymnasium's autoresets: in
every action mode, with availability, drop-outs, stragglers past a deadline, attackers and every
aggregator, for logistic regression and the MLP (whose local training the vector env fuses across
sub-envs). Also: ``make_vec`` returns it, it agrees with ``SyncVectorEnv``, the autoreset modes, masks,
actions checked before anything moves, and the memory refusal naming the E that fits.
"""
import numpy as np
import pytest

import gymnasium as gym

import fedsel_env  # noqa: F401
from fedsel_env.env import FedSelectEnv
from fedsel_env.vector import FedSelectVectorEnv

UNRELIABLE = {"system": {"availability": 0.5},
              "adversary": {"dropout": 0.2, "straggler_fraction": 0.25, "deadline": 6.0,
                            "attacker_fraction": 0.25, "update_scale": 3.0, "loss_scale": 0.5}}
AGGREGATORS = [("fedavg", {}), ("qfedavg", {"q": 1.0}), ("fedprox", {"mu": 0.1}), ("qfedsgd", {"q": 1.0}),
               ("fedmgda+", {})]
STEPS = 9  # tiny episodes last 5 rounds: every sub-env ends an episode and autoresets


def _same(a, b, approx: float = 0.0) -> bool:
    """Equal bit for bit; with ``approx`` > 0, floats within ``approx`` of the array's scale (integers, flags
    and ids still exactly), and the PCA coordinates (a dict's ``weights``) within 10% of theirs, as the golden
    trajectories allow (tests/golden.py: near-equal singular values turn the axes with the last bits)."""
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same(a[k], b[k], 0.1 if approx and k == "weights" else approx) for k in a)
    if isinstance(a, (list, tuple)) and not isinstance(a, np.ndarray):
        return len(a) == len(b) and all(_same(x, y, approx) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:  # info entries batched as object arrays (lists per sub-env)
        return a.shape == b.shape and all(_same(x, y, approx) for x, y in zip(a.ravel(), b.ravel()))
    if approx and a.dtype.kind == "f" and a.shape == b.shape:
        finite = np.abs(a[np.isfinite(a)])
        scale = float(finite.max()) if finite.size else 0.0
        return bool(np.allclose(a, b, rtol=0.0, atol=approx * max(scale, 1e-12), equal_nan=True))
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _replay(cfg, seed, actions, preset):
    """What one sub-env should see: the single env under Gymnasium's next-step autoreset."""
    env = FedSelectEnv(config=cfg, preset=preset)
    obs, info = env.reset(seed=seed)
    out, ended = [(obs, 0.0, False, False, info)], False
    for a in actions:
        if ended:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info))
            ended = False
        else:
            out.append(env.step(a))
            ended = out[-1][2] or out[-1][3]
    env.close()
    return out


def _check_against_single(configs, preset, steps=STEPS, seed=3, approx: float = 0.0):
    venv = FedSelectVectorEnv(configs=configs, preset=preset)
    venv.action_space.seed(seed)
    obs, info = venv.reset(seed=seed)
    got = [(obs, np.zeros(venv.num_envs), np.zeros(venv.num_envs, bool), np.zeros(venv.num_envs, bool), info)]
    actions = []
    for _ in range(steps):
        actions.append(venv.action_space.sample())
        got.append(venv.step(actions[-1]))
    venv.close()
    ends = 0
    for i, cfg in enumerate(configs):
        want = _replay(cfg, seed + i, [a[i] for a in actions], preset)
        for t, (w, g) in enumerate(zip(want, got)):
            w_obs, w_r, w_te, w_tr, w_info = w
            g_obs, g_r, g_te, g_tr, g_info = g
            assert _same(w_obs, {k: v[i] for k, v in g_obs.items()} if isinstance(g_obs, dict) else g_obs[i],
                         approx), (i, t)
            assert _same(w_r, g_r[i], approx) and w_te == g_te[i] and w_tr == g_tr[i], (i, t)
            for key, value in w_info.items():
                assert g_info[f"_{key}"][i] and _same(value, g_info[key][i], approx), (i, t, key)
            ends += int(w_te or w_tr)
    return ends


@pytest.mark.parametrize("action_mode", ["one", "topk", "subset"])
def test_every_sub_env_is_the_single_env_every_aggregator_unreliable_clients(action_mode):
    """Five sub-envs, one per aggregator (so also configs that differ), with availability 0.5, drop-outs,
    stragglers past a deadline and attackers scaling their updates and forging their losses."""
    configs = [{"action_mode": action_mode, "aggregator": agg, "aggregator_params": params, **UNRELIABLE}
               for agg, params in AGGREGATORS]
    assert _check_against_single(configs, "tiny") >= len(configs)  # every sub-env autoreset at least once


@pytest.mark.parametrize("momentum,aggregator", [(0.0, "fedavg"), (0.5, "fedprox")])
def test_mlp_sub_envs_trained_together_are_the_single_env(momentum, aggregator):
    """The MLP's local SGD of all sub-envs in one fused call (different federations, momentum, FedProx)."""
    small = {"num_clients": 8, "clients_per_round": 3, "max_rounds": 3, "samples_per_client": 30,
             "model_params": {"hidden": 16}, "momentum": momentum, "aggregator": aggregator,
             "aggregator_params": {"mu": 0.1} if aggregator == "fedprox" else {}, "system": {"availability": 0.7}}
    configs = [dict(small), dict(small, federation_seed=5), dict(small, action_mode="one", one_mode_step="1/K")]
    # the third has another action space: only the first two together, the third against itself
    _check_against_single(configs[:2], "default", steps=5)
    _check_against_single([configs[2], configs[2]], "default", steps=5)
    _check_against_single([dict(small, federation_seed=5)] * 2, "default", steps=5)  # one federation's data


def test_make_vec_returns_it_and_it_agrees_with_sync_vector_env():
    cfg = {"action_mode": "topk", **UNRELIABLE}
    ours = gym.make_vec("fedsel/FedSelect-Tiny-v0", num_envs=3, config=cfg)
    sync = gym.make_vec("fedsel/FedSelect-Tiny-v0", num_envs=3, vectorization_mode="sync", config=cfg)
    assert isinstance(ours, FedSelectVectorEnv) and not isinstance(sync, FedSelectVectorEnv)
    assert ours.single_observation_space == sync.single_observation_space
    assert ours.action_space == sync.action_space
    ours.action_space.seed(1)
    a = [ours.action_space.sample() for _ in range(STEPS)]
    results = []
    for envs in (ours, sync):
        out = [envs.reset(seed=11)]
        out += [envs.step(act) for act in a]
        envs.close()
        results.append(out)
    for t, (x, y) in enumerate(zip(*results)):
        assert len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y)), t


def test_same_step_and_disabled_autoreset():
    cfg = {"max_rounds": 2}
    same = FedSelectVectorEnv(2, preset="tiny", config=cfg, autoreset_mode="same_step")
    same.reset(seed=0)
    act = np.ones((2, 8), dtype=np.float32)
    same.step(act)
    obs, _, te, tr, info = same.step(act)
    assert (te | tr).all() and info["_final_obs"].all()
    assert not np.array_equal(info["final_obs"][0]["progress"], obs["progress"][0])  # a fresh episode's
    assert obs["progress"][0][0] == 0.0
    same.close()
    off = FedSelectVectorEnv(2, preset="tiny", config=cfg, autoreset_mode="disabled")
    off.reset(seed=0)
    off.step(act)
    off.step(act)
    with pytest.raises(ValueError, match="reset_mask"):
        off.step(act)
    off.reset(options={"reset_mask": np.array([True, True])})
    off.step(act)
    off.close()


def test_masks_and_a_bad_action_changes_nothing():
    cfg = {"action_mode": "subset", "system": {"availability": 0.5}}
    venv = FedSelectVectorEnv(2, preset="tiny", config=cfg)
    twin = FedSelectVectorEnv(2, preset="tiny", config=cfg)
    venv.reset(seed=4)
    twin.reset(seed=4)
    masks = venv.action_masks()
    assert masks.shape == (2, 8) and masks.dtype == bool
    assert all(np.array_equal(masks[i], e.action_masks()) for i, e in enumerate(venv.envs))
    good = np.zeros((2, 8), dtype=np.int8)
    good[:, 0] = 1
    bad = good.copy()
    bad[1] = 1  # more than K = 3 marks in sub-env 1
    with pytest.raises(ValueError, match="sub-env 1"):
        venv.step(bad)
    assert _same(venv.step(good), twin.step(good))  # the rejected step moved no sub-env
    venv.close()
    twin.close()


def test_bad_arguments_and_memory_refusal(monkeypatch):
    import fedsel_env.vector as vector

    with pytest.raises(ValueError, match="num_envs"):
        FedSelectVectorEnv(0, preset="tiny")
    with pytest.raises(ValueError, match="one config per sub-env"):
        FedSelectVectorEnv(3, configs=[{}, {}], preset="tiny")
    with pytest.raises(ValueError, match="workers: 1"):
        FedSelectVectorEnv(2, preset="tiny", config={"workers": 2})
    with pytest.raises(ValueError, match="space differs"):
        FedSelectVectorEnv(configs=[{}, {"num_clients": 9}], preset="tiny")
    once, per_env = vector.env_bytes(FedSelectEnv(preset="tiny"))
    monkeypatch.setattr(vector, "memory_budget", lambda: once + 10 * per_env + 1)
    with pytest.raises(ValueError, match=r"num_envs = 64 .* use num_envs <= 10"):
        FedSelectVectorEnv(64, preset="tiny")
    FedSelectVectorEnv(10, preset="tiny").close()


def test_sub_envs_on_one_federation_share_its_data():
    venv = FedSelectVectorEnv(3, preset="tiny", config={"federation_seed": 2})
    venv.reset(seed=0)
    x = [e.federation.trainer.x for e in venv.envs]
    assert all(t.data_ptr() == x[0].data_ptr() for t in x)  # one copy, read by every sub-env
    venv.close()
    other = FedSelectVectorEnv(2, preset="tiny")  # a federation per episode: each its own
    other.reset(seed=0)
    assert other.envs[0].federation.trainer.x.data_ptr() != other.envs[1].federation.trainer.x.data_ptr()
    other.close()


def test_chunked_training_changes_nothing(monkeypatch):
    """With a memory bound of one byte every request is trained in a call of its own: the same trajectories."""
    import fedsel_env.vector_training as vector_training

    monkeypatch.setattr(vector_training, "CHUNK_BYTES", 1)
    cfg = {"preset": "synthetic", "num_clients": 12, "clients_per_round": 4, "max_rounds": 3, "local_epochs": 1}
    configs = [dict(cfg, aggregator="fedprox", aggregator_params={"mu": 0.1}) for _ in range(3)]
    for c in configs:
        c.pop("preset")
    _check_against_single(configs, "synthetic", steps=4)


@pytest.mark.parametrize("preset,cfg", [("default", {"system": {"availability": 1.0}}),
                                        ("tiny", {"num_clients": 12, "samples_per_client": 60})])
def test_batched_loss_and_evaluation_passes_change_nothing(monkeypatch, preset, cfg):
    """The loss and evaluation passes of all sub-envs as batched forwards (on by default on a GPU only; forced on
    here): the same trajectories bit for bit, and the passes really were batched and checked."""
    import fedsel_env.vector_training as vector_training

    monkeypatch.setattr(vector_training, "PASSES_ON_CPU", True)
    monkeypatch.setattr(vector_training, "_EXACT", {})
    batched = []
    together = vector_training._forward_together
    monkeypatch.setattr(vector_training, "_forward_together",
                        lambda key, reqs, *a: batched.append(len(reqs)) or together(key, reqs, *a))
    _check_against_single([dict(cfg)] * 4, preset, steps=4)
    assert batched and max(batched) == 4 and vector_training._EXACT and all(vector_training._EXACT.values())


def test_batched_passes_whose_results_differ_run_one_by_one(monkeypatch):
    """A batched product that rounds differently from the single one (another BLAS, another device): the first
    check finds it, that shape runs one by one from then on, and the trajectories stay the single env's."""
    import torch

    import fedsel_env.vector_training as vector_training

    monkeypatch.setattr(vector_training, "PASSES_ON_CPU", True)
    monkeypatch.setattr(vector_training, "_EXACT", {})
    baddbmm = torch.baddbmm
    monkeypatch.setattr(torch, "baddbmm", lambda *a, **k: baddbmm(*a, **k) * (1 + 2**-20))
    _check_against_single([{"system": {"availability": 1.0}}] * 3, "default", steps=3)
    assert vector_training._EXACT and not any(vector_training._EXACT.values())


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (bench/gpu_check.sh runs it)")
def test_cuda_sub_envs_are_the_single_env():
    """On a GPU: the fused training of all sub-envs and their batched loss and evaluation passes (on by default
    there) against the single env on the same device. Not bit for bit there: the single env replays its rounds
    from CUDA graphs in fixed shapes, the vector env trains every sub-env's clients in one eager call, and
    cuBLAS picks its kernels by batch count (an H200 differed in the first observation's PCA coordinates);
    floats to 1e-4 of their scale (the PCA coordinates 10%), everything discrete exactly."""
    _check_against_single([{"device": "cuda", "system": {"availability": 1.0}}] * 3, "default", steps=4, approx=1e-4)
    _check_against_single([{"device": "cuda", "action_mode": "one"}] * 2, "tiny", steps=STEPS, approx=1e-4)


def test_shared_builds_give_one_object_and_leave_the_generator_where_a_build_would():
    """sim/data.py's SharedBuilds: within the block the same config from the same generator state is one
    FederatedData, and the generator ends where its own build would have left it; outside, builds are fresh.
    The vector env's sub-envs playing one seed share that federation's data."""
    from fedsel_env.config import make_config
    from fedsel_env.sim.data import SharedBuilds, build_federated_data, sharing_builds

    cfg = make_config({}, preset="tiny")
    alone = np.random.default_rng([7, 1])
    own = build_federated_data(cfg, alone)
    shared = SharedBuilds()
    with sharing_builds(shared):
        g1, g2 = np.random.default_rng([7, 1]), np.random.default_rng([7, 1])
        a, b = build_federated_data(cfg, g1), build_federated_data(cfg, g2)
    assert a is b and a is not own and torch_equal(a.x_train, own.x_train)
    assert g1.bit_generator.state == g2.bit_generator.state == alone.bit_generator.state
    assert build_federated_data(cfg, np.random.default_rng([7, 1])) is not a  # outside the block: a fresh build

    venv = FedSelectVectorEnv(3, preset="tiny")
    venv.reset_some({0: 5, 1: 5, 2: 6})
    x = [e.federation.trainer.x for e in venv.envs]
    assert x[0] is x[1] and x[2] is not x[0]
    venv.close()


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))
