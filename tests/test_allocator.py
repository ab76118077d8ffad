"""The scripts restart themselves under tcmalloc when the machine has it (setup.sh installs it)."""
import os
import subprocess
import sys

import pytest

from fedsel_env.allocator import tcmalloc_path

SCRIPT = """
import os, sys
sys.path.insert(0, {repo!r})
from fedsel_env.allocator import reexec_with_tcmalloc
reexec_with_tcmalloc()
print("LD_PRELOAD=" + os.environ.get("LD_PRELOAD", ""))
"""


def _run(tmp_path, **env):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT.format(repo=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "FEDSEL_NO_TCMALLOC")}
    full.update(env)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full, check=True).stdout


@pytest.mark.slow
def test_reexec_preloads_tcmalloc_once(tmp_path):
    out = _run(tmp_path)
    if tcmalloc_path() is None:
        assert out.strip() == "LD_PRELOAD="  # nothing to preload: the script just runs
    else:
        assert out.count("LD_PRELOAD=") == 1 and "tcmalloc" in out


def test_opt_out(tmp_path):
    assert _run(tmp_path, FEDSEL_NO_TCMALLOC="1").strip() == "LD_PRELOAD="


@pytest.mark.slow
@pytest.mark.skipif(tcmalloc_path() is None, reason="libtcmalloc-minimal4 is not installed (scripts/setup.sh installs it)")
def test_evaluate_runs_under_tcmalloc(tmp_path):
    out = subprocess.run([sys.executable, "evaluate.py", "--list"], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert "random" in out.stdout
