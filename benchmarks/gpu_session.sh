#!/usr/bin/env bash
# One device call: build against the machine's pip LibTorch (CUDA), run the GPU and unit tests, the
# training runs (profiler verdicts, each precision, graphs end to end) and the benchmarks; logs in $OUT.
#   benchmarks/gpu_session.sh [build|tests|verify|teardown|tdprobe|s4|s4b|s5|hostcost|train|bench|detail|nhwc|graphs|overhead|overhead_y9|scaling|scaling2|loader|all]...
# Keep each device call under its 10-minute limit: e.g. "build tests bench", then "build detail graphs
# overhead", then "build train loader". BUILD_TARGETS limits the build to those targets (default: all).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p "$L"
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
B=build-cuda; CLI="timeout -k 10 240 $B/tools/libreyolo"   # a stuck run is killed, not waited on
stages=${*:-all}
has() { pack; [[ " $stages " == *" $1 "* || " $stages " == *" all "* ]]; }
pack() { tar czf $OUT/session.tgz -C $L . 2>/dev/null; }  # after every stage: a killed call still returns the logs
stacks() {  # every thread's stack of process $1 (gdb when present, else the kernel's view)
  if command -v gdb > /dev/null; then timeout 40 gdb -p "$1" -batch -ex "thread apply all bt 20" 2>&1
  else for t in /proc/$1/task/*; do echo "== $t $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null)"; done; fi
}
watch_run() {  # watch_run SECONDS LOG CMD...: runs CMD; one that outlives SECONDS has its stacks taken, then is killed
  local secs=$1 log=$2 w=0; shift 2
  "$@" > "$log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null && [ $w -lt "$secs" ]; do sleep 2; w=$((w + 2)); done
  if kill -0 $pid 2>/dev/null; then
    echo "STUCK after ${secs}s: $* (last line: $(tail -1 "$log"))"
    stacks $pid > "$log.stacks"; pack
    grep -E "^#|^Thread|^==" "$log.stacks" | grep -vE "__futex|pthread_cond_wait|clock_nanosleep|epoll_wait|poll \(|__GI___poll|syscall \(" | head -60
    kill -9 $pid
  fi
  wait $pid
}
if has build; then
  t0=$(date +%s)
  scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF -- -k 0 ${BUILD_TARGETS:-} > $L/build.log 2>&1
  echo "build rc=$? in $(( $(date +%s) - t0 ))s"; grep -E "error|FAILED" $L/build.log | head -20
fi
if has tests; then
  # Per-area runners, so an area that failed to build does not hide the others.
  for t in $B/tests/test_*; do
    a=$(basename $t)
    watch_run ${TEST_S:-240} $L/gpu_$a.log $t --test-suite=gpu; echo "$a gpu rc=$? $(grep 'test cases' $L/gpu_$a.log)"
    [ -n "${GPU_TESTS_ONLY:-}" ] && continue
    $t --test-suite-exclude=gpu > $L/unit_$a.log 2>&1; echo "$a unit rc=$? $(grep 'test cases' $L/unit_$a.log)"
  done
fi
T=/tmp/runs
run() {  # run NAME key=value...: one CLI training run, its headline lines and its artifacts
  local name=$1; shift
  $CLI train project=$T name=$name exist_ok=true device=cuda "$@" > $L/$name.log 2>&1
  echo "$name rc=$? :: $*"
  grep -E "^epoch|BOUND|throughput|GPU util|kernels/step|cuda_graph|done:|precision|tracer cost" $L/$name.log | tail -${TAIL:-14}
  for f in profile.json profile_summary.json results.json; do cp $T/$name/$f $L/${name}_$f 2>/dev/null; done
}
synth() {
  [ -f /tmp/det/data.yaml ] && return
  $CLI data synth --task classify --out /tmp/cls --images 2400 --imgsz 256 --classes 10 --seed 0 > $L/synth_cls.log 2>&1
  $CLI data synth --task detect --out /tmp/det --images 400 --imgsz 640 --classes 8 --seed 0 > $L/synth_det.log 2>&1
  echo "synth rc=$?"; tail -2 $L/synth_det.log
}
if has verify; then
  # Session 3: YOLOv9-t under fp16+graphs and bf16 with the gradient clip (issues 4, 5), and the
  # profiler with the tracer on the synchronised half only (issue 7).
  synth
  run r18_cached model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run y9_cached model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run y9_cached_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true cuda_graph=true
  TAIL=20 run y9_fp16_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=15 warmup_epochs=1 no_aug_epochs=3 amp=true amp_dtype=float16 cuda_graph=true
  TAIL=20 run y9_bf16 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=10 warmup_epochs=1 no_aug_epochs=2 amp=true amp_dtype=bfloat16
  mkdir -p $OUT/fixture && cp $T/y9_cached_graph/profile.json $OUT/fixture/ 2>/dev/null
fi
if has teardown; then
  # After the window CUPTI is torn down: training (eager and graph replay) goes on for whole epochs.
  synth
  TAIL=6 run td_y9_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=3 val=false profile=true cuda_graph=true
  TAIL=6 run td_r18 model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=2 val=false profile=true
fi
if has s4; then
  # Session 4: the profiler's headline numbers with the default 4 traced steps (verdicts of issue 7).
  synth
  TAIL=8 run s4_r18_cached model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  TAIL=8 run s4_y9_cached model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  TAIL=8 run s4_y9_w0 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=0 epochs=1 val=false profile=true profile_stop=true
fi
if has s4b; then
  # CUPTI teardown is now the default for graph runs too: training must go on past the window.
  synth
  TAIL=6 run s4b_y9_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=3 val=false profile=true cuda_graph=true
fi
if has s5; then
  # Session 5: the read-out on the report thread (eager runs) and on the training thread (graph runs):
  # both must train on past the window to the last epoch.
  synth
  TAIL=8 run s5_y9_eager model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=3 val=false profile=true
  TAIL=8 run s5_y9_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=3 val=false profile=true cuda_graph=true
fi
if has tdprobe; then
  # Session 4: does a YOLOv9-t cuda_graph run with TEARDOWN_CUPTI=1 (set by the user: the collector keeps it)
  # hang after the window, and where? A stuck run gets its threads' stacks taken before it is killed.
  synth
  TEARDOWN_CUPTI=1 watch_run ${TDPROBE_S:-90} $L/tdprobe.log $B/tools/libreyolo train project=$T name=tdprobe exist_ok=true \
    device=cuda model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=2 val=false profile=true \
    cuda_graph=true
  echo "tdprobe rc=$?"; grep -E "^epoch|tracer|profile: wrote|rror" $L/tdprobe.log | tail -8
fi
if has hostcost; then
  # Why a trainer step costs more host time than step_bench's bare step: loader threads (and the OpenMP
  # teams their ATen copies start) competing with the training thread? Same run, three loader settings.
  synth
  run hc_r18_w8 model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run hc_r18_w0 model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=0 cache=ram epochs=1 val=false profile=true profile_stop=true
  OMP_NUM_THREADS=1 run hc_r18_w8_omp1 model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run hc_y9_w8 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  OMP_NUM_THREADS=1 run hc_y9_w8_omp1 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  for m in "resnet18 16 224" "yolo9t 8 640"; do set -- $m
    timeout -k 10 120 $B/benchmarks/step_bench --model $1 --batch $2 --imgsz $3 --precision fp16 --cudnn-benchmark 1 \
      --channels-last 1 --detail 0 >> $L/hc_step.jsonl 2>>$L/hc_step.err
  done
  python3 - $L/hc_step.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f'step_bench {r["model"]:8} fp16 nhwc: step min {r["step_ms_min"]:6.2f} med {r["step_ms_median"]:6.2f} busy {r["gpu_busy_ms"]:6.2f}')
PY
fi
if has train; then
  synth
  # Profiler verdicts (issue 7): no workers + mosaic -> dataloader; cached + small batch -> host/launch;
  # the same with cuda_graph=true -> utilization rises.
  run y9_w0 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=0 epochs=1 val=false profile=true profile_stop=true
  run r18_cached model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run r18_cached_graph model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true cuda_graph=true
  run y9_cached model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true
  run y9_cached_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=1 val=false profile=true profile_stop=true cuda_graph=true
  # Training under each precision (issues 4, 5) and with graphs end to end (issue 6).
  # (ResNet-18 under fp16 is the family default: the r18_cached runs above.)
  run y9_fp16_graph model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=8 warmup_epochs=1 no_aug_epochs=2 amp=true amp_dtype=float16 cuda_graph=true
  run y9_bf16 model=yolo9t data=/tmp/det/data.yaml imgsz=640 batch=8 workers=8 cache=ram epochs=3 warmup_epochs=1 amp=true amp_dtype=bfloat16
  run r18_bf16 model=resnet18 data=/tmp/cls imgsz=224 batch=16 workers=8 cache=ram epochs=2 warmup_epochs=1 amp=true amp_dtype=bfloat16
  # One real trace for the test fixtures (trimmed on the development machine).
  mkdir -p $OUT/fixture && cp $T/r18_cached/profile.json $T/r18_cached/profile_trace.json $OUT/fixture/ 2>/dev/null
  (cd $OUT/fixture && gzip -9 -f profile_trace.json 2>/dev/null)
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
if has detail; then
  # Where the time of a YOLOv9-t step goes, and what cuDNN autotuning / NHWC layout change.
  for arm in "yolo9t fp32 0 0" "yolo9t fp16 0 0" "yolo9t fp32 1 0" "yolo9t fp16 1 0" "yolo9t fp16 1 1" "yolo9t bf16 1 1" \
             "yolo9s fp16 1 1" "resnet18 fp16 1 1"; do
    set -- $arm; bs=8; sz=640; [ $1 = resnet18 ] && bs=16 && sz=224
    timeout -k 10 120 $B/benchmarks/step_bench --model $1 --batch $bs --imgsz $sz --precision $2 --cudnn-benchmark $3 \
      --channels-last $4 --detail 15 >> $L/step_detail.jsonl 2>>$L/step_detail.err
    echo "detail $arm rc=$?"
  done
  python3 - $L/step_detail.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); b = r.get("breakdown", {}); la = r.get("loss_alone", {})
    print(f'{r["model"]:8} {r["precision"]["dtype"]:9} bench={int(r["cudnn_benchmark"])} nhwc={int(r["channels_last"])} '
          f'step {r["step_ms_min"]:6.2f} busy {r["gpu_busy_ms"]:6.2f} k/step {r["kernels_per_step"]:6.0f} '
          f'ops/step {b.get("cpu_ops_per_step", 0):6.0f} vram {r["peak_vram_mb"]:6.0f} '
          f'loss-alone {la.get("ms_min", 0):5.2f}/{la.get("gpu_busy_ms", 0):5.2f} ms')
    print("   phases", {k: (round(v["gpu_ms"], 2), round(v["kernels"]), round(v["cpu_ops"])) for k, v in b.get("phases", {}).items()})
    print("   cats  ", {k: round(v["ms"], 2) for k, v in b.get("categories", {}).items()})
PY
fi
if has nhwc; then
  # The trainer's CUDA defaults (channels-last, cuDNN autotuning): the precision table and the graph arms.
  for m in "yolo9t 8 640" "resnet18 16 224"; do
    set -- $m
    for p in fp32 fp16 bf16; do
      timeout -k 10 120 $B/benchmarks/step_bench --model $1 --batch $2 --imgsz $3 --precision $p --cudnn-benchmark 1 \
        --channels-last 1 --detail 0 >> $L/step_nhwc.jsonl 2>>$L/step_nhwc.err
    done
  done
  python3 - $L/step_nhwc.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f'{r["model"]:8} {r["precision"]["dtype"]:9} step min {r["step_ms_min"]:6.2f} med {r["step_ms_median"]:6.2f} '
          f'busy {r["gpu_busy_ms"]:6.2f} k/step {r["kernels_per_step"]:5.0f} TC {r["tensorcore_pct"]:4.1f}% vram {r["peak_vram_mb"]:6.0f} MB')
PY
  gs=$B/benchmarks/graph_speedup/graph_speedup; st=$(mktemp -d)
  for m in yolo9t resnet18; do for p in fp16; do for arm in eager graph; do
    timeout -k 10 120 $gs --arm $arm --model $m --precision $p --nhwc 1 --state $st/$m.state >> $L/graph_nhwc.jsonl 2>>$L/graph_nhwc.err
  done; done; done
  python3 - $L/graph_nhwc.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["model"], r["precision"], r["arm"]): r for r in rows}
for (m, p) in sorted({(m, p) for (m, p, _) in by}):
    e, g = by.get((m, p, "eager")), by.get((m, p, "graph"))
    if e and g:
        print(f'nhwc {m:9} {p}: eager {e["step_ms_min"]:6.2f} graph {g["step_ms_min"]:6.2f} speedup {e["step_ms_min"]/g["step_ms_min"]:4.2f}x '
              f'busy {e["gpu_busy_ms"]:5.2f}/{g["gpu_busy_ms"]:5.2f} graph/busy {g["step_over_busy"]:4.2f} '
              f'vram {e["peak_vram_mb"]:5.0f}/{g["peak_vram_mb"]:5.0f} replayed {g["capture"]["replayed_steps"]}')
PY
fi
if has graphs; then
  timeout -k 10 400 benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
  echo "graph_speedup rc=$?"; tail -8 $L/graph_speedup.txt
fi
if has overhead; then
  $B/tools/libreyolo data synth --task classify --out /tmp/po --images 4000 --imgsz 64 --classes 10 --seed 0 > $L/synth_po.log 2>&1
  po=$PWD/$B/benchmarks/profiler_overhead/profiler_overhead
  (cd /tmp && timeout -k 10 ${OVERHEAD_S:-300} $po --data /tmp/po --imgsz 224 \
    --batch 16 --steps 200 --reps ${OVERHEAD_REPS:-2} --workers 8 --traced ${OVERHEAD_TRACED:-2} \
    --arms ${OVERHEAD_ARMS:-off,idle,window,window_all,window_fg}) > $L/profiler_overhead.jsonl 2> $L/profiler_overhead.err
  echo "profiler_overhead rc=$?"; tail -1 $L/profiler_overhead.jsonl; tail -3 $L/profiler_overhead.err
  if [ -n "${OVERHEAD_TRACED2:-}" ]; then  # the window arm again with OVERHEAD_TRACED2 traced steps
    (cd /tmp && timeout -k 10 ${OVERHEAD_S:-300} $po --data /tmp/po --imgsz 224 --batch 16 --steps 200 \
      --reps ${OVERHEAD_TRACED2_REPS:-4} --workers 8 --traced $OVERHEAD_TRACED2 --arms window) \
      > $L/profiler_overhead_t$OVERHEAD_TRACED2.jsonl 2> $L/profiler_overhead_t$OVERHEAD_TRACED2.err
    echo "profiler_overhead traced=$OVERHEAD_TRACED2 rc=$?"; tail -1 $L/profiler_overhead_t$OVERHEAD_TRACED2.jsonl
  fi
fi
if has overhead_y9; then
  # The arms on YOLOv9-t at 640 px, batch 8 (OVERHEAD_Y9_ARMS): 200 steps need 1 600 training images.
  [ -f /tmp/po_det/data.yaml ] || $B/tools/libreyolo data synth --task detect --out /tmp/po_det --images 2100 --imgsz 640 \
    --classes 8 --seed 0 > $L/synth_po_det.log 2>&1
  po=$PWD/$B/benchmarks/profiler_overhead/profiler_overhead
  (cd /tmp && timeout -k 10 ${OVERHEAD_Y9_S:-300} $po --model yolo9t --data /tmp/po_det/data.yaml --imgsz 640 \
    --batch 8 --steps 200 --reps ${OVERHEAD_Y9_REPS:-2} --workers 8 --traced ${OVERHEAD_TRACED:-2} \
    --arms ${OVERHEAD_Y9_ARMS:-off,idle,window,window_fg}) > $L/profiler_overhead_y9.jsonl 2> $L/profiler_overhead_y9.err
  echo "profiler_overhead_y9 rc=$?"; tail -1 $L/profiler_overhead_y9.jsonl; tail -3 $L/profiler_overhead_y9.err
fi
if has scaling; then
  # Issue 8: images/s on 1, 2, 4, 8 GPUs at the same per-GPU batch (arms beyond the visible GPUs are skipped).
  synth
  SCALING_LOGS=$L timeout -k 10 ${SCALING_S:-300} benchmarks/dist_scaling/run.sh $B /tmp/det/data.yaml 8 ${SCALING_EPOCHS:-3} > $L/dist_scaling.jsonl 2>&1
  echo "dist_scaling rc=$?"; cat $L/dist_scaling.jsonl
fi
if has scaling2; then
  # Longer epochs for the scaling arms (1 000 images: 100 steps per epoch on one GPU, 50 on two), so the
  # loader's ramp-up at each epoch start weighs less; the last of SCALING_EPOCHS epochs is reported.
  [ -f /tmp/det2/data.yaml ] || $B/tools/libreyolo data synth --task detect --out /tmp/det2 --images 1000 --imgsz 640 \
    --classes 8 --seed 0 > $L/synth_det2.log 2>&1
  SCALING_LOGS=$L timeout -k 10 ${SCALING_S:-300} benchmarks/dist_scaling/run.sh $B /tmp/det2/data.yaml 8 ${SCALING_EPOCHS:-2} > $L/dist_scaling2.jsonl 2>&1
  echo "dist_scaling2 rc=$?"; cat $L/dist_scaling2.jsonl
fi
if has loader; then
  (cd $B/benchmarks/loader && timeout -k 10 400 ./loader_bench --workers 0,1,2,4,8,16 --images 800 --seconds 4) \
    > $L/loader_bench.txt 2>&1; echo "loader_bench rc=$?"; tail -16 $L/loader_bench.txt
fi
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1
tar czf $OUT/session.tgz -C $L .
