#!/usr/bin/env bash
# Session 30's lean device call (little device time left after refused starts; carry .deps; COMMIT=): the step
# area's runner and graph_speedup only (not every test unit), then in priority order:
#   1. the two new GPU cases of issue 44's segmented step (machinery bit for bit; D-FINE-n fp32/AMP and
#      RT-DETR-r18 AMP against the graph-less path);
#   2. graph_speedup eager / graph / step at b4 640: D-FINE-n fp32 and fp16, RT-DETR-r18 fp16;
#   3. the step area's whole GPU suite.
# TARGETS="test_step" ONLY_CASES=1: build the step runner only and stop after 1 (a budget of minutes).
#   cp -a . /tmp/s30 && cd /tmp/s30 && (COMMIT=... setsid bash benchmarks/s30/lean.sh > /tmp/s30_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s30_driver.log DRIVER_OUT=/tmp/s30out bash /tmp/s30/benchmarks/s24/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s30out; mkdir -p $OUT
echo "lean start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
t0=$(date +%s)
timeout 420 scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_BENCHMARKS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_TEST_AREA_RUNNERS=ON "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- -k 0 \
  ${TARGETS:-test_step graph_speedup} > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -20
{
  echo "# libreyolo GPU suites (session 30, lean: the step area's runner)"
  echo "commit: ${COMMIT:-unknown}"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "torch: $(python3 -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null)"
} > $OUT/gpu_suites.log
timeout 400 build-cuda/tests/test_step --test-suite=gpu --test-case="*segmented step graph*,*D-FINE-n (fp32 and AMP)*" > $OUT/gpu_step_detr.txt 2>&1
rc=$?
echo "step (the two segmented-step cases): rc=$rc $(grep -E '^\[doctest\] test cases' $OUT/gpu_step_detr.txt)" | tee -a $OUT/gpu_suites.log
grep -E "MESSAGE|ERROR|CHECK|fell back|replayed|spread|graph vs|step graph|TEST CASE" $OUT/gpu_step_detr.txt | head -60
echo "detr cases done $(date -u +%T)"
[ -n "${ONLY_CASES:-}" ] && { echo "driver done $(date -u +%FT%TZ) (ONLY_CASES)"; exit 0; }
MODELS="dfinen:4:640" PRECISIONS="fp32 fp16" ARMS="eager graph step" \
  timeout 200 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_dfine.jsonl > $OUT/graph_speedup_dfine.txt 2>&1
MODELS="rtdetr-r18:4:640" PRECISIONS="fp16" ARMS="eager graph step" \
  timeout 120 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_rtdetr.jsonl > $OUT/graph_speedup_rtdetr.txt 2>&1
echo "graph_speedup done $(date -u +%T)"; tail -8 $OUT/graph_speedup_dfine.txt; tail -5 $OUT/graph_speedup_rtdetr.txt
timeout 400 build-cuda/tests/test_step --test-suite=gpu > $OUT/gpu_step_all.txt 2>&1
echo "step (whole gpu suite): rc=$? $(grep -E '^\[doctest\] test cases' $OUT/gpu_step_all.txt)" | tee -a $OUT/gpu_suites.log
echo "driver done $(date -u +%FT%TZ)"
