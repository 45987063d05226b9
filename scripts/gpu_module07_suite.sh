#!/usr/bin/env bash
# Store notebook outputs on a lent GPU in one call, module 07's included, in as little time as the
# cuBLASDx code generation allows:
#   1. in the background, compile module 07's pipeline kernels for every shape its notebooks use, in
#      parallel processes (code generation is CPU work: it costs the time of the slowest job and
#      fills the on-disk cache, so the notebooks then compile each kernel in seconds);
#   2. meanwhile, store the outputs of the other notebooks given (their GPU timings are not disturbed
#      by compilers running on the CPU);
#   3. store module 07's notebooks, regenerate course/, and return solutions/ and the logs.
# Usage: scripts/gpu_module07_suite.sh [notebook ...]   (module-07 notebooks go last automatically)
# With $OUT set, solutions.tar.gz and the logs are written there.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl nvmath-python nvidia-libmathdx-cu13 \
    nvidia-cuda-cccl nbval nbclient ipykernel "numpy<2.5" || exit 1
fi
export PYTHONPATH=$PWD/utilities:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
export KERNEL_LAB_CACHE_DIR=${KERNEL_LAB_CACHE_DIR:-/tmp/klcache}
export CUBLAS_EMULATION_STRATEGY=${CUBLAS_EMULATION_STRATEGY:-eager}
mkdir -p "${OUT:-/tmp}/failed"
export KERNEL_LAB_FAILED_DIR=${OUT:-/tmp}/failed  # what a failing notebook ran, for diagnosis
logs=${OUT:-/tmp}
t0=$(date +%s)

python3 scripts/warm_module07.py > "$logs/warm07.log" 2>&1 &
warm=$!

others=(); mod07=()
for nb in "$@"; do
  case "$nb" in  # 07.1 and 07.2 use no pipeline kernel: they run while the cache warms
    *07.1-*|*07.2-*) others+=("$nb");; *07-fp64-emulation*) mod07+=("$nb");; *) others+=("$nb");;
  esac
done
rc=0
if [ ${#others[@]} -gt 0 ]; then
  python3 -m kernel_lab.store_outputs "${others[@]}" 2>&1 | grep -v IPKernelApp | tee -a "$logs/suite.log" || rc=1
  [ -n "${OUT:-}" ] && tar czf "$OUT/solutions07.tar.gz" solutions/07-fp64-emulation
fi
wait $warm
echo "warm-up done at $(( $(date +%s) - t0 )) s" | tee -a "$logs/suite.log"; tail -10 "$logs/warm07.log"
for nb in "${mod07[@]}"; do  # one at a time, in the order given; each one's outputs come back at once
  python3 -m kernel_lab.store_outputs "$nb" 2>&1 | grep -v IPKernelApp | tee -a "$logs/suite.log" || rc=1
  [ -n "${OUT:-}" ] && tar czf "$OUT/solutions07.tar.gz" solutions/07-fp64-emulation
done
echo "stored at $(( $(date +%s) - t0 )) s" | tee -a "$logs/suite.log"
python3 -m kernel_lab.exercises >> "$logs/suite.log" 2>&1
[ -n "${OUT:-}" ] && tar czf "$OUT/solutions.tar.gz" solutions course
# Optionally check notebooks against the outputs just stored, if the call has time left:
# NBVAL_AFTER="nb1 nb2" NBVAL_DEADLINE=seconds since the start (default 420).
if [ -n "${NBVAL_AFTER:-}" ] && [ $(( $(date +%s) - t0 )) -lt "${NBVAL_DEADLINE:-420}" ]; then
  python3 -m pytest -p no:randomly -q ${NBVAL_AFTER} 2>&1 | tail -15 | tee -a "$logs/suite.log"
fi
exit $rc
