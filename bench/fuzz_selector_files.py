"""Fuzz the learned-selector file readers with hostile files (issue #44): every one must be a ``ValueError``, none
may hang, and nothing may allocate over 1 GiB.

    python bench/fuzz_selector_files.py                 # 1,200 files, seed 0
    python bench/fuzz_selector_files.py --n 3000 --seed 3

Files are generated in three formats, a third each, from a good file of each (written by this repo's own code,
and loaded first as a control: it must load), mutated at random:

- ``set_es``: ``set_es.json`` with weights of every JSON type (strings, bools, null, lists, ``10**400``, ``±1e308``,
  NaN / Infinity literals), fields missing or of another type, top-level arrays / strings / numbers, nesting 33 to
  200,000 deep, oversized (sparse) files, truncations, byte flips, non-UTF-8 bytes; read by ``agents.set_es.
  load_policy``;
- ``set_distill``: a folder whose metadata has bad ``hidden`` (``-1``, 0, ``10**6``, ``10**30``, floats, strings),
  PCA widths and flags, or whose ``.pt`` is truncated, flipped, holds a pickle payload, NaN / inf / huge tensors,
  tensors of other shapes, a list, or a legacy storage declaring 2**40 elements; read by ``agents.set_distill.
  load_model``;
- ``sb3_zip``: a Stable-Baselines3 zip whose ``data`` entry is too deep, not an object, unpacks to 80 MiB, or whose
  pickled entries are hostile: ``bytearray(n)``, numpy ``_reconstruct`` / ``ndarray`` of huge shapes,
  ``copyreg._reconstructor`` of them, numpy ``scalar`` of a 1 GiB dtype, an allow-listed class called
  (``Linear(10**5, 10**5)``, ``BatchNorm1d(10**10)``), a ``torch`` legacy storage that declares more bytes than it
  carries, a space of 2**31+ numbers (a Box's shape, a Discrete's n), huge ``net_arch`` / ``hidden``, random byte flips and truncations of good
  pickles; read by ``agents.saved_models.load_model`` (the safe path: restricted unpickler).

The files are loaded one after another in **one worker process whose address space is capped** (``RLIMIT_AS``) at
1 GiB over its size after its imports, each under a ``--hang``-second alarm. A case passes when it raises
``ValueError`` (or, for a blind byte flip or cut that happened to leave a valid file, when it loads: counted
apart); a ``MemoryError`` (the cap hit), any other exception, a hang or a crash of the worker fails it. The
script prints each format's count, failures and slowest case, and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FORMATS = ("set_es", "set_distill", "sb3_zip")
#: blind mutations (random byte flips, cuts) that may leave a valid file: loading it is right, and counted apart
BLIND_KINDS = ("flip", "cut", "pt_flip", "pt_cut")
#: JSON texts of hostile values, spliced in place of a weight
HOSTILE_VALUES = ['"0.1"', "true", "null", "[]", "{}", "[0.1]", "1" + "0" * 400, "-" + "9" * 330, "1e308", "-1e308",
                  "NaN", "Infinity", "-Infinity", "1e999", '"NaN"', "1" * 5000, "0x10", '""']


# ============================================================================================ generators
def _flip(rng: np.random.Generator, raw: bytes, k: int = 8) -> bytes:
    b = bytearray(raw)
    for _ in range(int(rng.integers(1, k + 1))):
        if b:
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
    return bytes(b)


def _cut(rng: np.random.Generator, raw: bytes) -> bytes:
    return raw[: int(rng.integers(0, max(len(raw), 1)))]


def set_es_case(rng: np.random.Generator, folder: Path, good: Dict[str, Any]) -> str:
    """One hostile ``set_es.json`` in ``folder``; its kind."""
    folder.mkdir(parents=True)
    path = folder / "set_es.json"
    names = list(good["params"])
    kind = str(rng.choice(["value", "missing", "top", "deep", "big", "cut", "flip", "utf8", "params_type", "queries"]))
    text = json.dumps(good)
    if kind == "value":
        doc = json.loads(text)
        for n in rng.choice(names, size=int(rng.integers(1, 4)), replace=False):
            doc["params"][str(n)] = f"@@{n}@@"
        text = json.dumps(doc)
        for n in names:
            text = text.replace(f'"@@{n}@@"', str(rng.choice(HOSTILE_VALUES)))
    elif kind == "missing":
        doc = json.loads(text)
        doc.pop("params") if rng.random() < 0.5 else doc["params"].pop(str(rng.choice(names)))
        text = json.dumps(doc)
    elif kind == "top":
        text = str(rng.choice(["[1, 2, 3]", '"set_es"', "3.5", "null", "true", "[" + text + "]"]))
    elif kind == "deep":
        d = int(rng.choice([33, 100, 1000, 100_000, 200_000]))
        opener, closer = ("[", "]") if rng.random() < 0.5 else ('{"a":', "}")
        inner = opener * d + "1" + closer * d
        text = inner if rng.random() < 0.5 else text.replace('"params"', f'"deep": {inner}, "params"')
    elif kind == "big":
        with open(path, "wb") as f:  # sparse: size by stat, no disk
            f.truncate(int(rng.choice([5 << 20, 1 << 30, 8 << 30])))
        return kind
    elif kind == "cut":
        path.write_bytes(_cut(rng, text.encode()))
        return kind
    elif kind == "flip":
        path.write_bytes(_flip(rng, text.encode()))
        return kind
    elif kind == "utf8":
        path.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
        return kind
    elif kind == "params_type":
        doc = json.loads(text)
        doc["params"] = json.loads(str(rng.choice(['[0.5, 0.5]', '"w"', "1", "null"])))
        text = json.dumps(doc)
    elif kind == "queries":
        doc = json.loads(text)
        doc["queries"] = json.loads(str(rng.choice(['"2"', "-1", "1e9", "true", "2.5", "[2]", "100000"])))
        text = json.dumps(doc)
    path.write_text(text)
    return kind


def _legacy_storage_payload(numel: int) -> bytes:
    """A legacy ``torch.save`` stream of one float storage whose header declares ``numel`` elements."""
    import torch

    buf = io.BytesIO()
    torch.save(torch.zeros(4).untyped_storage(), buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    return raw.replace(pickle.dumps(16, protocol=2)[2:-1], pickle.dumps(numel, protocol=2)[2:-1], 1)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo fuzz-payload-ran",))


def set_distill_case(rng: np.random.Generator, folder: Path, good: Path) -> str:
    """One hostile ``set_distill`` folder (a copy of ``good``, mutated); its kind."""
    import shutil

    import torch

    shutil.copytree(good, folder)
    meta_path, pt = folder / "set_distill.json", folder / "set_distill.pt"
    meta = json.loads(meta_path.read_text())
    kind = str(rng.choice(["hidden", "meta_field", "meta_json", "pt_cut", "pt_flip", "pt_payload", "pt_values",
                           "pt_shape", "pt_type", "pt_legacy"]))
    if kind == "hidden":
        meta["hidden"] = json.loads(str(rng.choice(["-1", "0", "1000000", "1" + "0" * 30, "8.0", '"8"', "null",
                                                     "true", "[8]", "4097"])))
        if rng.random() < 0.2:
            meta.pop("hidden")
    elif kind == "meta_field":
        field = str(rng.choice(["pca_components", "n_features", "cover_features"]))
        meta[field] = json.loads(str(rng.choice(["-3", '"5"', "1e400", "null", "[1]", "99", "2.5", '"yes"'])))
        if rng.random() < 0.2 and field != "cover_features":  # cover_features may be left out (false)
            meta.pop(field)
    elif kind == "meta_json":
        meta_path.write_bytes(str(rng.choice(["[1]", "[" * 50_000, "{", "\xff"])).encode("latin-1"))
        return kind
    elif kind == "pt_cut":
        pt.write_bytes(_cut(rng, pt.read_bytes()))
    elif kind == "pt_flip":
        pt.write_bytes(_flip(rng, pt.read_bytes(), 32))
    elif kind == "pt_payload":
        torch.save({"encoder.phi.0.weight": _Payload()}, pt)
    elif kind == "pt_values":
        state = torch.load(pt, weights_only=True)
        key = sorted(state)[int(rng.integers(len(state)))]
        state[key] = state[key].clone().fill_(float(rng.choice([math.nan, math.inf, -math.inf, 1e30, -1e10])))
        torch.save(state, pt)
    elif kind == "pt_shape":
        state = torch.load(pt, weights_only=True)
        key = sorted(state)[int(rng.integers(len(state)))]
        shape = tuple(int(x) for x in rng.integers(1, 9, size=int(rng.integers(1, 3))))
        state[key] = torch.zeros(*(shape if shape != tuple(state[key].shape) else (*shape, 2)))  # another shape
        if rng.random() < 0.3:
            state.pop(key)
        torch.save(state, pt)
    elif kind == "pt_type":
        torch.save(rng.choice(["list", "tensor", "int"]) == "list" and [torch.zeros(2)] or torch.zeros(3), pt)
    elif kind == "pt_legacy":
        pt.write_bytes(_legacy_storage_payload(int(rng.choice([2**40, 2**33, 10**12]))))
    meta_path.write_text(json.dumps(meta))
    return kind


def _hostile_pickle(rng: np.random.Generator) -> Tuple[str, bytes]:
    """A pickle that asks an allow-listed global to allocate without bound (a few bytes of input)."""
    big = int(rng.choice([2**31, 2**33, 2**36, 10**12]))
    kind = str(rng.choice(["bytearray", "reconstruct", "ndarray", "reconstructor", "linear", "batchnorm",
                           "legacy_storage", "box_shape", "newobj_ndarray", "scalar"]))
    p4 = b"\x80\x04"
    if kind == "bytearray":
        return kind, p4 + b"cbuiltins\nbytearray\n" + pickle.dumps(big, protocol=4)[2:-1] + b"\x85R."
    if kind == "reconstruct":
        mod = rng.choice([b"numpy.core.multiarray", b"numpy._core.multiarray"])
        return kind, (p4 + b"c" + mod + b"\n_reconstruct\ncnumpy\nndarray\n" + pickle.dumps((big,), protocol=4)[2:-1]
                      + b"C\x01b\x87R.")
    if kind == "scalar":  # numpy's scalar of a dtype of 1 GiB (or 2 GB of S): that many bytes, no data needed
        mod = rng.choice([b"numpy.core.multiarray", b"numpy._core.multiarray"])
        spec = pickle.dumps(("V", 2**30) if rng.random() < 0.5 else "S2000000000", protocol=4)[2:-1]
        return kind, p4 + b"c" + mod + b"\nscalar\ncnumpy\ndtype\n" + spec + b"\x85R\x85R."
    if kind == "ndarray":
        return kind, p4 + b"cnumpy\nndarray\n" + pickle.dumps((big,), protocol=4)[2:-1] + b"\x85R."
    if kind == "newobj_ndarray":
        return kind, p4 + b"cnumpy\nndarray\n" + pickle.dumps((big,), protocol=4)[2:-1] + b"\x85\x81."
    if kind == "reconstructor":
        return kind, (p4 + b"ccopyreg\n_reconstructor\ncbuiltins\nbytearray\ncbuiltins\nbytearray\n"
                      + pickle.dumps(big, protocol=4)[2:-1] + b"\x87R.")
    if kind == "linear":
        return kind, (p4 + b"ctorch.nn.modules.linear\nLinear\n" + pickle.dumps(10**5, protocol=4)[2:-1]
                      + pickle.dumps(10**5, protocol=4)[2:-1] + b"\x86R.")
    if kind == "batchnorm":
        return kind, (p4 + b"ctorch.nn.modules.batchnorm\nBatchNorm1d\n" + pickle.dumps(10**10, protocol=4)[2:-1]
                      + b"\x85R.")
    if kind == "legacy_storage":
        payload = _legacy_storage_payload(int(rng.choice([2**33, 2**40])))
        return kind, (p4 + b"ctorch.storage\n_load_from_bytes\n" + pickle.dumps(payload, protocol=4)[2:-1]
                      + b"\x85R.")
    import gymnasium

    if rng.random() < 0.5:  # a Box of a huge shape (its bounds small): the network's input
        space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
        field, value = "_shape", (big,)
    else:  # a Discrete of a huge n: a Q-network's output
        space, field, value = gymnasium.spaces.Discrete(3), "n", np.int64(big)
    state = dict(space.__dict__)
    state[field] = value
    obj = type(space).__new__(type(space))
    obj.__dict__.update(state)
    return kind, pickle.dumps(obj, protocol=4)


BOMB = b" " * (80 << 20)


def sb3_zip_case(rng: np.random.Generator, path: Path, good: Path) -> str:
    """One hostile SB3 zip at ``path`` (``good`` with its ``data`` entry mutated); its kind."""
    with zipfile.ZipFile(good) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    data = json.loads(entries["data"])
    serialized = [k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v]
    kind = str(rng.choice(["pickle", "pickle", "pickle", "flip", "cut", "deep", "top", "net_arch", "bomb"]))
    if kind == "pickle":
        kind, raw = _hostile_pickle(rng)
        key = str(rng.choice(["observation_space", "action_space"]) if kind == "box_shape" else rng.choice(serialized))
        data[key][":serialized:"] = base64.b64encode(raw).decode()
    elif kind in ("flip", "cut"):
        key = str(rng.choice(serialized))
        raw = base64.b64decode(data[key][":serialized:"])
        raw = _flip(rng, raw, 6) if kind == "flip" else _cut(rng, raw)
        data[key][":serialized:"] = base64.b64encode(raw).decode()
    elif kind == "deep":
        entries["data"] = ("[" * int(rng.choice([40, 5000, 100_000]))).encode()
    elif kind == "top":
        entries["data"] = str(rng.choice(["[1]", '"x"', "7", "null"])).encode()
    elif kind == "net_arch":
        data["policy_kwargs"] = {"net_arch": [int(rng.choice([10**5, 10**7, -1, 0]))]} if rng.random() < 0.7 else \
            {"net_arch": [8], "features_extractor_kwargs": {"hidden": 10**6}}
    elif kind == "bomb":  # a data entry that unpacks to 80 MiB (over the 64 MiB a data entry may be) from ~80 KB
        entries["data"] = BOMB
    if kind not in ("deep", "top", "bomb"):
        entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, b in entries.items():
            z.writestr(n, b)
    return kind


# ============================================================================================ the worker
WORKER = r'''
import json, resource, signal, sys, time, traceback
sys.path.insert(0, sys.argv[1])
import numpy, torch, gymnasium
from stable_baselines3 import DQN
from agents.set_es import load_policy
from agents.set_distill import load_model as load_distill, observation_space_for
from agents.saved_models import load_model
from fedsel_env.env import FedSelectEnv
spec = FedSelectEnv(preset="tiny").selection_spec
space = observation_space_for(spec.num_clients, spec.pca_components, len(spec.client_features))
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
cap = vm + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
class Hang(Exception):
    """A load that ran past the alarm."""
def alarm(signum, frame):
    raise Hang()
signal.signal(signal.SIGALRM, alarm)
hang = int(sys.argv[3])
print(json.dumps({"cap_bytes": cap, "base_bytes": vm}), flush=True)
for line in open(sys.argv[2]):
    case = json.loads(line)
    print(json.dumps({"start": case["i"]}), flush=True)
    t = time.perf_counter()
    signal.alarm(hang)
    try:
        if case["format"] == "set_es":
            load_policy(case["path"], spec)
        elif case["format"] == "set_distill":
            load_distill(case["path"], space)
        else:
            load_model(DQN, case["path"], device="cpu")
        outcome = "loaded"
    except Hang:
        outcome = "hang"
    except ValueError as e:
        outcome = "ValueError"
    except BaseException as e:
        outcome = type(e).__name__ + ": " + str(e)[:300]
    finally:
        signal.alarm(0)
    print(json.dumps({"i": case["i"], "outcome": outcome, "seconds": time.perf_counter() - t}), flush=True)
'''


def _good_files(root: Path) -> Tuple[Dict[str, Any], Path, Path]:
    """A good set_es policy, set_distill folder and SB3 zip, written by this repo's code."""
    import gymnasium
    from stable_baselines3 import DQN

    from agents.set_distill import SetScorer, observation_space_for, save_model
    from agents.set_es import param_names
    from fedsel_env.env import FedSelectEnv

    spec = FedSelectEnv(preset="tiny").selection_spec
    good_es = {"params": {n: round(float(v), 3) for n, v in zip(param_names(spec), np.linspace(-1, 1, 16))},
               "queries": 0, "generations": 5}
    space = observation_space_for(spec.num_clients, spec.pca_components, len(spec.client_features))
    distill = save_model(SetScorer(space, hidden=8), root / "good_distill",
                         {"hidden": 8, "pca_components": spec.pca_components, "n_features": len(spec.client_features)})
    zip_path = root / "good.zip"
    DQN("MlpPolicy", gymnasium.make("CartPole-v1"), learning_starts=0, buffer_size=10,
        policy_kwargs={"net_arch": [8]}).save(zip_path)
    return good_es, distill, zip_path


def generate(n: int, seed: int, root: Path) -> List[Dict[str, Any]]:
    """``n`` hostile files under ``root``, a third of each format (the good ones first, as controls)."""
    rng = np.random.default_rng(seed)
    good_es, good_distill, good_zip = _good_files(root)
    (root / "good_es").mkdir()
    (root / "good_es" / "set_es.json").write_text(json.dumps(good_es))
    cases = [{"i": -3, "format": "set_es", "kind": "control", "path": str(root / "good_es")},  # must load
             {"i": -2, "format": "set_distill", "kind": "control", "path": str(good_distill)},
             {"i": -1, "format": "sb3_zip", "kind": "control", "path": str(good_zip)}]
    for i in range(n):
        fmt = FORMATS[i % len(FORMATS)]
        where = root / f"case{i:05d}"
        if fmt == "set_es":
            kind = set_es_case(rng, where, good_es)
        elif fmt == "set_distill":
            kind = set_distill_case(rng, where, good_distill)
        else:
            where = where.with_suffix(".zip")
            kind = sb3_zip_case(rng, where, good_zip)
        cases.append({"i": i, "format": fmt, "kind": kind, "path": str(where)})
    return cases


def fuzz(n: int, seed: int = 0, hang: int = 20, root: Any = None) -> Dict[str, Any]:
    """Generate ``n`` files, load them in the capped worker; per format: count, failures, slowest case."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        tmp = Path(tmp)
        cases = generate(n, seed, tmp)
        listing = tmp / "cases.jsonl"
        listing.write_text("".join(json.dumps(c) + "\n" for c in cases))
        t0 = time.perf_counter()
        results: Dict[int, Dict[str, Any]] = {}
        header: Dict[str, Any] = {}
        todo = list(cases)
        crashes = []
        while todo:  # a worker crash fails its case; the rest go on in a new worker
            listing.write_text("".join(json.dumps(c) + "\n" for c in todo))
            proc = subprocess.run([sys.executable, "-c", WORKER, str(ROOT), str(listing), str(hang)],
                                  capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            started = None
            for line in proc.stdout.splitlines():
                msg = json.loads(line)
                if "cap_bytes" in msg:
                    header = msg
                elif "start" in msg:
                    started = msg["start"]
                else:
                    results[msg["i"]] = msg
                    started = None
            if started is not None:
                results[started] = {"i": started, "outcome": f"worker crashed (exit {proc.returncode}): "
                                                             f"{proc.stderr.strip()[-300:]}", "seconds": math.nan}
                crashes.append(started)
            elif proc.returncode != 0 and not results:
                raise RuntimeError(f"the fuzz worker failed before any case: {proc.stderr[-2000:]}")
            todo = [c for c in todo if c["i"] not in results]
        seconds = time.perf_counter() - t0
    report: Dict[str, Any] = {"n": n, "seed": seed, "seconds": seconds, "cap_bytes": header.get("cap_bytes"),
                              "base_bytes": header.get("base_bytes"), "formats": {}, "failures": []}
    for c in cases:
        r = results[c["i"]]
        if c["kind"] == "control":  # the good files: they must load, or the fuzz would prove nothing
            if r["outcome"] != "loaded":
                report["failures"].append({**c, "outcome": f"the good file did not load: {r['outcome']}"})
            continue
        f = report["formats"].setdefault(c["format"], {"count": 0, "failures": 0, "loaded": 0, "kinds": {},
                                                       "slowest_s": 0.0})
        f["count"] += 1
        f["kinds"][c["kind"]] = f["kinds"].get(c["kind"], 0) + 1
        if math.isfinite(r["seconds"]):
            f["slowest_s"] = max(f["slowest_s"], r["seconds"])
        if r["outcome"] == "loaded" and c["kind"] in BLIND_KINDS:  # a blind mutation that left a valid file
            f["loaded"] += 1
        elif r["outcome"] != "ValueError":
            f["failures"] += 1
            report["failures"].append({**c, "outcome": r["outcome"]})
    return report


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1200, help="how many files (a third of each format)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang", type=int, default=20, help="seconds a case may take before it counts as a hang")
    args = parser.parse_args(argv)
    report = fuzz(args.n, args.seed, args.hang)
    cap = report["cap_bytes"] - report["base_bytes"]
    print(f"{args.n} hostile learned-selector files in {report['seconds']:.1f} s, loaded in one worker capped at "
          f"{cap / 2**30:.0f} GiB over its {report['base_bytes'] / 2**30:.2f} GiB after imports (RLIMIT_AS):")
    for name, f in report["formats"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(f["kinds"].items()))
        print(f"  {name}: {f['count']} files, {f['count'] - f['failures'] - f['loaded']} ValueError, "
              f"{f['loaded']} still valid after a blind flip or cut (loaded), {f['failures']} other; "
              f"slowest {f['slowest_s']:.2f} s ({kinds})")
    for fail in report["failures"][:20]:
        print(f"  FAIL case {fail['i']} ({fail['format']}/{fail['kind']}): {fail['outcome']}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
