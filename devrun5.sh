set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export GPUKERNELS_DEVICE=gpu
t0=$(date +%s)
timeout 170 python3 notebooks/run_all.py --inplace --timings notebooks/05_tensor_cores.ipynb > /tmp/nb.txt 2>&1; echo "nb rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/nb.txt
cp notebooks/05_tensor_cores.ipynb $OUT/
(while true; do cat /proc/loadavg >> /tmp/load.txt; sleep 5; done) & LP=$!
t1=$(date +%s)
mkdir -p /tmp/tl; GPUKERNELS_TEST_TIMELINE=/tmp/tl timeout 380 python3 -m pytest -q -n 16 --dist loadgroup --timeout 350 -p no:cacheprovider --durations=15 -rfE --junitxml=$OUT/gpu-suite.xml tests > /tmp/suite.txt 2>&1; echo "suite rc=$? $(( $(date +%s) - t1 )) s"
kill $LP
{ cat /tmp/nb.txt; echo ----; cat /tmp/suite.txt; echo ---- load; sort -k1 -n -r /tmp/load.txt | head -3; } > $OUT/suite.log
grep -E "passed|failed|FAILED|ERROR" /tmp/suite.txt | tail -15
