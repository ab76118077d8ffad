#!/usr/bin/env bash
# Fetch, on a machine with network access, what bench/gpu_check.sh installs on a GPU machine without it.
#
#   bash scripts/wheels.sh [DIR]            # DIR defaults to .wheels (ignored by git)
#   bash bench/gpu_check.sh DIR             # then, on the GPU machine (DIR copied there beside the checkout)
#
# The GPU machine's Python is expected to hold torch and the scientific stack already (numpy, scipy,
# scikit-learn, pandas, matplotlib, pyyaml, cloudpickle, pytest, hypothesis, tensorboard, tqdm, rich: an
# NVIDIA/PyTorch image's usual contents); DIR gets the project's other run-time dependencies as wheels
# (gymnasium, Stable-Baselines3, sb3-contrib, qpsolvers with its Clarabel and DAQP back-ends), at the versions
# this checkout's .venv holds (else pip's newest that fits pyproject.toml), for CPython $PY_VERSION on
# manylinux x86-64, without their dependencies (all of them are in the list or on that image). torch is never
# fetched: the GPU machine's own CUDA build is used. Where Debian's Fashion-MNIST is installed here, its four
# files are copied to DIR/fashion-mnist (30 MB), for FAVOR's preset on the GPU machine.
#
# Environment: PY_VERSION (default 3.12), PIP (default: .venv/bin/python -m pip, else python3 -m pip),
# EXTRA="name==version ..." to fetch more wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.wheels}
PY_VERSION=${PY_VERSION:-3.12}
if [ -z "${PIP:-}" ]; then
    if [ -x .venv/bin/python ]; then PIP=".venv/bin/python -m pip"; else PIP="python3 -m pip"; fi
fi
PYTHON=${PIP% -m pip}
mkdir -p "$DIR"

# name, and the bound from pyproject.toml used when the local .venv does not have it
NAMES="gymnasium farama-notifications stable-baselines3 sb3-contrib qpsolvers clarabel daqp"
declare -A BOUND=([gymnasium]=">=1.0,<2" [stable-baselines3]=">=2.4,<3" [sb3-contrib]=">=2.9,<2.10"
                  [qpsolvers]=">=4.3" [farama-notifications]="" [clarabel]="" [daqp]="")
specs=()
for name in $NAMES; do
    version=$($PYTHON -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null || true)
    if [ -n "$version" ]; then specs+=("$name==$version"); else specs+=("$name${BOUND[$name]}"); fi
done
for extra in ${EXTRA:-}; do specs+=("$extra"); done

echo "wheels.sh: fetching ${specs[*]} for CPython $PY_VERSION (manylinux x86-64) into $DIR"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64 any; do platforms+=(--platform "$p"); done
$PIP download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    "${platforms[@]}" -d "$DIR" "${specs[@]}"

FMNIST=/usr/share/datasets/fashion-mnist
if [ -d "$FMNIST" ] && [ ! -d "$DIR/fashion-mnist" ]; then
    mkdir -p "$DIR/fashion-mnist"
    cp "$FMNIST"/*-ubyte* "$DIR/fashion-mnist/"
    echo "wheels.sh: copied Debian's Fashion-MNIST ($FMNIST) to $DIR/fashion-mnist"
fi
du -sh "$DIR"
ls -1 "$DIR"
