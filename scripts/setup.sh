#!/usr/bin/env bash
# Set up fedsel on a fresh Debian machine: system packages, a virtualenv in .venv, the project, its test
# tools and the Flower, Ray, MO-Gymnasium and rl-zoo3 extras.
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  # Fashion-MNIST from Debian (offline data for the FAVOR preset) and tcmalloc (a faster allocator for the CNNs).
  if ! [ -d /usr/share/datasets/fashion-mnist ] || ! ldconfig -p | grep -q libtcmalloc_minimal; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq dataset-fashion-mnist libtcmalloc-minimal4 >/dev/null
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned: this machine holds these wheels locally; a looser requirement downloads several GB.
.venv/bin/python -c "import torch, torchvision" 2>/dev/null \
  || .venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
.venv/bin/python -m pip install -q -e ".[test,flower,ray,mo,zoo]"
echo "fedsel is set up in .venv"
