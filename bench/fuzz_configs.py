"""Fuzz the config boundary with hostile configs (issue #30): every one must be a ``ValueError`` naming its field,
raised in under a second.

    python bench/fuzz_configs.py                 # 1,200 configs, seed 0
    python bench/fuzz_configs.py --n 5000 --seed 3

Each case is hostile on purpose, in one of five families, written as a YAML file, a ``KEY=VALUE`` value
(``evaluate.py`` / ``train_agent.py --env-kwargs``) or a Python dict (``gym.make(config=...)``):

- ``alias_bomb``: YAML aliases (or shared Python lists) expanding to 9^6..9^10 items, in a random field;
- ``deep``: 33 to 5,000 nested lists or mappings;
- ``huge_int``: integers of 2,500 to 20,000 digits, either sign, in a numeric field;
- ``plugin``: import paths that miss the plug-in's interface or misbehave (``os:system``, ``subprocess:Popen``,
  a module that calls ``sys.exit`` or raises on import, one whose model returns no ``nn.Module``, ...);
- ``long_text``: over-long YAML text and values;
- ``bad_value`` (issue #44): one number or one name a field reads, made hostile — an integer of 309 to 2,400
  digits (beyond float's range, under the 8,192-bit limit), either sign; NaN, ±inf; a bool; -0.0 where the
  range starts at 0; a list or an array of two where one name or number is expected — in the numeric and
  name fields of the config, its ``system`` and ``adversary`` mappings and the registered components'
  parameters (the component chosen beside it), the env built (``gym.make``) so that the components check theirs.

A case passes when it raises ``ValueError`` whose message names the case's field, within ``--limit``
seconds (default 1). The script prints each family's count and slowest case, and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import gymnasium as gym
import numpy as np

import fedsel_env  # noqa: F401  (registers the env ids)
from fedsel_env.config import make_config, parse_yaml

#: Fields a hostile value goes into (top-level name, path inside it).
FIELDS = [("flat_parts", ()), ("system", ("availability",)), ("adversary", ("attackers",)),
          ("model_params", ("hidden",)), ("partition_params", ("sigma",)), ("aggregator_params", ("q",)),
          ("reward_params", ("xi",)), ("dataset_params", ("root",)), ("num_clients", ()), ("max_rounds", ()),
          ("lr", ()), ("clients_per_round", ())]
PLUGIN_FIELDS = ("model", "dataset", "partition", "aggregator", "reward")
PLUGIN_PATHS = ("os:system", "os:sep", "builtins:eval", "builtins:exec", "subprocess:Popen", "sys:exit",
                "json:loads", "math:pi", "os.path:join", "no_such_module_xyz:thing", "fuzz_plugins:exits",
                "fuzz_plugins_exit:x", "fuzz_plugins_raise:x", "fuzz_plugins:not_a_module_result",
                "fuzz_plugins:raises", "fuzz_plugins:NoAggregate", "fuzz_plugins:missing", "collections:OrderedDict")
PLUGIN_SOURCES = {
    "fuzz_plugins.py": ("import sys\n"
                        "def exits(*a, **k):\n    sys.exit(4)\n"
                        "def not_a_module_result(input_shape, num_classes):\n    return 3\n"
                        "def raises(a, b, c=None, d=None):\n    raise KeyError('boom')\n"
                        "class NoAggregate:\n    pass\n"),
    "fuzz_plugins_exit.py": "import sys\nsys.exit(5)\n",
    "fuzz_plugins_raise.py": "raise RuntimeError('plug-in module failed on import')\n",
}
TINY = {"num_clients": 4, "clients_per_round": 2, "max_rounds": 2}

#: ``bad_value``'s fields: (path, the config beside it, the list the value sits in ("" when alone; {v} marks it),
#: whether its range starts at 0 (so -0.0 is hostile), whether it is a name, the text its refusal must name).
_SYN = {"dataset": "synthetic", "partition": "natural", "partition_params": {}}
BAD_VALUE_FIELDS: List[Tuple[Tuple[str, ...], Dict[str, Any], str, bool, bool, str]] = [
    (("test_fraction",), {}, "", False, False, "test_fraction"),
    (("quantity_skew",), {}, "", True, False, "quantity_skew"),
    (("lr",), {}, "", False, False, "lr"),
    (("momentum",), {}, "", True, False, "momentum"),
    (("target_accuracy",), {}, "", False, False, "target_accuracy"),
    (("one_mode_step",), {"action_mode": "one"}, "", False, False, "one_mode_step"),
    (("system", "noise_std"), {}, "", True, False, "system.noise_std"),
    (("system", "availability"), {}, "", False, False, "system.availability"),
    (("system", "classes"), {}, "[[{v}, 1, 1]]", True, False, "system.classes"),
    (("system", "cpu_share"), {}, "[{v}, 2.0]", False, False, "system.cpu_share"),
    (("system", "bandwidth"), {}, "[1.0, {v}]", False, False, "system.bandwidth"),
    (("system", "availability"), {}, "[{v}, 1, 1, 1]", False, False, "system.availability"),
    *[(("adversary", f), {}, "", zero, False, f"adversary.{f}")
      for f, zero in (("attacker_fraction", True), ("loss_scale", True), ("loss_shift", False),
                      ("update_scale", False), ("update_bias", True), ("dropout", True), ("straggler_fraction", True),
                      ("straggler_scale", False), ("straggler_shape", False), ("deadline", False))],
    (("dataset_params", "alpha"), _SYN, "", True, False, "dataset_params.alpha"),
    (("dataset_params", "beta"), _SYN, "", True, False, "dataset_params.beta"),
    (("dataset_params", "noisy_clients"), {}, "", True, False, "dataset_params.noisy_clients"),
    (("partition_params", "sigma"), {"partition": "sigma"}, "", False, False, "sigma"),
    (("partition_params", "alpha"), {"partition": "dirichlet"}, "", False, False, "alpha"),
    (("model_params", "hidden"), {"model": "mlp"}, "", False, False, "hidden"),
    (("aggregator_params", "q"), {"aggregator": "qfedavg"}, "", True, False, "'q'"),
    (("aggregator_params", "mu"), {"aggregator": "fedprox"}, "", True, False, "'mu'"),
    (("aggregator_params", "epsilon"), {"aggregator": "fedmgda+"}, "", True, False, "'epsilon'"),
    (("aggregator_params", "beta"), {"aggregator": "trimmed_mean"}, "", True, False, "'beta'"),
    (("aggregator_params", "max_norm"), {"aggregator": "norm_clipping"}, "", False, False, "max_norm"),
    (("reward_params", "xi"), {"reward": "favor"}, "", False, False, "xi"),
    (("reward_params", "scale"), {"reward": "accuracy_gain"}, "", False, False, "scale"),
    (("reward_params", "time_weight"), {"reward": "time_penalised"}, "", True, False, "time_weight"),
    (("observation",), {}, "", False, True, "observation"),
    (("action_mode",), {}, "", False, True, "action_mode"),
    (("init",), {}, "", False, True, "init"),
    (("adversary", "straggler_distribution"), {}, "", False, True, "adversary.straggler_distribution"),
    (("dataset_params", "label_noise"), {}, "", False, True, "dataset_params.label_noise"),
    (("aggregator_params", "weighting"), {"aggregator": "fedavg"}, "", False, True, "weighting"),
    (("aggregator_params", "solver"), {"aggregator": "fedmgda+"}, "", False, True, "solver"),
    (("reward_params", "objective"), {"reward": "objective"}, "", False, True, "objective"),
]


def _nest(path: Tuple[str, ...], value: Any) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


def _yaml_nest(path: Tuple[str, ...], text: str) -> str:
    for key in reversed(path):
        text = "{" + key + ": " + text + "}"
    return text


def alias_bomb(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    field, path = FIELDS[rng.integers(len(FIELDS))]
    levels, width = int(rng.integers(6, 11)), int(rng.integers(9, 12))
    if form == "dict":
        a: Any = ["x"] * width
        for _ in range(levels):
            a = [a] * width
        return field, lambda: make_config({field: _nest(path, a)})
    items = [f"&l0 [{','.join(['x'] * width)}]"]
    items += [f"&l{i} [{','.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    value = _yaml_nest(path, "[" + ", ".join(items) + "]")
    if form == "kv":
        from fedsel_eval.params import parse_params

        return field, lambda: make_config(parse_params([f"{field}={value}"], "--env-kwargs"))
    return field, lambda: make_config(parse_yaml(f"{field}: {value}\n", "config file 'fuzz.yml'"))


def deep(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    field, path = FIELDS[rng.integers(len(FIELDS))]
    depth = int(rng.choice([33, 40, 100, 1000, 3000, 5000]))
    if form == "dict":
        v: Any = []
        for _ in range(depth):
            v = [v] if rng.random() < 0.5 else {"a": v}
        return field, lambda: make_config({field: _nest(path, v)})
    text = "[" * depth + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "1" + "}" * depth
    value = _yaml_nest(path, text)
    if form == "kv":
        from agents.training.cli import parse_key_values

        return field, lambda: make_config(parse_key_values([f"{field}={value}"], "env-kwargs"))
    return field, lambda: make_config(parse_yaml(f"{field}: {value}\n", "config file 'fuzz.yml'"))


def huge_int(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    field, path = FIELDS[rng.integers(len(FIELDS))]
    digits = int(rng.choice([2500, 4301, 5000, 20000]))
    sign = "-" if rng.random() < 0.3 else ""
    if form == "dict":
        n = int(sign + "9" * digits) if digits <= 4300 else (-1 if sign else 1) * 10 ** digits
        return field, lambda: make_config({field: _nest(path, n)})
    value = _yaml_nest(path, sign + "7" * digits)
    if form == "kv":
        from fedsel_eval.params import parse_params

        return field, lambda: make_config(parse_params([f"{field}={value}"], "--env-kwargs"))
    return field, lambda: make_config(parse_yaml(f"{field}: {value}\n", "config file 'fuzz.yml'"))


def _fill(template: Any, value: Any) -> Any:
    """``template`` (nested lists) with its ``"MARK"`` replaced by ``value``."""
    if isinstance(template, list):
        return [_fill(t, value) for t in template]
    return value if template == "MARK" else template


def bad_value(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    path, beside, shape, from_zero, is_name, named = BAD_VALUE_FIELDS[rng.integers(len(BAD_VALUE_FIELDS))]
    kinds = ["array"] if is_name else ["big", "nan", "inf", "bool", "array"] + (["-0.0"] if from_zero else [])
    kind = kinds[rng.integers(len(kinds))]
    digits = int(rng.integers(309, 2401))
    sign = "-" if rng.random() < 0.3 else ""
    py: Any = {"big": int(sign + "9" * digits), "nan": float("nan"), "inf": float(sign + "inf"),
               "bool": bool(rng.random() < 0.5), "-0.0": -0.0,
               "array": (np.array(["dict", "flat"]) if is_name else np.array([0.5, 0.5]))}[kind]
    text = {"big": sign + "9" * digits, "nan": ".nan", "inf": sign + ".inf", "bool": str(py).lower(), "-0.0": "-0.0",
            "array": "[dict, flat]" if is_name else "[0.5, 0.5]"}[kind]
    if shape:  # the value inside a list (system.classes, cpu_share, ...): the same list around it in each form
        py = _fill(parse_yaml(shape.format(v="MARK"), "fuzz value"), py)
        text = shape.format(v=text)

    def build(overrides: Dict[str, Any]) -> None:
        gym.make("fedsel/FedSelect-Tiny-v0", config={**TINY, **overrides}).reset(seed=0)

    if form == "dict":
        return named, lambda: build({**beside, path[0]: _nest(path[1:], py)})
    value = _yaml_nest(path[1:], text)
    if form == "kv":
        from fedsel_eval.params import parse_params

        items = [f"{k}={v}" for k, v in beside.items() if isinstance(v, str)] + [f"{path[0]}={value}"]
        items += [f"{k}={{}}" for k, v in beside.items() if v == {}]
        return named, lambda: build(parse_params(items, "--env-kwargs"))
    lines = "".join(f"{k}: {v if isinstance(v, str) else '{}'}\n" for k, v in beside.items())
    return named, lambda: build(parse_yaml(lines + f"{path[0]}: {value}\n", "config file 'fuzz.yml'"))


def plugin(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    field = PLUGIN_FIELDS[rng.integers(len(PLUGIN_FIELDS))]
    path = PLUGIN_PATHS[rng.integers(len(PLUGIN_PATHS))]
    return field, lambda: gym.make("fedsel/FedSelect-Tiny-v0", config={**TINY, field: path}).reset(seed=0)


def long_text(rng: np.random.Generator, form: str) -> Tuple[str, Callable[[], Any]]:
    field, path = FIELDS[rng.integers(len(FIELDS))]
    n = int(rng.choice([5 << 20, 6 << 20]))
    if form == "dict":
        return field, lambda: make_config({field: _nest(path, "x" * n)})
    return field, lambda: make_config(parse_yaml(f"{field}: " + "x" * n + "\n", f"config field {field!r}"))


FAMILIES: Dict[str, Callable[[np.random.Generator, str], Tuple[str, Callable[[], Any]]]] = {
    "alias_bomb": alias_bomb, "deep": deep, "huge_int": huge_int, "plugin": plugin, "long_text": long_text,
    "bad_value": bad_value}
FORMS = ("yaml", "kv", "dict")


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def fuzz(n: int, seed: int = 0, limit: float = 1.0, hang: int = 20) -> Dict[str, Any]:
    """Run ``n`` hostile configs; return the counts, times and failures (each a dict)."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as plugins:
        for name, src in PLUGIN_SOURCES.items():
            (Path(plugins) / name).write_text(src)
        sys.path.insert(0, plugins)
        gym.make("fedsel/FedSelect-Tiny-v0", config=TINY).reset(seed=0)  # imports and data loaded: not timed
        old = signal.signal(signal.SIGALRM, _alarm)
        stats: Dict[str, List[float]] = {f: [] for f in FAMILIES}
        failures: List[Dict[str, Any]] = []
        try:
            for i in range(n):
                family = list(FAMILIES)[i % len(FAMILIES)]
                form = FORMS[rng.integers(len(FORMS))]
                field, case = FAMILIES[family](rng, form)
                start = time.perf_counter()
                signal.alarm(hang)
                try:
                    case()
                    outcome, message = "accepted", ""
                except ValueError as e:
                    outcome, message = "ValueError", str(e)
                except _Timeout:
                    outcome, message = "hang", f"over {hang} s"
                except BaseException as e:  # noqa: BLE001 - anything else (SystemExit included) is a failure
                    outcome, message = type(e).__name__, str(e)[:300]
                finally:
                    signal.alarm(0)
                seconds = time.perf_counter() - start
                stats[family].append(seconds)
                ok = outcome == "ValueError" and field in message and seconds < limit and len(message) < 5000
                if not ok:
                    failures.append({"case": i, "family": family, "form": form, "field": field, "outcome": outcome,
                                     "seconds": round(seconds, 3), "message": message[:300]})
        finally:
            signal.signal(signal.SIGALRM, old)
            sys.path.remove(plugins)
    return {"n": n, "seed": seed, "limit_s": limit, "failures": failures,
            "families": {f: {"count": len(t), "max_s": round(max(t), 3) if t else None,
                             "median_s": round(float(np.median(t)), 4) if t else None} for f, t in stats.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1200, help="how many configs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=float, default=1.0, help="seconds a refusal may take")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = fuzz(args.n, args.seed, args.limit)
    print(json.dumps(report["families"], indent=1))
    print(f"{args.n} hostile configs in {time.perf_counter() - start:.1f} s: {args.n - len(report['failures'])} "
          f"ValueErrors naming the field in < {args.limit:g} s, {len(report['failures'])} failures")
    for f in report["failures"][:20]:
        print(json.dumps(f))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
