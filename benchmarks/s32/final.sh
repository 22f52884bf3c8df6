#!/usr/bin/env bash
# Session 32's device call (carry .deps; COMMIT= the commit under test), in priority order, each stage stamped:
#   1. benchmarks/gpu_suites.sh build (every test, CLI, graph_speedup; -O1);
#   2. graph_speedup eager / graph / step at b4 640: D-FINE-n fp32 and fp16, RT-DETR-r18 fp16, DEIM-n fp32 (issue 44:
#      the step arm with AdamW's multi-tensor device form);
#   3. issue 44's protocol, D-FINE-n (shapes set: data synth --images 400 --imgsz 640 --classes 8 --seed 0; 10 epochs,
#      batch 4, no_aug_epochs=2, multi_scale=false, seed 0): cuda_graph=true, then cuda_graph=step, one after the
#      other alone on the GPU (their wall times are compared);
#   4. beside the GPU suites (step, dfine_net, kit, capture first, then every other area): the eager arms of the
#      protocol (seeds 0 and 1: the mAP reference and its spread) and cuda_graph=step with the default multi_scale=true
#      (the share of steps replayed and the VRAM per graph, from the run's capture line).
#   cp -a . /tmp/s32 && cd /tmp/s32 && (COMMIT=... setsid bash benchmarks/s32/final.sh > /tmp/s32_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s32_driver.log DRIVER_OUT=/tmp/s32out WAIT=<s> bash /tmp/s32/benchmarks/s32/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s32out; mkdir -p $OUT/runs
echo "final start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
# LEAN=1 (a budget of minutes): the step and capture areas' runners, the CLI and graph_speedup only; stages 1-4,
# then those two areas' GPU suites.
if [ "${LEAN:-0}" = 1 ]; then
  mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
  t0=$(date +%s)
  timeout ${BUILD_TIMEOUT:-420} scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=ON -DLIBREYOLO_BUILD_BENCHMARKS=ON \
    -DLIBREYOLO_BUILD_EXAMPLES=OFF -DLIBREYOLO_TEST_AREA_RUNNERS=ON "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- -k 0 \
    test_step test_capture libreyolo_cli graph_speedup > $OUT/build.log 2>&1
  echo "build (lean): rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -20
  {
    echo "# libreyolo GPU suites (session 31, lean: the step and capture areas' runners)"
    echo "commit: ${COMMIT:-unknown}"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "torch: $(python3 -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null)"
  } > $OUT/gpu_suites.log
  STEPBIN=(build-cuda/tests/test_step)
else
  LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
  STEPBIN=(build-cuda/tests/libreyolo_tests '--source-file=*/tests/step/*')
fi
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CLI=build-cuda/tools/libreyolo
gs() {  # gs TAG MODEL PRECISIONS SECONDS
  MODELS="$2" PRECISIONS="$3" ARMS="eager graph step" \
    timeout $4 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_$1.jsonl > $OUT/graph_speedup_$1.txt 2>&1
  echo "graph_speedup $1 rc=$? $(date -u +%T)"; tail -6 $OUT/graph_speedup_$1.txt
}
gs dfine dfinen:4:640 "fp32 fp16" 200
gs rtdetr rtdetr-r18:4:640 fp16 120
gs deim deimn:4:640 fp32 120
timeout 180 $CLI data synth --task detect --out /tmp/shapes_0 --images 400 --imgsz 640 --classes 8 --seed 0 > $OUT/runs/synth.log 2>&1
echo "set written rc=$? $(date -u +%T)"
arm() {  # arm NAME SECONDS KEY=VALUE...
  local n=$1 secs=$2; shift 2; local t0=$(date +%s.%N)
  timeout $secs $CLI train model=dfinen data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
    project=/tmp/runs name=$n exist_ok=true "$@" > $OUT/runs/$n.log 2>&1
  local rc=$? t1=$(date +%s.%N)
  echo "arm $n rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(grep -E 'mAP50-95' $OUT/runs/$n.log | tail -1 | cut -c1-160)"
  grep -E "cuda_graph=step:|cuda_graph: " $OUT/runs/$n.log | tail -2
  cp /tmp/runs/$n/results.csv $OUT/runs/$n.results.csv 2>/dev/null
}
arm graph_s0 300 seed=0 multi_scale=false cuda_graph=true
arm step_s0 300 seed=0 multi_scale=false cuda_graph=step
echo "protocol timed arms done $(date -u +%T)"
( arm eager_s0 400 seed=0 multi_scale=false cuda_graph=false; arm eager_s1 400 seed=1 multi_scale=false cuda_graph=false
  arm step_ms_s0 400 seed=0 cuda_graph=step ) > $OUT/runs/beside.txt 2>&1 &
if [ "${LEAN:-0}" = 1 ]; then
  for a in step capture; do
    timeout 400 build-cuda/tests/test_$a --test-suite=gpu > $OUT/gpu_$a.txt 2>&1
    echo "$a: rc=$? $(grep -E '^\[doctest\] test cases' $OUT/gpu_$a.txt)" | tee -a $OUT/gpu_suites.log
  done
  wait; cat $OUT/runs/beside.txt
  echo "driver done $(date -u +%FT%TZ)"; exit 0
fi
AREAS="step dfine_net kit capture" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "detr areas done $(date -u +%T)"
first="step dfine_net kit capture"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
wait; cat $OUT/runs/beside.txt
echo "driver done $(date -u +%FT%TZ)"
