#!/usr/bin/env bash
# Every GPU check of issue #33 in one command, for a GPU machine without network access.
#
#   bash scripts/wheels.sh .wheels          # on a machine with network: the wheels (and Fashion-MNIST)
#   bash bench/gpu_check.sh .wheels         # on the GPU machine, from the checkout's root
#   bash bench/gpu_check.sh .wheels --full  # the same, with the whole test suite (`pytest -q`) first
#   bash bench/gpu_check.sh .wheels --scale # issue #43 only: bench scenarios at E = 1,024, train_agent.py steps/s
#
# Its Python (PYTHON, default python3) must hold a CUDA build of torch and the scientific stack; the
# project's other dependencies are installed from WHEELDIR (pip --no-index, into /tmp/fedsel-site, put
# first on PYTHONPATH: nothing of that Python is changed). WHEELDIR/fashion-mnist, when there, is used as
# Debian's Fashion-MNIST folder (copied to /usr/share/datasets/fashion-mnist when that is missing and
# writable). Without a GPU each CUDA part says "no CUDA" and the CPU parts still run (a dry run).
# --full installs the wheels into that Python itself (a throwaway GPU machine: the suite's subprocesses must
# import them) and runs the whole suite, `pytest -q`, split over 8 processes when pytest-xdist is there, in
# place of the two partial pytest stages.
#
# The log's first line names the commit: GIT_REV=<rev> overrides it, for a copy of a checkout whose .git is
# not the working tree's (a device runner's copy read a stale HEAD on 2026-11-26: docs/gpu_check/h200-run4-*).
#
# The output goes to stdout and to LOG (default $OUT/gpu_check.log, else ./gpu_check.log). Each stage has its
# own time limit, so a hang costs one stage; the stages' limits add up to under 8 minutes (10 with --full;
# a run takes about 6 on an H200).
# docs/PERFORMANCE.md's GPU section quotes this log.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELDIR=${1:-}
FULL=0; [ "${2:-}" = "--full" ] && FULL=1
SCALE=0; [ "${2:-}" = "--scale" ] && SCALE=1
PYTHON=${PYTHON:-python3}
LOG=${LOG:-${OUT:-.}/gpu_check.log}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
: > "$LOG"

say() { echo "$@" | tee -a "$LOG"; }
stage() {  # stage NAME SECONDS CMD...: run CMD with a time limit, its output to stdout and the log
    local name=$1 limit=$2; shift 2
    say ""
    say "=== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    say "=== $name: exit $rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] && echo ' (TIME LIMIT)')"
}

REV=${GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo 'unknown commit')}
say "=== gpu_check.sh at $REV, $(date -u +%FT%TZ)"
if [ -n "$WHEELDIR" ]; then
    if [ -d "$WHEELDIR" ] && ls "$WHEELDIR"/*.whl >/dev/null 2>&1; then
        if [ "$FULL" = 1 ]; then
            stage "install wheels from $WHEELDIR into $PYTHON's environment" 120 "$PYTHON" -m pip install -q \
                --no-index --no-deps --no-compile --no-cache-dir "$WHEELDIR"/*.whl
        fi
        if [ "$FULL" = 0 ] || ! "$PYTHON" -c "import gymnasium, stable_baselines3" 2>/dev/null; then
            stage "install wheels from $WHEELDIR" 120 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
                --no-cache-dir --upgrade --target /tmp/fedsel-site "$WHEELDIR"/*.whl
            export PYTHONPATH=/tmp/fedsel-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
        fi
    else
        say "!!! WHEELDIR $WHEELDIR has no wheels: the project's dependencies must already be installed"
    fi
    FM=/usr/share/datasets/fashion-mnist
    if [ -d "$WHEELDIR/fashion-mnist" ] && [ ! -d "$FM" ]; then
        (mkdir -p "$FM" && cp "$WHEELDIR"/fashion-mnist/* "$FM"/) 2>/dev/null \
            && say "Fashion-MNIST copied to $FM" || say "!!! could not copy Fashion-MNIST to $FM"
    fi
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}

say ""
say "=== machine"
(nvidia-smi 2>&1 || echo "no nvidia-smi") | tee -a "$LOG"
say "host CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
"$PYTHON" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as m, platform, sys
import torch
print(f"python {platform.python_version()} ({sys.executable}); torch {torch.__version__} (CUDA {torch.version.cuda}, "
      f"cuDNN {torch.backends.cudnn.version()}); cuda available: {torch.cuda.is_available()}"
      + (f"; {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
         if torch.cuda.is_available() else " -- no CUDA: the CUDA parts below say so and measure nothing"))
for n in ("numpy", "scipy", "scikit-learn", "gymnasium", "stable-baselines3", "sb3-contrib", "qpsolvers", "pytest"):
    try:
        print(f"  {n} {m.version(n)}")
    except m.PackageNotFoundError:
        print(f"  {n} MISSING")
import fedsel_env, fedsel_env.sim.captured as c
print("fedsel_env imports from", fedsel_env.__file__)
EOF

CUDA=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
cuda_stage() {  # a stage that needs CUDA: "no CUDA" without it
    if [ "$CUDA" = 1 ]; then stage "$@"; else say ""; say "=== $1: no CUDA here, not run"; fi
}
PYTEST=("$PYTHON" -m pytest -q -rs -p no:cacheprovider)
if [ "$SCALE" = 1 ]; then  # issue #43: FedSelect-Bench at RL scale (docs/PERFORMANCE.md, "At RL scale")
    cuda_stage "bench/bench_scale.py: digits bench scenarios, batched E = 1,024 on cuda" 230 "$PYTHON" \
        bench/bench_scale.py --device cuda --sizes 1024 --no-single --seconds 5 \
        --scenarios Churn NoisyLabels FreeRiders Stragglers
    cuda_stage "bench/bench_scale.py: QuantitySkew and Large, E = 64 on cuda" 70 "$PYTHON" \
        bench/bench_scale.py --device cuda --sizes 64 --no-single --seconds 5 --scenarios QuantitySkew Large
    cuda_stage "bench/bench_scale.py --train: pl_ppo and pc_dqn through train_agent.py on cuda, E = 512" 200 \
        "$PYTHON" bench/bench_scale.py --train --device cuda --n-envs 512 --scenarios Stragglers
    say ""
    say "=== gpu_check.sh --scale done, $(date -u +%FT%TZ)"
    exit 0
fi
if [ "$FULL" = 1 ]; then
    XDIST=()
    "$PYTHON" -c "import xdist" 2>/dev/null && XDIST=(-n 8 --dist loadfile)
    stage "pytest -q: the whole suite" 200 "${PYTEST[@]}" "${XDIST[@]}"
else
    stage "pytest: captured round, stacked step, PCA, device, vector env" 100 "${PYTEST[@]}" tests/test_captured.py \
        tests/test_stacked_net.py tests/test_server_view.py tests/test_device.py tests/test_vector_env.py
fi
stage "bench/gpu_round.py (the simulator's round against the floor; FAVOR's round by CNN step)" 120 "$PYTHON" \
    bench/gpu_round.py --favor-repeats 3
stage "bench/gpu_presets.py (env steps/s, cuda against one host core)" 120 "$PYTHON" bench/gpu_presets.py --budget 1.5 \
    --presets favor_fmnist default tiny default:one synthetic hetero --devices cuda cuda-vmap cpu-1
if [ -f bench/vector_env.py ]; then
    cuda_stage "bench/vector_env.py (E = 1,024)" 60 "$PYTHON" bench/vector_env.py --device cuda --sizes 1024 \
        --presets default --seconds 8 --no-reference
else
    say ""; say "=== bench/vector_env.py: not in this checkout (issue #27), not measured"
fi
cuda_stage "bench/gpu_cnn_profile.py (a FAVOR step's kernels: stacked against vmap)" 40 "$PYTHON" \
    bench/gpu_cnn_profile.py
cuda_stage "bench/gpu_profile.py (where a default step's time goes)" 20 "$PYTHON" bench/gpu_profile.py --steps 30 --top 20
cuda_stage "bench/gpu_profile.py (where a FAVOR step's time goes)" 35 "$PYTHON" bench/gpu_profile.py --preset favor_fmnist \
    --steps 5 --top 20 --reset
[ "$FULL" = 1 ] || stage "pytest: parallel workers, golden trajectories (this host's CPU)" 100 "${PYTEST[@]}" \
    tests/test_parallel.py tests/test_golden.py
cuda_stage "bench/device_scale.py --device cuda" 45 "$PYTHON" bench/device_scale.py --device cuda --ks 10 100 1000 \
    --loop-clients 5 --single-steps 100 --favor full --favor-rounds 3
say ""
say "=== gpu_check.sh done, $(date -u +%FT%TZ)"
