"""evaluate.py --ray (issue #16): episodes as Ray tasks on a Ray started inside the test, written by the
driver into the same run folder, with the records of a local run; an interrupted Ray run resumes;
Ray missing or combined with --workers is refused before anything is written."""
import json
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import fedsel_eval
from fedsel_eval import run_folder

ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed: pip install '.[ray]'")
pytestmark = pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # evaluate.py and experiments/ live at the repository root
    sys.path.insert(0, str(REPO))
import evaluate  # noqa: E402

#: tiny, 2 policies × 2 seeds, 3 rounds
ARGS = ["--env", "tiny", "--rounds", "3", "--seeds", "0", "1", "--policy", "random", "--policy", "afl",
        "--no-plots", "--no-progress"]


def records(run_dir):
    """Episode records by key, without the wall-clock time (the one field that may differ)."""
    out = {}
    for line in (Path(run_dir) / "episodes.jsonl").read_text().splitlines():
        r = json.loads(line)
        r.pop("wall_time_s")
        out[r["key"]] = r
    return out


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A two-CPU Ray started for this module (its files in a temp folder: a short one, since Ray's socket
    paths must stay under ~107 characters), shut down and removed at the end."""
    base = tmp_path_factory.mktemp("ray")
    temp = base if len(str(base)) <= 40 else Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp), log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if temp != base:
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The same evaluation in this process (no Ray)."""
    out = tmp_path_factory.mktemp("eval") / "local"
    evaluate.main(ARGS + ["--out", str(out)])
    return records(out)


@pytest.mark.slow
def test_ray_run_gives_the_records_of_a_local_run(local_ray, local_run, tmp_path):
    out = tmp_path / "ray"
    evaluate.main(ARGS + ["--out", str(out), "--ray"])  # uses the Ray this process is connected to
    assert len(local_run) == 4
    assert records(out) == local_run
    assert (out / "summary.csv").is_file()


@pytest.mark.slow
def test_interrupted_ray_run_resumes(local_ray, local_run, tmp_path, monkeypatch):
    out = tmp_path / "interrupted"
    real = run_folder.RunFolder.append_episode
    appended = []

    def append_then_interrupt(self, record):  # Ctrl-C in the driver after the first finished episode
        real(self, record)
        appended.append(record["key"])
        raise KeyboardInterrupt

    monkeypatch.setattr(run_folder.RunFolder, "append_episode", append_then_interrupt)
    with pytest.raises(SystemExit) as stop:
        evaluate.main(ARGS + ["--out", str(out), "--ray"])
    assert stop.value.code == 130 and len(appended) == 1
    kept = (out / "episodes.jsonl").read_text()
    assert len(kept.splitlines()) == 1

    monkeypatch.setattr(run_folder.RunFolder, "append_episode", real)
    evaluate.main(ARGS + ["--out", str(out), "--ray", "--resume"])
    lines = (out / "episodes.jsonl").read_text()
    assert lines.startswith(kept) and len(lines.splitlines()) == 4  # the finished episode was not run again
    assert records(out) == local_run


@pytest.mark.slow
def test_bench_suite_on_ray_gives_the_rows_of_a_local_run(local_ray, tmp_path):
    """``evaluate.py --suite bench --ray`` (issue #46): every suite episode a Ray task (the env of its config kept in
    the Ray worker), the same rows as the suite played in this process; with --n-envs it is refused."""
    suite = ["--suite", "bench", "--scenarios", "Churn", "--rounds", "2", "--seeds", "0", "--no-progress",
             "--no-plots"]
    evaluate.main(suite + ["--out", str(tmp_path / "here")])
    evaluate.main(suite + ["--out", str(tmp_path / "ray"), "--ray"])

    def rows(folder):
        out = {}
        for line in (folder / "Churn" / "episodes.jsonl").read_text().splitlines():
            r = json.loads(line)
            for k in ("wall_time_s", "planning_seconds"):
                r.pop(k, None)
            out[(r["policy"], r["seed"])] = r
        return out

    here = rows(tmp_path / "here")
    assert rows(tmp_path / "ray") == here and ("lookahead", 0) in here and "planned_rounds" in here[("lookahead", 0)]
    with pytest.raises(ValueError, match="--ray and --n-envs 2 exclude each other"):
        evaluate.main(suite + ["--out", str(tmp_path / "both"), "--ray", "--n-envs", "2"])


def test_ray_missing_is_refused_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "no_ray"
    with pytest.raises(ValueError, match=r"--ray needs the 'ray' package.*pip install -e '\.\[ray\]'"):
        evaluate.main(ARGS + ["--out", str(out), "--ray", "auto"])
    assert not out.exists()  # refused before the run folder was written


def test_ray_with_workers_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--ray and --workers 2 exclude each other"):
        evaluate.main(ARGS + ["--out", str(tmp_path / "both"), "--ray", "--workers", "2"])
    assert not (tmp_path / "both").exists()


@pytest.mark.slow
def test_experiment_scripts_pass_ray_to_every_evaluation(tmp_path, monkeypatch):
    from experiments import common

    args = common.parser("x", "an experiment").parse_args(["--ray", "--out", str(tmp_path), "--no-publish"])
    assert args.ray == "local"
    assert common.parser("x", "d").parse_args(["--ray", "ray://head:10001"]).ray == "ray://head:10001"
    seen = []

    def run(*_args, **kwargs):  # what fedsel_eval.run is asked is enough
        seen.append(kwargs["ray"])
        return SimpleNamespace(records=[], rows=[], plan=None)

    monkeypatch.setattr(fedsel_eval, "run", run)
    monkeypatch.setitem(common._EXECUTION, "ray", None)  # start() sets it for the script's lifetime
    common.start("x", args)
    common.evaluate(tmp_path / "part", {"preset": "tiny"}, ["random"], [0])
    common.evaluate(tmp_path / "part", {"preset": "tiny"}, ["random"], [0], ray="auto")
    assert seen == ["local", "auto"]


@pytest.mark.slow
def test_ctrl_c_while_ray_starts_is_held_until_it_has_started():
    """A Ctrl-C inside ``ray.init`` left a half-started Ray that crashed evaluate.py at exit (SIGSEGV,
    in 5 of 17 interrupts timed around Ray's start); it is held until the start is over, then raised."""
    import os
    import signal

    from fedsel_eval.ray_executor import _ctrl_c_held

    # Python's own handler, whatever an earlier test left installed (a Flower simulation that timed out
    # under load left its handler, and the block then was not held): the case under test is a plain CLI run
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        finished = []
        with pytest.raises(KeyboardInterrupt):
            with _ctrl_c_held():
                os.kill(os.getpid(), signal.SIGINT)  # delivered here, held
                finished.append(True)
        assert finished == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
