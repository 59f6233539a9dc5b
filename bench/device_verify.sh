#!/usr/bin/env bash
# Run on the device machine from the repo root, with wheels for platformdirs/unidiff/GitPython
# (and packaging, which verify's plugin reads expectations with)
# in .whl/ and slim baked trees (vllm/ files the loader reads, plus .bakery/) in .devtrees/<release>/.
# bakery verify (no --interpret) on the device's GPU, every release the series bakes on.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi -L
# the fixed costs of the GPU host's processes (imports, CUDA start, rank pools)
[ -n "${SKIP_PROFILE:-}" ] || python3 bench/verify_profile.py --gpu
python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count())'
# the GPUs bakery finds without importing torch (gpus.py) are the ones torch sees
python3 -m pytest -q -p no:cacheprovider --noconftest -c /dev/null --rootdir=. tests/testing/test_gpus.py 2>&1 | tail -2
# .devtrees/<release>-fixed/: a bake with the proposed fixes (bakery apply --with-fixes), if copied;
# .devtrees/pristine-<release>/: the pristine release, for the pristine oracle (the device
# has no bakery cache to take it from). --env light: the device reaches no package index,
# so vLLM's requirements cannot be installed there (the full environment is built on hosts
# that reach one). Each tree runs three times: Triton's compile cache cold, warm (both
# --no-reuse: the tests really run), and once more with the recorded result reused.
export BAKERY_CACHE_DIR=/tmp/bakery-cache
# RELEASES="0.34.0": only these trees (a short call; the device's time is counted).
RELEASES=${RELEASES:-"0.30.0 0.31.0 0.32.0 0.33.0 0.34.0 0.30.0-fixed 0.31.0-fixed 0.32.0-fixed 0.33.0-fixed 0.34.0-fixed"}
for v in $RELEASES; do
  [ -d .devtrees/$v ] || continue
  p=.devtrees/pristine-${v%-fixed}
  extra=""; [ -d "$p" ] && extra="--bakery-pristine=$PWD/$p"
  for run in cold warm reused; do
    reuse="--no-reuse"; [ $run = reused ] && reuse=""
    echo "=== bakery verify dcp2 --tree .devtrees/$v (vLLM $v, GPU, Triton cache $run)"
    s=$(date +%s.%N)
    python3 -m bakery verify dcp2 --tree .devtrees/$v --env light $reuse -- -q -p no:randomly $extra > /tmp/verify-$v-$run.log 2>&1
    rc=$?
    e=$(date +%s.%N)
    tail -4 /tmp/verify-$v-$run.log
    echo "exit $rc, wall $(python3 -c "print(round($e-$s,1))") s"
  done
done
# .devtrees/src-before/{src,launcher}: bakery's code and the series' tests before a change
# (git archive REV src launcher patches); the warm run of each baked tree alternates them
# with today's (before, today, before, today), in this one script.
if [ -d .devtrees/src-before/src ]; then
  for v in 0.30.0 0.34.0; do
    [ -d .devtrees/$v ] && [[ " $RELEASES " == *" $v "* ]] || continue
    p=.devtrees/pristine-$v
    extra=""; [ -d "$p" ] && extra="--bakery-pristine=$PWD/$p"
    for code in before today before today; do
      src=$PWD/src; home=$PWD; [ $code = before ] && src=$PWD/.devtrees/src-before/src
      [ $code = before ] && [ -d .devtrees/src-before/launcher ] && home=$PWD/.devtrees/src-before
      s=$(date +%s.%N)
      # -p verify_timeline: when each phase of the pytest process ended (bench/verify_timeline.py)
      BENCH_T0=$s BAKERY_HOME=$home PYTHONPATH=/tmp/site:$src:$PWD/bench python3 -m bakery verify dcp2 --tree .devtrees/$v --env light --no-reuse -- -q -p no:randomly -p verify_timeline --durations=25 $extra > /tmp/ab-$v-$code.log 2>&1
      rc=$?
      e=$(date +%s.%N)
      echo "=== warm verify $v, code $code: exit $rc, wall $(python3 -c "print(round($e-$s,1))") s; $(grep -E "^(verified|tests failed|not verified)" /tmp/ab-$v-$code.log | tail -1)"
    done
  done
fi
[ -n "${SKIP_TIMING:-}" ] && exit 0
for v in 0.30.0 0.34.0; do
  echo "=== DCP path vs single-rank path, vLLM $v (H200)"
  timeout 150 python3 bench/dcp_timing.py --tree .devtrees/$v --reps 20 2>&1 | tail -6
done
