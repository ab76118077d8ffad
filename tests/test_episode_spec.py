"""An evaluated agent is built from its own episode's federation (found by the #20 work: it was built
before the reset, so with ``federation_seed: null`` it read the previous federation's sample counts)."""
from __future__ import annotations

import numpy as np

import agents
import fedsel_eval
from agents.random_selection import RandomAgent
from fedsel_env.spec import FEATURE_INDEX

SEEN = []


class SpecChecker(RandomAgent):
    """Random selection that records whether its spec's n_k are the observed federation's."""

    name = "spec_checker"

    def select(self, obs):
        observed = obs["clients"][:, FEATURE_INDEX["num_samples"]]  # n_k / max n_k, as the server sees it
        mine = self.spec.num_samples / self.spec.num_samples.max()
        SEEN.append(bool(np.allclose(observed, mine, atol=1e-6)))
        return super().select(obs)


def test_each_episode_builds_its_agent_from_its_own_federation(tmp_path):
    agents.AGENTS.register("spec_checker")(SpecChecker)
    try:
        env = {"num_clients": 6, "clients_per_round": 2, "max_rounds": 2, "model": "logreg",
               "samples_per_client": 30, "quantity_skew": 1.0,
               "federation_seed": None, "target_accuracy": 0.99}
        fedsel_eval.run(tmp_path / "ev", env=env, policies=["spec_checker"], seeds=[0, 1, 2], progress=False,
                        plots=False)
    finally:
        agents.AGENTS.pop("spec_checker", None)
    assert len(SEEN) == 6 and all(SEEN), SEEN
