"""What ``train_agent.py`` is built from: one module per job, read in the order the script uses them.

- :mod:`~agents.training.trainers` — the trainer registry: every design (``set_es``, ``set_es_q``, ``set_distill``,
  ``set_distill_cover``) and SB3 algorithm by name, one signature; :mod:`~agents.training.set_es` and
  :mod:`~agents.training.set_distill` train the designs, :mod:`~agents.training.sb3` the SB3 algorithms (steps 4-8);
- :mod:`~agents.training.cli` — the arguments (:class:`~agents.training.cli.Args`) and their parser;
- :mod:`~agents.training.algorithms` — what training asks of the algorithms' table (``agents/deploy.py``);
- :mod:`~agents.training.hyperparams` — ``configs/<algo>.yml`` (rl-zoo3 style), checked and turned into kwargs;
- :mod:`~agents.training.envs` — the training env config (checked against the algorithm) and the vector envs;
- :mod:`~agents.training.settings` — :func:`~agents.training.settings.prepare`: all of a run's settings, checked
  before anything is built (``train_agent.py`` and ``experiments/common.py`` call it);
- :mod:`~agents.training.runs` — the run folder: its settings files, its checkpoints, resuming from them;
- :mod:`~agents.training.callbacks` — evaluation of the deployed agent, consistent atomic checkpoints;
- :mod:`~agents.training.atomic` — files written through a temp file and ``os.replace``.
- :mod:`~agents.training.zoo` — rl-zoo3 with FAVOR and fedsel's search space (``python -m agents.training.zoo``;
  not used by ``train_agent.py``).
"""
