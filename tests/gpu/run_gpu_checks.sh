#!/usr/bin/env bash
# Real-GPU checks of accelctl-cuda, for a machine with a GPU and no network.
#
#   tests/gpu/run_gpu_checks.sh prepare [DIR]   # here, with network: wheels of accelctl (its
#                                               # conformance kit inside, which the tests'
#                                               # conftest uses), its in-repo plugins and
#                                               # pytest into DIR
#   tests/gpu/run_gpu_checks.sh [DIR]           # on the GPU machine: install DIR's wheels with
#                                               # --no-deps into a private folder, then run
#
# The GPU machine needs Python >= 3.10 with torch (a CUDA build), pluggy, click, psutil and
# nvidia-ml-py already installed; nothing is downloaded there. DIR defaults to build/gpu-wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${PYTHON:-python3}"

if [ "${1:-}" = "prepare" ]; then
    wheels="${2:-build/gpu-wheels}"
    mkdir -p "$wheels"
    "$py" -m pip wheel --quiet --no-deps -w "$wheels" . plugins/cpu plugins/cuda plugins/mps
    # pytest and its pure-Python dependencies (pluggy is on the GPU machine already).
    "$py" -m pip download --quiet --only-binary=:all: --no-deps -d "$wheels" \
        pytest iniconfig packaging pygments
    ls "$wheels"
    exit 0
fi

wheels="${1:-build/gpu-wheels}"
ls "$wheels"/accelctl-*.whl "$wheels"/accelctl_cuda-*.whl >/dev/null
site="$(mktemp -d)/site"
"$py" -m pip install --quiet --no-deps --no-index --target "$site" "$wheels"/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$site/bin:$PATH"
unset ACCELCTL_ACCELERATOR ACCELCTL_PLUGINS ACCELCTL_DISABLE ACCELCTL_DEVICES

echo "== accelctl env"
"$py" -c 'from accelctl.cli import main; main()' env
echo "== accelctl list (timed; a fresh process)"
time "$py" -c 'from accelctl.cli import main; main()' list
echo "== accelctl stats cuda"
"$py" -c 'from accelctl.cli import main; main()' stats cuda || echo "(stats exited $?)"
echo "== pytest -m cuda tests/gpu"
# -p no:cacheprovider: the checkout may be read-only; the root pyproject's pytest settings apply.
"$py" -m pytest -p no:cacheprovider -m cuda tests/gpu -v -rA
