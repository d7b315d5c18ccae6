#!/usr/bin/env bash
# On the H200 machine: the launchers' host overhead and the fast path's GPU tests.
# Run from the repository root with the wheels of /work/shared/DEVICE.md carried as .whl (numpy 2.4: the
# machine's numpy 2.5 breaks numba-cuda 0.30). Writes into $OUT (the device tool's folder that comes back).
#
#   bash benchmarks/overhead_h200.sh bench   # ~1-2 min, most of it compiling: the rows, the figure
#   bash benchmarks/overhead_h200.sh tests   # the gpu-marked tests of the fast path, streams and graphs
#   bash benchmarks/overhead_h200.sh         # both
#
# Then commit $OUT/h200-overhead.json as benchmarks/results/h200-overhead.json and $OUT/overhead_stages.png as
# docs/figures/overhead_stages.png; `gpukernels bench --overhead --from-json F` prints the table again.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
OUT=${OUT:-/tmp/overhead-out}
mkdir -p "$OUT"
export GPUKERNELS_DEVICE=gpu
what=${1:-all}
rc=0
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout 300 python3 -m gpukernels bench --overhead --json "$OUT/h200-overhead.json" \
    --figure "$OUT/overhead_stages.png" > "$OUT/overhead.txt" 2> "$OUT/overhead.log" || rc=1
  cat "$OUT/overhead.txt"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 500 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup -rfE \
    tests/test_launch_fast.py tests/test_streams.py tests/test_overhead.py > "$OUT/tests18.log" 2>&1 || rc=1
  tail -30 "$OUT/tests18.log"
fi
exit $rc
