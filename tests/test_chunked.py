"""fedsel_eval/chunked.py: a run interrupted (paused, out of time, or crashed) and resumed from its
checkpoints ends at the same model, bit for bit, with the same numbers as one that ran straight through,
and those are the numbers fedsel_eval.run_episode gives for that seed with the policy built on that seed's
federation."""
from __future__ import annotations

import pytest

from fedsel_env.env import FedSelectEnv
from fedsel_eval import chunked

#: a small Synthetic(1, 1) federation with q-FedAvg: every part of the state a round changes is exercised
ENV = {"preset": "synthetic", "num_clients": 12, "clients_per_round": 3, "local_epochs": 1, "lr": 0.1,
       "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": 60}, "system": {"availability": 0.9},
       "aggregator": "qfedavg", "aggregator_params": {"q": 1.0}, "target_accuracy": 1.0, "max_rounds": 9,
       "eval_every": 2, "track_improvement": True}


def _spec(seed: int = 3, **env) -> chunked.RunSpec:
    return chunked.RunSpec(run_id="r", env={**ENV, **env}, policy="random_nk", seed=seed)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The reference: one call, no interruption."""
    out = chunked.advance(_spec(), tmp_path_factory.mktemp("straight"), checkpoint_every=2)
    assert out.status == "finished" and out.start_round == 0 and out.rounds_done == 9
    return out.record


def test_paused_and_resumed_runs_end_bit_identical(straight, tmp_path):
    spec = _spec()
    first = chunked.advance(spec, tmp_path, checkpoint_every=2, max_rounds=3)
    assert (first.status, first.rounds_done) == ("paused", 3)
    second = chunked.advance(spec, tmp_path, checkpoint_every=2, max_rounds=4)
    assert (second.status, second.start_round, second.rounds_done) == ("paused", 3, 7)
    last = chunked.advance(spec, tmp_path, checkpoint_every=2)
    assert (last.status, last.start_round) == ("finished", 7)
    assert last.record == straight  # model hash, per-client accuracies, participation, every curve point
    # a finished run asked again returns its record without playing a round
    again = chunked.advance(spec, tmp_path, checkpoint_every=2)
    assert again.record == straight and again.round_seconds == 0.0


def test_a_crash_resumes_from_the_last_checkpoint(straight, tmp_path, monkeypatch):
    spec = _spec()
    real_step, calls = FedSelectEnv.step, {"n": 0}

    def crashing_step(self, action):
        calls["n"] += 1
        if calls["n"] == 7:  # dies in round 7: the checkpoint of round 6 is the last one written
            raise RuntimeError("killed")
        return real_step(self, action)

    monkeypatch.setattr(FedSelectEnv, "step", crashing_step)
    with pytest.raises(RuntimeError, match="killed"):
        chunked.advance(spec, tmp_path, checkpoint_every=3)
    monkeypatch.setattr(FedSelectEnv, "step", real_step)
    resumed = chunked.advance(spec, tmp_path, checkpoint_every=3)
    assert resumed.start_round == 6 and resumed.record == straight


def test_the_deadline_pauses_a_run_after_one_round(tmp_path):
    out = chunked.advance(_spec(), tmp_path, checkpoint_every=100, deadline=0.0)
    assert (out.status, out.rounds_done) == ("paused", 1)
    assert chunked.load_checkpoint(tmp_path, _spec())["state"] is not None


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path):
    chunked.advance(_spec(seed=3), tmp_path, checkpoint_every=2, max_rounds=4)
    other = chunked.advance(_spec(seed=4), tmp_path, checkpoint_every=2, max_rounds=2)
    assert other.start_round == 0
    changed = chunked.advance(_spec(seed=4, lr=0.05), tmp_path, checkpoint_every=2, max_rounds=1)
    assert changed.start_round == 0


def test_the_policy_samples_by_its_own_federations_sizes():
    for seed in (3, 4):
        env, policy, _, info = chunked.start(_spec(seed=seed))
        assert policy.spec.num_samples.tolist() == list(info["num_samples"])
    assert len({tuple(chunked.start(_spec(seed=s))[3]["num_samples"]) for s in (3, 4)}) == 2  # sizes differ


def test_a_run_gives_what_run_episode_gives_for_its_seed(straight):
    import fedsel_eval

    env = FedSelectEnv(config=dict(ENV))
    env.reset(seed=3)  # the policy on the seed's federation's spec, as the run builds it
    policy = fedsel_eval.build_policy(fedsel_eval.parse_policy("random_nk"), env.selection_spec, 3)
    ref = fedsel_eval.run_episode(env, policy, 3)
    assert straight["clients"]["accuracy"] == ref["clients"]["accuracy"]
    assert straight["clients"]["participation"] == ref["clients"]["participation"]
    assert straight["metrics"]["final_accuracy"] == ref["metrics"]["final_accuracy"]
    assert straight["metrics"]["acc_var_1e4"] == ref["metrics"]["acc_var_1e4"]
    # the curve keeps the evaluated rounds (every eval_every-th and the last)
    assert straight["curve"]["round"] == [0, 2, 4, 6, 8, 9]
    assert straight["curve"]["accuracy"] == [ref["curves"]["accuracy"][r] for r in straight["curve"]["round"]]


@pytest.mark.slow
def test_worker_processes_give_the_same_runs(straight, tmp_path):
    specs = [chunked.RunSpec(run_id=f"r{i}", env=dict(ENV), policy="random_nk", seed=3) for i in range(2)]
    seen = []
    outs = chunked.run_all(specs, lambda s: tmp_path / s.run_id, checkpoint_every=4, workers=2,
                           on_outcome=seen.append)
    assert sorted(o.run_id for o in outs) == ["r0", "r1"] and len(seen) == 2
    assert all(o.status == "finished" and o.record == straight for o in outs)
    # past the deadline nothing starts
    assert chunked.run_all(specs, lambda s: tmp_path / "late" / s.run_id, 4, workers=1, deadline=0.0) == []


def test_bad_checkpoint_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every"):
        chunked.advance(_spec(), tmp_path, checkpoint_every=0)
