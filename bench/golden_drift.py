"""How far the golden trajectories move on other CPU kernel paths (issue #26): the measurement behind the
tolerances of ``tests/golden.py``.

The recording ``tests/data/golden_trajectories.npz`` was made on one CPU; another CPU runs other SIMD and
BLAS/LAPACK kernels and rounds float reductions differently. This machine can run several of those paths
itself: torch's vectorised kernels at a lower instruction set (``ATEN_CPU_CAPABILITY``), MKL's
conditional-numerical-reproducibility modes and instruction caps (``MKL_CBWR``, ``MKL_ENABLE_INSTRUCTIONS``;
torch's BLAS and LAPACK) and OpenBLAS's kernel for another core (``OPENBLAS_CORETYPE``; numpy and
scikit-learn's). Each path replays every golden case in its own process and prints, per field, the largest
difference from the recording: in float32 ulps, relative to the value, and relative to the field's scale
(its largest magnitude in that step, the unit ``tests/golden.py`` bounds).

    .venv/bin/python bench/golden_drift.py            # every path (about a minute)
    .venv/bin/python bench/golden_drift.py --paths native ATEN_CPU_CAPABILITY=default
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["native", "ATEN_CPU_CAPABILITY=default", "ATEN_CPU_CAPABILITY=avx2", "MKL_CBWR=COMPATIBLE",
         "MKL_ENABLE_INSTRUCTIONS=AVX2", "OPENBLAS_CORETYPE=Prescott",
         "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OPENBLAS_CORETYPE=Prescott"]

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, "tests")
from golden import CASES, FLAGS_CHANGED, FLOAT_TOLERANCE, PCA_TOLERANCE, _field, compare, recorded, trajectory
from fedsel_env.spec import FEATURE_INDEX
flags = [FEATURE_INDEX["selected_last_round"], FEATURE_INDEX["responded_last_round"]]
out, problems = {}, []
for case in CASES:
    want_all, got = recorded(case), trajectory(case)
    problems += compare(case, got, want_all)
    for key, want in want_all.items():
        have, field = got[key], _field(key)
        if case in FLAGS_CHANGED and field == "obs_clients":
            keep = [c for c in range(want.shape[1]) if c not in flags]; want, have = want[:, keep], have[:, keep]
        if CASES[case][1].get("observation") == "flat" and field == "obs_flat":
            field = "obs_flat (PCA first)"
        o = out.setdefault(field, [0.0, 0.0, 0.0])
        if want.dtype.kind != "f" or np.array_equal(have, want, equal_nan=True):
            continue
        d = np.abs(have.astype(np.float64) - want.astype(np.float64))
        spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        o[0] = max(o[0], float(np.nanmax(d / spacing)))
        o[1] = max(o[1], float(np.nanmax(d / np.maximum(np.abs(want), 1e-30))))
        o[2] = max(o[2], float(np.nanmax(d)) / max(float(np.nanmax(np.abs(want))), 1e-30))
print(json.dumps({"fields": out, "problems": problems}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", nargs="+", default=PATHS, help="'native' or space-free VAR=VALUE groups")
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    import torch
    print(f"# CPU: {cpu}; torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); one torch thread")
    table = {}
    for path in args.paths:
        env = dict(os.environ)
        if path != "native":
            env.update(kv.split("=", 1) for kv in path.split())
        res = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True)
        if res.returncode:
            print(f"{path}: failed\n{res.stderr[-2000:]}")
            continue
        table[path] = json.loads(res.stdout.strip().splitlines()[-1])
    fields = sorted({f for r in table.values() for f in r["fields"]})
    for path, r in table.items():
        print(f"\n## {path}: {'within the tolerances' if not r['problems'] else 'OUT OF TOLERANCE: ' + '; '.join(r['problems'][:3])}")
        print(f"{'field':28s} {'ulp (f32)':>11s} {'relative':>10s} {'of scale':>10s}")
        for f in fields:
            u, rel, sc = r["fields"].get(f, [0, 0, 0])
            if u or rel or sc:
                print(f"{f:28s} {u:11.3g} {rel:10.3g} {sc:10.3g}")
        if not any(any(v) for v in r["fields"].values()):
            print("(bit for bit the recording)")


if __name__ == "__main__":
    main()
