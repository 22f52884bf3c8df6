#!/usr/bin/env bash
# One device call: build against the machine's pip LibTorch (CUDA), run the GPU and unit tests, train
# ResNet-18 on the GPU with the profiler, and run the step benchmarks. Everything lands in $OUT.
#   benchmarks/gpu_session.sh [build|tests|train|bench|graphs|loader|all]...
# Keep each device call under its 10-minute limit: e.g. "build tests", then "train bench", then "graphs loader".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
B=build-cuda; CLI="timeout -k 10 240 $B/tools/libreyolo"   # a stuck run is killed, not waited on
stages=${*:-all}
has() { [[ " $stages " == *" $1 "* || " $stages " == *" all "* ]]; }
if has build; then
  t0=$(date +%s)
  scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF -- -k 0 > $L/build.log 2>&1
  echo "build rc=$? in $(( $(date +%s) - t0 ))s"; grep -E "error|FAILED" $L/build.log | head -20
fi
if has tests; then
  # Per-area runners, so an area that failed to build does not hide the others.
  for t in $B/tests/test_*; do
    a=$(basename $t)
    $t --test-suite=gpu > $L/gpu_$a.log 2>&1; echo "$a gpu rc=$? $(grep 'test cases' $L/gpu_$a.log)"
    $t --test-suite-exclude=gpu > $L/unit_$a.log 2>&1; echo "$a unit rc=$? $(grep 'test cases' $L/unit_$a.log)"
  done
fi
if has train; then
  $CLI data synth --task classify --out /tmp/cls --images 2400 --imgsz 256 --classes 10 --seed 0 > $L/synth.log 2>&1
  for arm in "fp32 amp=false" "fp16 amp=true amp_dtype=float16" "bf16 amp=true amp_dtype=bfloat16"; do
    set -- $arm; tag=$1; shift
    $CLI train model=resnet18 data=/tmp/cls epochs=3 imgsz=224 batch=16 workers=8 device=cuda profile=true \
      warmup_epochs=1 project=/tmp/runs name=r18_$tag exist_ok=true "$@" > $L/r18_$tag.log 2>&1
    echo "r18 $tag rc=$?"; grep -E "^epoch|BOUND|throughput|GPU util" $L/r18_$tag.log
    cp /tmp/runs/r18_$tag/profile.json $L/r18_${tag}_profile.json 2>/dev/null
    cp /tmp/runs/r18_$tag/results.json $L/r18_${tag}_results.json 2>/dev/null
  done
  # The dataloader verdict: no workers, heavy augmentation, large source images.
  $CLI train model=resnet18 data=/tmp/cls epochs=1 imgsz=224 batch=64 workers=0 device=cuda profile=true \
    project=/tmp/runs name=r18_w0 exist_ok=true val=false > $L/r18_w0.log 2>&1
  echo "r18 workers=0 rc=$?"; grep -E "BOUND|throughput" $L/r18_w0.log
  cp /tmp/runs/r18_w0/profile.json $L/r18_w0_profile.json 2>/dev/null
  cp /tmp/runs/r18_fp16/profile_trace.json $L/r18_fp16_trace.json 2>/dev/null
  cp /tmp/runs/r18_fp16/timeline.html $L/r18_fp16_timeline.html 2>/dev/null
fi
if has bench; then
  for m in "yolo9t 8 640" "yolo9s 8 640" "resnet18 16 224"; do
    set -- $m
    for p in fp32 fp16 bf16; do
      timeout -k 10 120 $B/benchmarks/step_bench --model $1 --batch $2 --imgsz $3 --precision $p >> $L/step_bench.jsonl 2>>$L/step_bench.err
    done
  done
  cat $L/step_bench.jsonl
fi
if has graphs; then
  timeout -k 10 400 benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
  echo "graph_speedup rc=$?"; tail -8 $L/graph_speedup.txt
fi
if has loader; then
  (cd $B/benchmarks/loader && timeout -k 10 400 ./loader_bench --workers 0,1,2,4,8,16 --images 2000 --seconds 8) \
    > $L/loader_bench.txt 2>&1; echo "loader_bench rc=$?"; tail -16 $L/loader_bench.txt
fi
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1
tar czf $OUT/session.tgz -C $L .
