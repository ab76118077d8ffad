"""The reset cache (issue #43, fedsel_env/reset_cache.py): a reset restored from the cache is the reset played again,
bit for bit, whatever the federation holds (attackers, stragglers, drop-outs, churn, label noise, q-FedAvg's and
FedMGDA+'s server state, FAVOR's fixed federation), in the single env and across a vector env's sub-envs."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from fedsel_env.env import FedSelectEnv
from fedsel_env.reset_cache import ResetCache, state_bytes
from fedsel_env.vector import FedSelectVectorEnv


def _tiny(**extra):
    cfg = {"preset": "tiny", "num_clients": 8, "clients_per_round": 3, "max_rounds": 5, "target_accuracy": 1.0,
           "model": "mlp", "model_params": {"hidden": 8}, "dataset": "digits", "samples_per_client": None}
    cfg.update(extra)
    return cfg


CONFIGS = {
    "attackers_stragglers_qfedavg": _tiny(aggregator="qfedavg", aggregator_params={"q": 1.0},
                                          adversary={"attacker_fraction": 0.25, "loss_scale": 2.0, "dropout": 0.2,
                                                     "straggler_fraction": 0.25, "deadline": 6.0}),
    "churn_fedmgda": _tiny(aggregator="fedmgda+", system={"availability": [0.5, 0.9, 1.0, 0.7, 0.6, 1.0, 0.8, 0.4]}),
    "label_noise_krum": _tiny(dataset_params={"noisy_clients": 0.25}, aggregator="krum",
                              adversary={"attacker_fraction": 0.25}),
    "favor_fixed_federation": _tiny(federation_seed=3, init="federation"),
}


def _episode(env, seed, steps=4):
    """reset(seed) then ``steps`` rounds of scores drawn from a fixed generator: every output, pickled."""
    out = [env.reset(seed=seed)]
    rng = np.random.default_rng(11)
    for _ in range(steps):
        res = env.step(rng.random(env.num_clients).astype(np.float32))
        out.append(res)
        if res[2] or res[3]:
            break
    out.append(env.federation.global_params.numpy().tobytes())
    return pickle.dumps(out)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_cached_reset_plays_the_episode_of_a_fresh_one(name):
    cfg = CONFIGS[name]
    cached = FedSelectEnv(config=cfg)
    first = _episode(cached, 7)
    _episode(cached, 2)  # another federation in between: the env holds another one when the hit comes
    assert cached.reset_cache.stats()["entries"] == 2 and cached.reset_cache.hits == 0
    again = _episode(cached, 7)
    assert cached.reset_cache.hits == 1
    plain = FedSelectEnv(config=cfg)
    plain.reset_cache = ResetCache(0)
    assert again == first == _episode(plain, 7)
    assert plain.reset_cache.stats() == {"entries": 0, "bytes": 0, "hits": 0, "misses": 0}


def test_a_hit_leaves_torch_and_the_env_generator_as_a_fresh_reset_does():
    env = FedSelectEnv(config=_tiny())
    torch.manual_seed(5)
    env.reset(seed=4)
    after_fresh = (torch.get_rng_state().clone(), env.np_random.bit_generator.state)
    torch.manual_seed(5)
    env.reset(seed=4)
    assert env.reset_cache.hits == 1
    assert torch.equal(torch.get_rng_state(), after_fresh[0])
    assert env.np_random.bit_generator.state == after_fresh[1]


def test_the_key_is_the_seeds_not_the_reset_seed_alone():
    """FAVOR's fixed federation: every reset seed plays the same federation, but the episode's own draws differ."""
    env = FedSelectEnv(config=CONFIGS["favor_fixed_federation"])
    assert env.reset_key(1) != env.reset_key(2)
    assert env.reset_key(1) == env.reset_key(1) == FedSelectEnv(config=CONFIGS["favor_fixed_federation"]).reset_key(1)
    assert env.reset_key(None) is None
    assert FedSelectEnv(config=_tiny(max_rounds=6)).reset_key(1) != FedSelectEnv(config=_tiny()).reset_key(1)
    env.reset(seed=1, options={"note": 1})  # reset options: not cached
    assert len(env.reset_cache) == 0


def test_vector_env_plays_each_key_once_and_equals_single_envs():
    cfg = CONFIGS["attackers_stragglers_qfedavg"]
    seeds = [5, 5, 9, 5, 9, 3]
    venv = FedSelectVectorEnv(len(seeds), config=cfg, autoreset_mode="disabled")
    try:
        got = venv.reset_some(dict(enumerate(seeds)))
        assert venv._reset_cache.stats()["misses"] == 3 and venv._reset_cache.hits == 3
        rng = np.random.default_rng(1)
        acts = {i: rng.random(8).astype(np.float32) for i in range(len(seeds))}
        stepped = venv.step_some(acts)
        for i, s in enumerate(seeds):
            ref = FedSelectEnv(config=cfg)
            ref.reset_cache = ResetCache(0)
            want = ref.reset(seed=s)
            assert pickle.dumps(got[i]) == pickle.dumps(want)
            assert pickle.dumps(stepped[i]) == pickle.dumps(ref.step(acts[i]))
        # Gymnasium's reset: the batched observation equals the fresh one's
        obs, _ = venv.reset(seed=[5, 9, 9, 5, 3, 3])
        ref = FedSelectEnv(config=cfg)
        ref.reset_cache = ResetCache(0)
        for i, s in enumerate([5, 9, 9, 5, 3, 3]):
            want = ref.reset(seed=s)[0]
            for part in want:
                assert np.array_equal(obs[part][i], want[part])
    finally:
        venv.close()


def test_the_budget_drops_the_least_recently_used():
    arr = lambda n: np.zeros(n, dtype=np.uint8)  # noqa: E731
    cache = ResetCache(250)
    assert cache.put("a", {"x": arr(100)}) and cache.put("b", [arr(100)])
    cache.get("a")
    assert cache.put("c", (arr(100),))
    assert "a" in cache and "c" in cache and "b" not in cache and cache.bytes == 200
    assert not cache.put("big", arr(251)) and "big" not in cache
    shared = arr(100)
    assert state_bytes({"p": shared, "q": [shared]}) == 100
    with pytest.raises(ValueError, match="max_bytes"):
        ResetCache(-1)
    with pytest.raises(ValueError, match="max_bytes"):
        ResetCache(1.5)
