#!/usr/bin/env bash
# Warm GPU verify of one baked tree, today's code against the code before a change, and the
# host's own costs (byte code, pytest plugins), in one script on the device (issue 27).
# Run from the repo root on the device machine, with what device_verify.sh needs: wheels in
# .whl/, the slim bake in .devtrees/$V/, the pristine release in .devtrees/pristine-$V/,
# and the code before in .devtrees/src-before/ (git archive REV src launcher patches).
#   V=0.34.0 bash bench/device_ab.sh        (writes $OUT/summary.txt, timelines.txt, logs.tgz)
# Each run: `bakery verify --no-reuse` (the tests really run; Triton's cache warm after the
# first, cold, run) with bench/verify_timeline.py's timeline of its pytest process.
# RUNS names the runs, in order; a run is NAME:CODE[:ENV=VALUE...] (CODE: today, or X for
# the code in .devtrees/src-X/, made the same way as src-before).
# Two steps may sit between runs: compile-site (byte code for bakery and the wheels, as pip
# would write it) and compile-torch (byte code for torch and Triton, which the device's
# image ships without while it sets PYTHONDONTWRITEBYTECODE=1).
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 BAKERY_CACHE_DIR=/tmp/bakery-cache
V=${V:-0.34.0}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/logs
S=$OUT/summary.txt; TL=$OUT/timelines.txt
RUNS=${RUNS:-"cold:today warm-today-1:today warm-before-1:before warm-today-2:today warm-before-2:before
  noautoload-1:today:PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 noautoload-2:today:PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
  warm-today-cuda:today:BENCH_WARM_CUDA=1 reused:today
  pyc-write:today:PYTHONDONTWRITEBYTECODE=:PYTHONPYCACHEPREFIX=/tmp/pyc
  pyc-read:today:PYTHONDONTWRITEBYTECODE=:PYTHONPYCACHEPREFIX=/tmp/pyc
  compile-site compiled-today-1:today compiled-before-1:before
  compiled-noautoload:today:PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
  compile-torch torchpyc-today:today torchpyc-before:before"}

td=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
tr=$(python3 -c 'import triton, os; print(os.path.dirname(triton.__file__))')
{
  nvidia-smi -L
  echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset} PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX-unset} cores $(nproc)"
  python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count())'
  echo "torch byte code: $(find "$td" -name '*.pyc' | wc -l) .pyc for $(find "$td" -name '*.py' | wc -l) .py"
  PYTHONPATH=/tmp/site:$PWD/src python3 -m pytest -VV 2>&1 | grep -A30 "third-party plugins"
} 2>&1 | tee -a "$S"

seconds() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$@"; }
one() { # NAME CODE [ENV=VALUE...]; reused: the recorded result taken
  name=$1; code=$2; shift 2
  src=$PWD/src; home=$PWD
  [ "$code" != today ] && src=$PWD/.devtrees/src-$code/src && home=$PWD/.devtrees/src-$code
  reuse=--no-reuse; [ "$name" = reused ] && reuse=""
  s=$(date +%s.%N)
  # an empty VALUE unsets the variable (PYTHONDONTWRITEBYTECODE= : byte code written)
  envs=(); for kv in "$@"; do [ -z "${kv#*=}" ] && envs+=(-u "${kv%=}") || envs+=("$kv"); done
  /usr/bin/time -f "%e s wall, %U user + %S sys" -o "/tmp/logs/time-$name" \
    env "${envs[@]}" BENCH_T0="$s" BAKERY_HOME="$home" PYTHONPATH="/tmp/site:$src:$PWD/bench" \
    python3 -m bakery verify dcp2 --tree ".devtrees/$V" --env light $reuse -- -q -p no:randomly \
    -p verify_timeline --durations=15 "--bakery-pristine=$PWD/.devtrees/pristine-$V" \
    > "/tmp/logs/$name.log" 2>&1
  echo "=== $name: exit $?, $(cat "/tmp/logs/time-$name"); $(grep -E '^(verified|tests failed|not verified)' "/tmp/logs/$name.log" | tail -1)" | tee -a "$S"
  { echo "=== $name"; grep -E '^timeline|^[0-9.]+s +(call|setup|teardown)' "/tmp/logs/$name.log"; } >> "$TL"
}
for run in $RUNS; do
  s=$(date +%s.%N)
  case $run in
    compile-site) python3 -m compileall -q -j 0 /tmp/site src .devtrees/src-*/src > /dev/null
      echo "compile-site: $(seconds "$s" "$(date +%s.%N)") s" | tee -a "$S" ;;
    compile-torch) python3 -m compileall -q -j 0 "$td" "$tr" > /dev/null
      echo "compile-torch: $(seconds "$s" "$(date +%s.%N)") s, $(find "$td" -name '*.pyc' | wc -l) .pyc in torch" | tee -a "$S" ;;
    *) IFS=: read -r -a parts <<< "$run"; one "${parts[@]}" ;;
  esac
done
tar -czf "$OUT/logs.tgz" -C /tmp logs
