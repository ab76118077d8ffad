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
# The pinned build unpacks to about 5.6 GB (4.1 GB of it CUDA libraries): check the disk first, so that a
# full disk is named as such instead of surfacing as pip's OSError halfway through the install.
NEED_MB=7000
if ! .venv/bin/python -c "import torch, torchvision" 2>/dev/null; then
  FREE_MB=$(df -Pm .venv | awk 'NR==2 {print $4}')
  if [ -n "$FREE_MB" ] && [ "$FREE_MB" -lt "$NEED_MB" ]; then
    echo "setup: torch 2.14.1 needs about ${NEED_MB} MB free on the disk that holds $(pwd)/.venv; only" \
         "${FREE_MB} MB are free. Free some space (old clones' .venv folders, runs/, pip's cache:" \
         "\`pip cache purge\`) and run scripts/setup.sh again." >&2
    exit 1
  fi
  .venv/bin/python -m pip install -q --no-cache-dir torch==2.14.1 torchvision==0.29.1
fi
.venv/bin/python -m pip install -q --no-cache-dir -e ".[test,flower,ray,mo,zoo]"
echo "fedsel is set up in .venv"
