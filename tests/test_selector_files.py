"""Learned-selector files are checked as ``ValueError``s naming the file and the field (issue #44).

Each reproducer of the issue: ``set_es.json`` (a ``10**400`` weight, no ``params``, a top-level list, 100k nested
``[``, ``±1e308``, bad JSON, an oversized file, a ``"0.1"`` string), a ``set_distill`` folder (a pickle payload in the
``.pt``, metadata without ``hidden``, ``hidden = -1`` / ``10**6``, NaN weights) and SB3 zips (a pickled ``bytearray
(2**31)`` entry, a ``hidden`` of 10**6 in ``policy_kwargs``). The allocation bound is shown in a subprocess whose
address space is capped (``RLIMIT_AS``) at 1 GiB over what it had after its imports.
"""
from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch as th

from agents.set_distill import META_FILE, WEIGHTS_FILE, SetScorer, load_model, observation_space_for, save_model
from agents.set_es import POLICY_FILE, SetESAgent, load_policy, param_names
from fedsel_env.env import FedSelectEnv

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spec():
    return FedSelectEnv(preset="tiny").selection_spec


def _set_es(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / POLICY_FILE).write_text(text)
    return folder


def _params(spec, **over):
    p = {n: 0.5 for n in param_names(spec)}
    p.update(over)
    return p


# ------------------------------------------------------------------------------------------------ set_es.json
@pytest.mark.parametrize("case, text, match", [
    ("huge_int", lambda s: json.dumps({"params": _params(s)}).replace("0.5", "1" + "0" * 400, 1),
     r"field 'params\.\w+' = 1000.* expected a finite number of magnitude"),
    ("big_float", lambda s: json.dumps({"params": _params(s, w=1e308)}), r"field 'params\.w' = 1e\+308"),
    ("neg_float", lambda s: json.dumps({"params": _params(s, w=-1e308)}), r"field 'params\.w' = -1e\+308"),
    ("nan", lambda s: json.dumps({"params": _params(s, w=float("nan"))}), r"field 'params\.w' = nan"),
    ("string", lambda s: json.dumps({"params": _params(s, w="0.1")}), r"field 'params\.w' = '0\.1'.*not a string"),
    ("bool", lambda s: json.dumps({"params": _params(s, w=True)}), r"field 'params\.w' = True"),
    ("no_params", lambda s: json.dumps({"queries": 0}), r"lacks the field 'params'"),
    ("params_list", lambda s: json.dumps({"params": [0.5] * 16}), r"field 'params' is a JSON list"),
    ("top_list", lambda s: json.dumps([1, 2, 3]), r"holds a JSON array at the top level"),
    ("deep", lambda s: "[" * 100_000 + "]" * 100_000, r"nested 100000 levels deep"),
    ("bad_json", lambda s: '{"params": {', r"set_es policy '.*set_es\.json' is not valid JSON"),
    ("not_utf8", lambda s: b"\xff\xfe{}".decode("latin-1"), r"set_es\.json' is not (UTF-8|valid JSON)"),
    ("queries", lambda s: json.dumps({"params": _params(s), "queries": "2"}), r"field 'queries'"),
])
def test_a_bad_set_es_file_is_a_value_error_naming_file_and_field(tmp_path, spec, case, text, match):
    folder = _set_es(tmp_path / case, text(spec))
    with pytest.raises(ValueError, match=match) as e:
        load_policy(folder, spec)
    assert str(folder / POLICY_FILE) in str(e.value)
    with pytest.raises(ValueError):
        SetESAgent(spec, model=folder)


def test_an_oversized_set_es_file_is_refused_before_it_is_read(tmp_path, spec, monkeypatch):
    folder = tmp_path / "big"
    folder.mkdir()
    with open(folder / POLICY_FILE, "wb") as f:  # sparse: 1 GiB by stat, no disk used
        f.truncate(1 << 30)
    real_open = open

    def no_read(path, *a, **k):
        assert Path(path).name != POLICY_FILE, "the file was opened for reading"
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", no_read)
    with pytest.raises(ValueError, match=r"set_es\.json' is 1,073,741,824 bytes, over the 4,194,304"):
        load_policy(folder, spec)


def test_weights_given_in_code_are_checked_alike(spec):
    names = param_names(spec)
    with pytest.raises(ValueError, match=r"'w' = '0\.1'"):
        SetESAgent(spec, model=[0.5] * (len(names) - 1) + ["0.1"])
    with pytest.raises(ValueError, match=r"'w' = 1e\+308"):
        SetESAgent(spec, model={**_params(spec), "w": 1e308})
    agent = SetESAgent(spec, model=_params(spec, w=1e6))  # at the bound: taken
    assert agent.w == 1e6


def test_a_good_set_es_file_still_loads(tmp_path, spec):
    folder = _set_es(tmp_path / "ok", json.dumps({"params": _params(spec, w=-2), "generations": 3}))
    assert SetESAgent(spec, model=folder).w == -2.0


# ------------------------------------------------------------------------------------------- set_distill
class _Payload:
    def __reduce__(self):
        return (print, ("ran",))


@pytest.fixture()
def distill(tmp_path, spec):
    space = observation_space_for(spec.num_clients, spec.pca_components, len(spec.client_features))
    folder = save_model(SetScorer(space, hidden=8), tmp_path / "sd",
                        {"hidden": 8, "pca_components": spec.pca_components, "n_features": len(spec.client_features)})
    return folder, space


def _meta(folder: Path, **over):
    meta = json.loads((folder / META_FILE).read_text())
    meta.update(over)
    for k in [k for k, v in over.items() if v is _DROP]:
        meta.pop(k)
    (folder / META_FILE).write_text(json.dumps(meta))


_DROP = object()


def test_a_good_set_distill_folder_loads(distill):
    folder, space = distill
    model, meta = load_model(folder, space)
    assert meta["hidden"] == 8


def test_a_pickle_payload_in_the_weights_is_a_value_error_naming_the_file(distill):
    folder, space = distill
    th.save({"encoder.x": _Payload()}, folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=r"set_distill weights '.*set_distill\.pt' cannot be loaded as weights "
                                         r"\(UnpicklingError"):
        load_model(folder, space)


@pytest.mark.parametrize("field, value, match", [
    ("hidden", _DROP, r"lacks the field 'hidden'"),
    ("hidden", -1, r"field 'hidden' = -1 is invalid: expected an integer in \[1, 4096\]"),
    ("hidden", 10**6, r"field 'hidden' = 1000000 is invalid"),
    ("hidden", 8.0, r"field 'hidden' = 8\.0 is invalid"),
    ("pca_components", "5", r"field 'pca_components' = '5'"),
    ("cover_features", "yes", r"field 'cover_features'"),
])
def test_bad_set_distill_metadata_is_refused_before_the_network_is_built(distill, monkeypatch, field, value, match):
    from agents import set_distill

    folder, space = distill
    _meta(folder, **{field: value})

    def no_build(*a, **k):
        raise AssertionError("the network was built")

    monkeypatch.setattr(set_distill, "SetScorer", no_build)
    with pytest.raises(ValueError, match=match) as e:
        load_model(folder, space)
    assert str(folder / META_FILE) in str(e.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e30])
def test_non_finite_or_huge_set_distill_weights_are_refused(distill, bad):
    folder, space = distill
    state = th.load(folder / WEIGHTS_FILE, weights_only=True)
    key = sorted(state)[0]
    state[key] = state[key].clone().fill_(bad)
    th.save(state, folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=rf"set_distill\.pt'.*weights '{key}'"):
        load_model(folder, space)


def test_weights_of_another_width_are_refused_naming_the_tensor(distill, spec):
    folder, space = distill
    other = SetScorer(space, hidden=4)
    th.save(other.state_dict(), folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=r"do not fit the network its metadata describes \(hidden=8\)"):
        load_model(folder, space)


# ------------------------------------------------------------------------------------------------ SB3 zips
def _zip_with(path: Path, **entries) -> Path:
    """An SB3-shaped zip whose ``data`` holds each entry pickled (as SB3 stores objects)."""
    data = {k: {":type:": "<class 'object'>", ":serialized:": base64.b64encode(v).decode()}
            for k, v in entries.items()}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", json.dumps(data))
    return path


#: a 25-byte pickle: bytearray(2**31), a 2 GiB allocation from an allow-listed constructor
BYTEARRAY_2GIB = b"\x80\x04cbuiltins\nbytearray\n\x8a\x05\x00\x00\x00\x80\x00\x85R."


def _run_capped(code: str) -> subprocess.CompletedProcess:
    """``code`` in a subprocess whose address space is capped at 1 GiB over its size after the imports."""
    prelude = ("import resource, sys\nsys.path.insert(0, sys.argv[1])\n"
               "import torch, numpy, agents.saved_models, fedsel_env.sim.safe_pickle\n"
               "vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024\n"
               "resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))\n")
    return subprocess.run([sys.executable, "-c", prelude + code, str(ROOT)], capture_output=True, text=True,
                          timeout=120)


def test_an_allow_listed_constructor_cannot_allocate_gigabytes(tmp_path):
    path = _zip_with(tmp_path / "model.zip", exploration_rng=BYTEARRAY_2GIB)
    out = _run_capped("from agents.saved_models import safe_data_objects\n"
                      "try:\n    safe_data_objects(sys.argv[2])\n"
                      "except ValueError as e:\n    print('ValueError:', e)\n".replace("sys.argv[2]", repr(str(path))))
    assert "ValueError:" in out.stdout, out.stderr[-2000:]
    assert "model.zip" in out.stdout and "'exploration_rng'" in out.stdout and "2,147,483,648 bytes" in out.stdout


@pytest.mark.parametrize("kwargs, field", [({"hidden": 10**6}, "policy_kwargs.hidden"),
                                           ({"net_arch": [64, 10**7]}, "policy_kwargs.net_arch"),
                                           ({"net_arch": {"pi": [-1]}}, "policy_kwargs.net_arch")])
def test_sizes_a_zip_asks_for_are_refused_before_sb3_builds_the_network(tmp_path, kwargs, field):
    from agents.saved_models import safe_data_objects

    path = _zip_with(tmp_path / "model.zip", policy_kwargs=pickle.dumps(kwargs, protocol=4))
    with pytest.raises(ValueError, match=rf"model\.zip'.*field '{field}'"):
        safe_data_objects(path)


def test_a_zip_data_entry_too_deep_or_not_an_object_is_refused(tmp_path):
    from agents.deploy import detect_algorithm

    for name, data in (("deep", "[" * 100_000 + "]" * 100_000), ("list", "[1, 2]")):
        path = tmp_path / f"{name}.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("data", data)
        with pytest.raises(ValueError, match=rf"{name}\.zip'"):
            detect_algorithm(path)


def test_the_file_fuzz_small_version_gives_only_value_errors_under_a_1_gib_cap(tmp_path):
    """The small version of ``bench/fuzz_selector_files.py`` (1,200 files there): 45 hostile files of the three
    formats plus the three good ones (which must load), in one worker capped at 1 GiB over its imports."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_selector_files", ROOT / "bench" / "fuzz_selector_files.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    report = fuzz.fuzz(45, seed=7, hang=20, root=tmp_path)
    assert not report["failures"], report["failures"][:5]
    assert sum(f["count"] for f in report["formats"].values()) == 45
    assert report["cap_bytes"] - report["base_bytes"] == 1 << 30


@pytest.mark.parametrize("payload", [
    b"\x80\x04cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\n" + pickle.dumps(("V", 2**30), protocol=4)[2:-1]
    + b"\x85R\x85R.",                                                          # a numpy scalar of a 1 GiB dtype
    b"\x80\x04cnumpy\nndarray\n" + pickle.dumps((2**31,), protocol=4)[2:-1] + b"\x85R.",   # ndarray((2**31,))
    b"\x80\x04cnumpy\nndarray\n" + pickle.dumps((2**31,), protocol=4)[2:-1] + b"\x85\x81.",  # its NEWOBJ form
    b"\x80\x04ccopyreg\n_reconstructor\ncbuiltins\nbytearray\ncbuiltins\nbytearray\n"
    + pickle.dumps(2**31, protocol=4)[2:-1] + b"\x87R.",                        # copyreg's road to bytearray(n)
])
def test_allow_listed_constructors_are_bounded_before_they_run(payload):
    from fedsel_env.sim.safe_pickle import NUMPY_GLOBALS, PLAIN_GLOBALS, RefusedAllocation, restricted_loads

    with pytest.raises(RefusedAllocation, match=r"allocate [\d,]+ bytes from a few bytes of pickle"):
        restricted_loads(payload, NUMPY_GLOBALS | PLAIN_GLOBALS | {("copyreg", "_reconstructor")})


def test_constructing_an_admitted_class_is_refused_rebuilding_it_is_not():
    import torch

    from agents.saved_models import MODEL_GLOBALS, _admit_class
    from fedsel_env.sim.safe_pickle import RefusedAllocation, restricted_loads

    linear = b"\x80\x04ctorch.nn.modules.batchnorm\nBatchNorm1d\n" + pickle.dumps(10**10, protocol=4)[2:-1] + b"\x85R."
    with pytest.raises(RefusedAllocation, match=r"construct 'BatchNorm1d' while loading"):
        restricted_loads(linear, MODEL_GLOBALS, _admit_class)
    space = FedSelectEnv(preset="tiny").observation_space  # saved objects (NEWOBJ + BUILD) load as before
    assert restricted_loads(pickle.dumps(space, protocol=4), MODEL_GLOBALS, _admit_class) == space
    assert restricted_loads(pickle.dumps(torch.device("cpu")), MODEL_GLOBALS, _admit_class) == torch.device("cpu")


def test_a_saved_space_of_a_huge_n_is_refused():
    import gymnasium

    from agents.saved_models import check_sizes

    with pytest.raises(ValueError, match=r"model.zip: field 'action_space' has a space of 1,000,000,000,000 numbers"):
        check_sizes({"action_space": gymnasium.spaces.Discrete(10**12)}, "model.zip")
