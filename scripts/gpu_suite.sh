#!/usr/bin/env bash
# The whole suite on a GPU machine, in one call:
#   1. run every solution notebook at full size and store its outputs (nbval's reference),
#   2. list the readings (prose) that the fresh outputs contradict, sentence by sentence
#      (readings.log; the readings test fails on them too),
#   3. regenerate course/ from solutions/,
#   4. run pytest: unit tests on the GPU, and nbval on every notebook against the fresh outputs.
# Usage: scripts/gpu_suite.sh [notebook ...]      (default: all notebooks)
#        PYTEST_ARGS="..." scripts/gpu_suite.sh ...  (extra pytest arguments)
# With $OUT set (the course's lent-GPU workflow), the refreshed solutions/ and the logs are copied
# there as solutions.tar.gz, store.log, readings.log and pytest.log.
set -uo pipefail
cd "$(dirname "$0")/.."

# A machine without network: install the carried wheels (.whl/) into this Python when present.
# (Into the environment itself, not a --target folder: cuda.pathfinder looks for libmathdx and
# the CCCL headers under the environment's own nvidia/ folder.)
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl nvmath-python nvidia-libmathdx-cu13 \
    nvidia-cuda-cccl nbval nbclient ipykernel "numpy<2.5" || exit 1
fi
export PYTHONPATH=$PWD/utilities:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
logs=${OUT:-/tmp}

python3 -m kernel_lab.store_outputs "$@" 2>&1 | tee "$logs/store.log"
store_rc=${PIPESTATUS[0]}
python3 -m kernel_lab.readings "$@" > "$logs/readings.log" 2>&1  # the sentences to update, if any
tail -n 1 "$logs/readings.log"
python3 -m kernel_lab.exercises
python3 -m kernel_lab.benchmarks_page  # BENCHMARKS.md follows the new outputs
if [ -n "${OUT:-}" ]; then  # before the tests, so a run cut short still returns the new outputs
  tar czf "$OUT/solutions.tar.gz" solutions course BENCHMARKS.md
fi
# PYTEST_ARGS narrows the run, e.g. PYTEST_ARGS="--ignore=solutions/01-gpu-in-practice".
python3 -m pytest -p no:randomly ${PYTEST_ARGS:-} 2>&1 | tee "$logs/pytest.log"
test_rc=${PIPESTATUS[0]}
echo "store_outputs exit $store_rc, pytest exit $test_rc"
exit $(( store_rc || test_rc ))
