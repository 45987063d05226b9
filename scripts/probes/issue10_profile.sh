#!/usr/bin/env bash
# Issue 10's open questions in one GPU call: the persistent pipeline on ragged shapes, and Nsight
# Compute on the fp16 pipeline at 4096^3 (persistent and not) and the int8 one.
#   OUT=/some/dir scripts/probes/issue10_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/issue10}; mkdir -p "$out"
export PYTHONPATH=$PWD/utilities KERNEL_LAB_CACHE_DIR=${KERNEL_LAB_CACHE_DIR:-/tmp/klcache} PYTHONUNBUFFERED=1
if ! python3 -c "import nvmath" 2>/dev/null && [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl nvmath-python nvidia-libmathdx-cu13 nvidia-cuda-cccl \
    nbval nbclient ipykernel "numpy<2.5" || exit 1
fi
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
timeout ${COMPILE_S:-300} python3 scripts/probes/pipeline_ncu.py compile > "$out/compile.log" 2>&1; echo "compile rc $?"
timeout 90 python3 scripts/probes/pipeline_ncu.py ragged > "$out/ragged.log" 2>&1; echo "ragged rc $?"
i=0
for c in float16:128,256,64,256,4,p8 float16:128,256,64,256,4 int8:128,256,128,256,3,p8; do
  i=$((i + 1))
  [ -n "$NCU" ] && timeout 120 "$NCU" -k regex:kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section LaunchStats python3 scripts/probes/pipeline_ncu.py run "$c" > "$out/ncu_$i.txt" 2>&1
  echo "ncu $c rc $?"
done
