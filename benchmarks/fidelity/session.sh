#!/usr/bin/env bash
# One device call for the fidelity work: build the CLI, the GPU tests and graph_speedup against the
# machine's LibTorch, run the GPU tests of the named areas, the fidelity training runs and graph_speedup.
# Logs go to /tmp/L and come back as $OUT/logs.tgz (the device returns at most 8 files).
#   benchmarks/fidelity/session.sh "AREAS" [fidelity] [graphs] [key=value ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; L=/tmp/L; mkdir -p $L
areas=$1; shift
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
B=build-cuda
pack() { tar czf $OUT/logs.tgz -C $L . 2>/dev/null; }
targets="libreyolo_cli"; for a in $areas; do targets="$targets test_$a"; done
do_fid=0; do_graphs=0; extra=()
for x in "$@"; do case $x in fidelity) do_fid=1;; graphs) do_graphs=1; targets="$targets graph_speedup";; *) extra+=("$x");; esac; done
t0=$(date +%s)
timeout 420 scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF -- -k 0 $targets > $L/build.log 2>&1
echo "build rc=$? in $(( $(date +%s) - t0 ))s"; grep -E "error|FAILED" $L/build.log | head -20; pack
for a in $areas; do
  timeout 300 $B/tests/test_$a --test-suite=gpu > $L/gpu_$a.log 2>&1; echo "gpu $a rc=$? $(grep 'test cases' $L/gpu_$a.log)"
  grep -E "ERROR|FATAL" -A3 $L/gpu_$a.log | head -20; grep -E "MESSAGE" -A1 $L/gpu_$a.log | grep -v skipped | head -10; pack
done
if [ $do_fid = 1 ]; then benchmarks/fidelity/run.sh $B $L/fid "${extra[@]}"; pack; fi
if [ $do_graphs = 1 ]; then
  timeout 420 benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
  echo "graph_speedup rc=$?"; tail -8 $L/graph_speedup.txt; pack
fi
