#!/usr/bin/env bash
# One call of a lent-GPU session that stores notebook outputs under a deadline, for sessions whose
# device time is short and whose machine stays warm between calls:
#   - installs the carried wheels (.whl/) once per machine,
#   - starts, once per machine and in its own process session (so it outlives this call), the
#     cuBLASDx compile-cache warm-up for modules 07 then 06 (kernel_lab.tensor_cores.warm), so the
#     notebooks of those modules compile their kernels in seconds when their turn comes,
#   - stores each notebook given, in order, skipping any that would start after the deadline and
#     stopping one that would run past it; a module 06/07 notebook waits for its warm-up first,
#   - skips a notebook this machine already ran in an earlier call (stored or failed; RETRY="nb ..."
#     runs those again), so every call can name the whole list,
#   - returns, after every notebook, the notebooks stored so far (stored.tar.gz), the failed
#     notebooks' partial runs (failed/), and the logs.
# Usage: DEADLINE=560 [WARM=0] [MEMORY=1] scripts/gpu_session.sh notebook ...
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
deadline=${DEADLINE:-560}
out=${OUT:-/tmp/gpu_session}; mkdir -p "$out/failed"
export PYTHONPATH=$PWD/utilities:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
export KERNEL_LAB_CACHE_DIR=${KERNEL_LAB_CACHE_DIR:-/tmp/klcache}
export KERNEL_LAB_FAILED_DIR=$out/failed
export CUBLAS_EMULATION_STRATEGY=${CUBLAS_EMULATION_STRATEGY:-eager}
log=$out/session.log
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$log"; }

# WARM=0 (no module 06/07 notebook follows): nvmath-python and MathDx are not needed, nor carried.
if [ "${WARM:-1}" = 1 ]; then mathdx="nvmath-python nvidia-libmathdx-cu13 nvidia-cuda-cccl"; probe="import nvmath, nbclient, nbval"
else mathdx=""; probe="import nbclient, nbval, ipykernel"; fi
if ! python3 -c "$probe" 2>/dev/null && [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl $mathdx nbval nbclient ipykernel "numpy<2.5" || exit 1
  say "wheels installed"
fi
warm_dir=/tmp/kl_warm
if [ "${WARM:-1}" = 1 ] && [ ! -d $warm_dir ]; then  # WARM=0: no module 06/07 notebook follows
  mkdir -p $warm_dir
  # WARM_MODULES="06": only module 06 (07's notebooks already stored). The catalogue holds module
  # 06's block GEMMs and stage loop besides the pipelines (kernel_lab.tensor_cores.warm.catalogue).
  # WARM_ONLY="text;text": only the catalogue's jobs whose labels hold one of these texts (the
  # kernels of the notebooks this session stores), so the warm-up ends sooner
  only=""
  IFS=';' read -ra texts <<< "${WARM_ONLY:-}"
  for t in "${texts[@]}"; do only+=" --only '$t'"; done
  cmd=""
  for m in ${WARM_MODULES:-07 06}; do
    cmd+="python3 -m kernel_lab.tensor_cores.warm --arch sm_90 --modules $m$only > $warm_dir/$m.log 2>&1; touch $warm_dir/$m.done; "
  done
  setsid bash -c "$cmd" < /dev/null > /dev/null 2>&1 &
  say "warm-up started (${WARM_MODULES:-07 06})"
fi

stored=(); failed=0; done_dir=/tmp/kl_done; mkdir -p $done_dir
# MEMORY=1: also the peak GPU memory of each notebook (as scripts/gpu_notebook_memory.py measures it,
# with Numba freeing at once), into session.log and memory.tsv; nothing else may use the GPU meanwhile
[ "${MEMORY:-0}" = 1 ] && export NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT=0
for nb in "$@"; do
  mark=$done_dir/$(basename "$nb")
  if [ -f "$mark" ] && [[ " ${RETRY:-} " != *" $nb "* ]]; then continue; fi
  # 07.6 is NumPy only: it waits for no warm-up
  case "$nb" in *06-tensor-cores*) need=06;; *07.3-*|*07.4-*|*07.5-*) need=07;; *) need="";; esac
  while [ -n "$need" ] && [ ! -f $warm_dir/$need.done ] && [ $(( $(date +%s) - t0 )) -lt $(( deadline - 60 )) ]; do
    sleep 5
  done
  left=$(( deadline - ($(date +%s) - t0) ))
  if [ $left -lt 45 ]; then say "SKIPPED (deadline) $nb"; continue; fi
  say "start $nb (${left} s left)"
  if [ "${MEMORY:-0}" = 1 ]; then  # sample the GPU's used memory while the notebook runs
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits --id=0 | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits --id=0 -lms 200 > "$out/mem.samples" &
    sampler=$!
  fi
  timeout -s INT -k 20 $left python3 -m kernel_lab.store_outputs "$nb" 2>&1 | grep -v IPKernelApp | tee -a "$log"
  if [ "${PIPESTATUS[0]}" = 0 ]; then stored+=("$nb"); else failed=$((failed + 1)); fi
  if [ "${MEMORY:-0}" = 1 ]; then
    kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
    peak=$(sort -n "$out/mem.samples" | tail -1)
    say "memory $nb: peak $(( peak - base )) MiB above the $base MiB in use before it started"
    printf '%s\t%s\t%s\n' "$nb" "$(( peak - base ))" "$base" >> "$out/memory.tsv"
  fi
  touch "$mark"
  [ ${#stored[@]} -gt 0 ] && tar czf "$out/stored.tar.gz" "${stored[@]}"
  cp $warm_dir/*.log "$out/" 2>/dev/null
done
say "done: ${#stored[@]} of $# stored, $failed failed"
for f in $warm_dir/*.log; do [ -f "$f" ] && tail -3 "$f" | tee -a "$log"; done
exit $(( failed > 0 ))  # 0 unless a notebook failed (one skipped as already run, or for the deadline, is not)
