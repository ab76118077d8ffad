"""fedsel_eval/rl_curves.py (issue #41): an SB3 run's training curve read in env rounds and the objective's units,
a resumed run's second TensorBoard folder continuing the first, and a folder without events refused by name."""
from __future__ import annotations

import pytest

from fedsel_eval import rl_curves


def _write(folder, points, tag=rl_curves.TAG):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder))
    for step, value in points:
        w.add_scalar(tag, value, step)
    w.close()


def test_the_return_becomes_the_objective_in_rounds(tmp_path):
    _write(tmp_path / "tb" / "PC_DQN_1", [(500, -30.0), (1000, -25.0)])
    _write(tmp_path / "tb" / "PC_DQN_2", [(1500, -20.0)])  # a resumed run goes on in a second folder
    # one client a step at K = 5: a step is 0.2 rounds; rounds to the target is minus the return
    assert rl_curves.read_curve(tmp_path, 0.2, lower_is_better=True) == [(100.0, 30.0), (200.0, 25.0), (300.0, 20.0)]
    assert rl_curves.read_curve(tmp_path, 1.0, lower_is_better=False)[0] == (500.0, -30.0)
    # in the one mode the reward is −1 a pick: rounds to the target are the picks over K
    assert rl_curves.read_curve(tmp_path, 0.2, True, value_scale=0.2)[0] == (100.0, 6.0)
    rows = rl_curves.curve_rows(tmp_path, 1.0, True, scenario="S", design="d", training_seed=3)
    assert rows[-1] == {"scenario": "S", "design": "d", "training_seed": 3, "role": "curve", "rounds": 1500.0,
                        "objective": 20.0}
    assert not any("policy" in r or "value" in r for r in rows)  # no episode summary can select a curve point


def test_missing_events_or_tag_are_refused_naming_the_folder(tmp_path):
    with pytest.raises(ValueError, match="no TensorBoard events"):
        rl_curves.read_curve(tmp_path, 1.0, True)
    _write(tmp_path / "tb" / "PPO_1", [(10, 1.0)], tag="train/loss")
    with pytest.raises(ValueError, match="rollout/ep_rew_mean"):
        rl_curves.read_curve(tmp_path, 1.0, True)


def test_plot_draws_one_panel_per_scenario(tmp_path):
    rows = [{"scenario": s, "design": "pl_ppo", "training_seed": t, "rounds": r, "objective": 20.0 - r / 1000}
            for s in ("A", "B") for t in (0, 1) for r in (512, 1024, 2048)]
    refs = {"A": {"random": 25.0, "kcenter_cover (best heuristic)": 21.0, "set_es": None, "oracle (lookahead)": 19.0}}
    path = rl_curves.plot_curves(rows, refs, {"A": ("rounds_to_target", True), "B": ("rounds_to_target", True)},
                                 tmp_path / "c.png")
    assert path.stat().st_size > 1000
