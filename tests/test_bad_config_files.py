"""Bad YAML and run-folder files (issue #15, item 7): each is a ValueError naming the file and the fix,
never a traceback from PyYAML or json.

- YAML: syntax errors, non-UTF-8 text and keys given twice, in every YAML a user writes (``--env``,
  ``--config``, ``--env-kwargs``, a run folder's ``env_config.yaml`` / ``args.yaml``);
- an evaluation's run folder: a corrupt line in ``episodes.jsonl``, a truncated ``config.json``.
"""
from __future__ import annotations

import pytest

from fedsel_env.config import load_config, parse_yaml, read_yaml, resolve_env


# --- item 7: YAML ------------------------------------------------------------------------------------
BAD_YAML = {
    "syntax": (b"num_clients: [1, 2\n", "not valid YAML.*line 2"),
    "tab": (b"num_clients: 4\n\tmodel: mlp\n", "not valid YAML.*line 2"),
    "duplicate": (b"num_clients: 4\nmodel: mlp\nnum_clients: 8\n", "key 'num_clients' twice.*line 3"),
    "nested duplicate": (b"system:\n  noise_std: 0.1\n  noise_std: 0.2\n", "key 'noise_std' twice"),
    "latin-1": ("model: 'r\u00e9seau'\n".encode("latin-1"), "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_YAML))
def test_bad_env_yaml_names_the_file(tmp_path, case):
    content, match = BAD_YAML[case]
    path = tmp_path / "env.yml"
    path.write_bytes(content)
    for read in (load_config, resolve_env):
        with pytest.raises(ValueError, match=match) as err:
            read(str(path))
        assert str(path) in str(err.value)


def test_yaml_merge_keys_are_not_duplicates():
    assert parse_yaml("a: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", "t") == {"a": {"x": 1, "y": 2},
                                                                         "c": {"x": 3, "y": 2}}


def test_missing_and_unreadable_yaml(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_yaml(tmp_path / "nope.yml", "config file")
    with pytest.raises(ValueError, match="does not exist"):
        read_yaml(tmp_path, "config file")  # a folder


@pytest.mark.parametrize("case", ["syntax", "duplicate", "latin-1"])
def test_bad_yaml_through_the_scripts(tmp_path, case):
    """``--env`` and ``--config`` of evaluate.py, ``--env`` of train_agent.py: a ValueError naming the file."""
    import evaluate
    import train_agent

    content, match = BAD_YAML[case]
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    out = str(tmp_path / "out")
    for argv in (["--env", str(path), "--out", out], ["--config", str(path), "--out", out]):
        with pytest.raises(ValueError, match=match) as err:
            evaluate.main(argv)
        assert str(path) in str(err.value)
    with pytest.raises(ValueError, match=match) as err:
        train_agent.main(["--algo", "favor", "--env", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert str(path) in str(err.value)


@pytest.mark.parametrize("item, match", [("num_clients=[1, 2", "num_clients"), ("system={a: 1, a: 2}", "twice")])
def test_bad_env_kwargs_values(tmp_path, item, match):
    import evaluate
    import train_agent

    with pytest.raises(ValueError, match=match):
        evaluate.main(["--env", "tiny", "--env-kwargs", item, "--out", str(tmp_path / "o")])
    with pytest.raises(ValueError, match=match):
        train_agent.main(["--algo", "favor", "--env", "tiny", "--env-kwargs", item, "--runs-dir", str(tmp_path)])


# --- a training run folder's YAML files (read by evaluate.py --policy and train_agent.py --resume) ---------
@pytest.mark.parametrize("case", ["syntax", "duplicate", "latin-1"])
def test_bad_run_folder_yaml_names_the_file(tmp_path, case):
    from agents.favor import read_env_config
    from agents.training.cli import parse_args
    from agents.training.runs import resumed_settings
    from agents.deploy import resolve_model

    content, match = BAD_YAML[case]
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "model.zip").write_bytes(b"")
    for name in ("env_config.yaml", "args.yaml", "hyperparams.yaml"):
        (run / name).write_text("{}\n")
    for name in ("env_config.yaml", "args.yaml", "hyperparams.yaml"):
        (run / name).write_bytes(content)
        calls = [lambda: resumed_settings(parse_args(["--resume", "--name", "r", "--runs-dir", str(tmp_path / "runs")]))]
        if name == "env_config.yaml":
            calls.append(lambda: read_env_config(run / "model.zip"))
        if name == "args.yaml":
            calls.append(lambda: resolve_model(run))
        for call in calls:
            with pytest.raises(ValueError, match=match) as err:
                call()
            assert str(run / name) in str(err.value)
        (run / name).write_text("{}\n")


def test_run_settings_file_that_is_not_a_mapping(tmp_path):
    from agents.training.cli import parse_args
    from agents.training.runs import resumed_settings

    run = tmp_path / "r"
    run.mkdir()
    for name in ("env_config.yaml", "args.yaml", "hyperparams.yaml"):
        (run / name).write_text("{}\n")
    (run / "hyperparams.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="hyperparams.yaml.*must hold a mapping"):
        resumed_settings(parse_args(["--resume", "--name", "r", "--runs-dir", str(tmp_path)]))


# --- an evaluation's run folder (evaluate.py --resume) ---------------------------------------------------
@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    import evaluate

    out = tmp_path_factory.mktemp("eval") / "run"
    args = ["--env", "tiny", "--rounds", "2", "--no-progress", "--seeds", "0", "1", "--out", str(out),
            "--no-plots", "--policy", "random"]
    evaluate.main(args)
    return out, args


@pytest.mark.parametrize("damage", ["garbage line", "not a record", "latin-1", "truncated config.json",
                                    "config.json a list", "config.json latin-1"])
def test_damaged_eval_run_folder_names_the_file_and_the_fix(eval_run, tmp_path, damage):
    import shutil

    import evaluate

    src, args = eval_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    args = [a if a != str(src) else str(out) for a in args] + ["--resume"]
    episodes, config = out / "episodes.jsonl", out / "config.json"
    lines = episodes.read_bytes().split(b"\n")
    if damage == "garbage line":
        episodes.write_bytes(b"\n".join([lines[0], b'{"key": "random|fedavg|1", "metr'] + lines[1:]))
        where, fix = str(episodes) + "', line 2", "Delete that line"
    elif damage == "not a record":
        episodes.write_bytes(b"\n".join([b"[1, 2]"] + lines))
        where, fix = str(episodes) + "', line 1", "Delete that line"
    elif damage == "latin-1":
        episodes.write_bytes(b"\n".join([lines[0], b'{"key": "\xe9"}'] + lines[1:]))
        where, fix = str(episodes) + "', line 2", "not UTF-8"
    else:
        raw = config.read_bytes()
        config.write_bytes({"truncated config.json": raw[: len(raw) // 2], "config.json a list": b"[1]",
                            "config.json latin-1": b'{"env": "\xe9"}'}[damage])
        where, fix = str(config), "--overwrite"
    with pytest.raises(ValueError, match="damaged") as err:
        evaluate.main(args)
    assert where in str(err.value) and fix in str(err.value)


def test_a_cut_last_line_is_still_dropped_quietly(eval_run, tmp_path):
    """The crash case the run folder already handled: a last line cut mid-append is not an error."""
    import shutil

    import evaluate

    src, args = eval_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    text = (out / "episodes.jsonl").read_text()
    (out / "episodes.jsonl").write_text(text[: len(text) - 30])
    evaluate.main([a if a != str(src) else str(out) for a in args] + ["--resume"])
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2
