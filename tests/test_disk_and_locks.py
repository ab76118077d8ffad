"""Full disks and concurrent runs (issue #30).

ENOSPC is simulated by a ``os.write`` that writes half of what it is given, then raises ``ENOSPC``: an
episode append or a file write then fails with a ``ValueError`` naming the file and the fix, leaves no
partial last line and no ``.tmp`` file. A run folder is locked for the life of a run: a second writer
is refused with a clear message, and the lock is gone when the first one ends.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.training import atomic
from agents.training.atomic import append_line, atomic_save, atomic_write_text, lock_run_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--env", "tiny", "--rounds", "2", "--seeds", "0", "--no-progress", "--no-plots", "--policy", "random"]


@pytest.fixture
def full_disk(monkeypatch):
    """From now on ``os.write`` writes half of its bytes, then the disk is full."""
    real = os.write

    def write(fd, data):
        data = bytes(data)
        if len(data) > 1:
            real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def arm():
        monkeypatch.setattr(atomic.os, "write", write)

    return arm


def _scripts():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import evaluate

    return evaluate


def test_enospc_during_an_episode_append_names_the_file_and_leaves_whole_lines(tmp_path, full_disk):
    evaluate = _scripts()
    out = tmp_path / "eval"
    evaluate.main(TINY + ["--out", str(out)])
    episodes = out / "episodes.jsonl"
    before = episodes.read_bytes()
    full_disk()
    with pytest.raises(ValueError, match=r"cannot write '.*episodes\.jsonl': No space left on device \(ENOSPC\); "
                                         r"free space"):
        append_line(episodes, json.dumps({"key": "x" * 1000}))
    assert episodes.read_bytes() == before  # cut back to its last whole line
    with pytest.raises(ValueError, match=r"summary\.md.*ENOSPC"):
        atomic_write_text(out / "summary.md", "table " * 1000)
    assert not list(out.glob("*.tmp"))


def test_enospc_through_evaluate_py_names_the_file_and_resume_finishes(tmp_path, full_disk, monkeypatch):
    evaluate = _scripts()
    out = tmp_path / "eval"
    full_disk()
    with pytest.raises(ValueError, match=r"cannot write '.*(config\.json|episodes\.jsonl)'.*ENOSPC.*--resume"):
        evaluate.main(TINY + ["--out", str(out), "--seeds", "0", "1"])
    assert not list(out.glob("*.tmp"))
    monkeypatch.undo()  # space freed
    evaluate.main(TINY + ["--out", str(out), "--seeds", "0", "1", "--resume"])
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["key"] for x in lines)


def test_enospc_during_a_checkpoint_save_leaves_no_tmp(tmp_path):
    def save(tmp: Path) -> None:  # what SB3's model.save does when the disk fills mid-write
        tmp.write_bytes(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "checkpoints" / "ckpt_100_steps.zip"
    target.parent.mkdir()
    with pytest.raises(ValueError, match=r"ckpt_100_steps\.zip.*No space left on device.*free space"):
        atomic_save(save, target)
    assert list(target.parent.iterdir()) == []


def test_a_second_writer_of_a_run_folder_is_refused(tmp_path):
    evaluate = _scripts()
    out = tmp_path / "eval"
    # another process holds the folder (a run, or a --resume of it, still going)
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; sys.path.insert(0, sys.argv[1]);"
                               "from agents.training.atomic import lock_run_folder\n"
                               "with lock_run_folder(sys.argv[2], 'evaluate.py'):\n"
                               "    print('locked', flush=True); time.sleep(60)", str(ROOT), str(out)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match=rf"run folder '{out}' is in use by evaluate\.py \(pid {holder.pid}"):
            evaluate.main(TINY + ["--out", str(out), "--resume"])
        assert not (out / "episodes.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    evaluate.main(TINY + ["--out", str(out), "--resume"])  # the holder ended: the lock went with it
    assert (out / "episodes.jsonl").read_text().count("\n") == 1


def test_train_agent_holds_its_run_folder(tmp_path):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_agent_lock", ROOT / "train_agent.py")
    train_agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_agent)
    run = tmp_path / "t"
    with lock_run_folder(run, "train_agent.py"):  # a run of that name is going on
        with pytest.raises(ValueError, match=r"'.*t' is in use by train_agent\.py"):
            train_agent.main(["--algo", "favor", "--env", "tiny", "--n-timesteps", "20", "--runs-dir", str(tmp_path),
                              "--name", "t", "--eval-freq", "0", "--save-freq", "0", "--no-progress-bar",
                              "--verbose", "0"])
    assert not (run / "args.yaml").exists()


def test_the_lock_is_released_when_a_run_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with lock_run_folder(tmp_path, "x"):
            raise RuntimeError("boom")
    with lock_run_folder(tmp_path, "y"):  # free again
        pass
