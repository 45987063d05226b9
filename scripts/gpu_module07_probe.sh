#!/usr/bin/env bash
# Module 07 on a lent GPU in one call: install the carried wheels, record the versions the
# code-generation cache is keyed on, run scripts/gpu_module07_probe.py, and return the logs and
# the cache. Arguments go to the probe (e.g. --jobs "fused:2048;fused:4096": jobs are split on ";").
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl nvmath-python nvidia-libmathdx-cu13 \
    nvidia-cuda-cccl "numpy<2.5" || exit 1
fi
out=${OUT:-/tmp}
python3 -m pip list 2>/dev/null | grep -i -E "nvidia|cuda|nvmath|numba|numpy|cupy|torch" > "$out/versions.txt"
nvidia-smi -L >> "$out/versions.txt" 2>&1
export PYTHONPATH=$PWD/utilities:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
export CUBLAS_EMULATION_STRATEGY=${CUBLAS_EMULATION_STRATEGY:-eager}  # emulate even where native FP64 is fast (the peer row)
export KERNEL_LAB_CACHE_DIR=${KERNEL_LAB_CACHE_DIR:-/tmp/klcache}
if [ -d .klcache ]; then mkdir -p "$KERNEL_LAB_CACHE_DIR" && cp -r .klcache/. "$KERNEL_LAB_CACHE_DIR/"; fi
python3 scripts/gpu_module07_probe.py --out "$out" "$@" 2>&1 | tee "$out/probe.log"
rc=${PIPESTATUS[0]}
du -sh "$KERNEL_LAB_CACHE_DIR"
cat "$out/versions.txt"
exit $rc
