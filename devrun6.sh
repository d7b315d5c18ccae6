set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export GPUKERNELS_DEVICE=gpu
cat > /tmp/san.py <<'PY'
import numpy as np, sys
from gpukernels import tensor_core as tc
from gpukernels.check import compare
bad = 0
for shape in [(33, 17, 31), (256, 264, 72), (130, 129, 70), (300, 260, 1000)]:
    a, b = tc.make_inputs(shape, seed=1, dtype=np.float32)
    out = np.full(shape[:2], np.nan, np.float32)
    tc.tf32x3(a, b, out=out)
    c = compare(out, tc.reference(a, b), 1e-5); bad += not c.ok
    print("tf32x3", shape, c, flush=True)
sys.exit(1 if bad else 0)
PY
timeout 60 compute-sanitizer --tool racecheck python3 /tmp/san.py 2>&1 | grep -v "Warn\|warn(" > /tmp/san.txt; echo "race rc=$?" >> /tmp/san.txt
timeout 60 compute-sanitizer --tool memcheck --report-api-errors no python3 /tmp/san.py 2>&1 | grep -v "Warn\|warn(" >> /tmp/san.txt; echo "mem rc=$?" >> /tmp/san.txt
cat /tmp/san.txt
timeout 300 python3 -m gpukernels bench tensor_core --json $OUT/h200-tc.json > /tmp/bench.txt 2>&1; echo "bench rc=$?"; tail -45 /tmp/bench.txt | cut -c1-150
{ cat /tmp/san.txt; echo; cat /tmp/bench.txt; } > $OUT/run6.log
