"""The federation simulator (docs/SPEC.md §3): it knows nothing of Gymnasium, observations or rewards.

- ``data.py``, ``partitions.py`` — the datasets and how they are cut among clients (``DATASETS``, ``PARTITIONS``);
- ``models.py`` — the networks (``MODELS``); ``training.py`` — the K selected clients' local SGD, vmapped;
  ``parallel.py`` — a round's training and evaluation shared with worker processes (``workers``);
- ``system.py`` — RBCS-F's system model: contexts, availability, exchange times, the clock;
- ``adversary.py`` — the clients' behaviour: honest, or attackers and unreliable clients (two hooks);
- ``aggregators/`` — the aggregation backends (``AGGREGATORS``);
- ``federation.py`` — :class:`Federation`: ``start`` / ``open_round`` / ``play_round`` → ``RoundReport``.

The env (``fedsel_env/env.py``) and the Flower strategy build on it; nothing here imports them.
"""
