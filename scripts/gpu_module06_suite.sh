#!/usr/bin/env bash
# Module 06 on a GPU machine, in as few calls as the lent GPU's 10-minute limit allows:
#   1. fill the cuBLASDx code-generation cache for every kernel the notebooks build, side by side
#      (the smoke script's compile phase, which also runs each kernel's small check, next to the
#      compilation of 06.4's tuning candidates); skipped with SKIP_WARM=1 when the cache is warm;
#   2. store the outputs of the notebooks given as arguments (nbval's reference).
# Usage: scripts/gpu_module06_suite.sh solutions/06-tensor-cores/06.1*.ipynb ...
# The cache lives in $KERNEL_LAB_CACHE_DIR (default /tmp/klcache): later calls on the same machine
# find it warm. With $OUT set, the logs and solutions06.tar.gz are written there.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then  # a machine without network: the carried wheels (see gpu_suite.sh)
  python3 -m pip install -q --no-index --find-links .whl nvmath-python nvidia-libmathdx-cu13 \
    nvidia-cuda-cccl nbval nbclient ipykernel "numpy<2.5" || exit 1
fi
export PYTHONPATH=$PWD/utilities:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
export KERNEL_LAB_CACHE_DIR=${KERNEL_LAB_CACHE_DIR:-/tmp/klcache}
logs=${OUT:-/tmp}

if [ -z "${SKIP_WARM:-}" ]; then
  t0=$(date +%s)
  python3 scripts/gpu_module06_smoke.py --compile-only --budget 420 --cache-dir "$KERNEL_LAB_CACHE_DIR" \
    --only block_fp16,block_fp16_acc,block_bf16,block_tf32,block_int8,block_int8_quantize,block_int4_w4a8,epi_linear,epi_bias_relu,epi_row_softmax,batched_fp16,conv_implicit,pipeline_int8,pipeline_fp16,pipeline_fp16_bias_gelu \
    > "$logs/warm.log" 2>&1 &
  python3 scripts/gpu_module06_tuner_warm.py > "$logs/warm_tuner.log" 2>&1 &  # 06.4's candidates
  wait
  echo "warm-up took $(( $(date +%s) - t0 )) s"; tail -3 "$logs/warm.log"; tail -8 "$logs/warm_tuner.log"
fi
[ $# -eq 0 ] && exit 0
python3 -m kernel_lab.store_outputs "$@" 2>&1 | tee "$logs/store.log"
rc=${PIPESTATUS[0]}
[ -n "${OUT:-}" ] && tar czf "$OUT/solutions06.tar.gz" solutions/06-tensor-cores
exit $rc
