#!/usr/bin/env bash
# The device calls of a session (one script, stages chosen per call; logs come back as $OUT/logs.tgz;
# named session8.sh until session 9):
#   buildtime  clean CLI build on 2 cores of the trees under .bt/<name> (carried) and of this tree, side by side
#              (benchmarks/build_time/run.sh), while the CUDA build below uses the other cores
#   build      the CUDA build of $TARGETS (default: the CLI, graph_speedup and the GPU test runners of $AREAS)
#   gpu        the GPU suites of $AREAS (default: kit capture); gpubg: the same, alongside the train stage
#   graphs     graph_speedup for $MODELS at $PRECISIONS (benchmarks/graph_speedup/run.sh)
#   train      for each "name|args" line of $TRAIN_FILE (@DET@: the 400-image 640 px detection set;
#              @SYNTH:task:imgsz:images@: a synthetic set of that task), `libreyolo train args`, $TRAIN_PAR
#              of them at once on the GPU; the last validation line, the wall time, results.json
#   cmds       each line of $CMDS_FILE as a shell command (the CLI is $CLI, the build $B), under
#              timeout ${CMD_TIMEOUT:-120}, its output in cmd_N.log and the last lines printed
#   benchmarks/session.sh STAGE...
set -uo pipefail
cd "$(dirname "$0")/.."
. benchmarks/fidelity/common.sh
stages=" $* "; has() { [[ "$stages" == *" $1 "* ]]; }
AREAS=${AREAS:-kit capture}
TARGETS=${TARGETS:-libreyolo_cli graph_speedup $(for a in $AREAS; do printf 'test_%s ' "$a"; done)}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
bt_pid=
if has buildtime; then
  # BT_ARMS (space-separated NAME=DIR[|CMAKE_ARG...], '@' = this tree) replaces the default arms.
  if [ -n "${BT_ARMS:-}" ]; then arms=(${BT_ARMS//@/$PWD})
  else arms=(); for d in .bt/*/; do arms+=("$(basename "$d")=$PWD/$d"); done; arms+=("this=$PWD"); fi
  CMAKE_PREFIX_PATH="$torch_prefix;/tmp/deps/usr" benchmarks/build_time/run.sh $L/build_time "${arms[@]}" > $L/build_time.txt 2>&1 &
  bt_pid=$!; ncores=$((2 * ${#arms[@]}))
fi
if has build; then
  if [ -n "$bt_pid" ]; then
    t0=$(date +%s)
    timeout ${BUILD_TIMEOUT:-420} taskset -c $ncores-$(($(nproc) - 1)) scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF -- -k 0 $TARGETS > $L/build.log 2>&1
    echo "build rc=$? in $(( $(date +%s) - t0 ))s (cores $ncores+)"; grep -E "error|FAILED" $L/build.log | head -20; pack
  else
    build_cuda 420 $TARGETS
  fi
fi
if [ -n "$bt_pid" ]; then wait $bt_pid; cat $L/build_time.txt; pack; fi
has gpu && gpu_tests ${GPU_TIMEOUT:-240} $AREAS
# gpubg: the GPU suites alongside the training runs (correctness checks only: no timings in them).
gpu_pid=; if has gpubg; then gpu_tests ${GPU_TIMEOUT:-300} $AREAS > $L/gpubg.txt 2>&1 & gpu_pid=$!; fi
if has train; then
  # TRAIN_PAR runs share the GPU at once (accuracy runs: their wall times are then not comparable).
  D=/tmp/s8_det; timeout 90 $CLI data synth --task detect --out $D --images 400 --imgsz 640 --classes 8 --seed 0 > $L/synth.log 2>&1
  train_one() {
    local name=$1 args=$2 t0; t0=$(date +%s)
    timeout ${TRAIN_TIMEOUT:-300} $CLI train $args project=/tmp/s8 name=$name exist_ok=true > $L/train_$name.log 2>&1
    echo "train $name rc=$? wall=$(( $(date +%s) - t0 ))s $(grep -E 'mAP50-95|top1|mIoU|F1' $L/train_$name.log | tail -1)"
    cp /tmp/s8/$name/results.json $L/results_$name.json 2>/dev/null
  }
  n=0
  while IFS='|' read -r name args; do
    [ -z "$name" ] || [[ "$name" == \#* ]] && continue
    args=${args//@DET@/$D/data.yaml}
    if [[ "$args" == *@SYNTH:* ]]; then  # @SYNTH:task:imgsz:images@ -> a synthetic set of that task
      spec=${args#*@SYNTH:}; spec=${spec%%@*}; IFS=: read -r task sz imgs <<< "$spec"
      dd=/tmp/s8_${task}_$sz; [ -d $dd ] || timeout 120 $CLI data synth --task $task --out $dd --images $imgs --imgsz $sz --classes 8 --seed 0 > $L/synth_$task.log 2>&1
      data=$dd; [ -f $dd/data.yaml ] && data=$dd/data.yaml
      args=${args//@SYNTH:$spec@/$data}
    fi
    train_one "$name" "$args" &
    n=$((n + 1)); if [ $n -ge ${TRAIN_PAR:-1} ]; then wait -n; n=$((n - 1)); fi
  done < "${TRAIN_FILE:-/dev/null}"
  wait; pack
fi
if [ -n "$gpu_pid" ]; then wait $gpu_pid; cat $L/gpubg.txt; fi
if has cmds; then
  n=0
  while IFS= read -r c; do
    [ -z "$c" ] || [[ "$c" == \#* ]] && continue
    n=$((n + 1)); t0=$(date +%s)
    CLI=$CLI B=$B timeout ${CMD_TIMEOUT:-120} bash -c "$c" > $L/cmd_$n.log 2>&1
    echo "cmd $n rc=$? $(( $(date +%s) - t0 ))s: $c"; tail -${CMD_TAIL:-8} $L/cmd_$n.log; pack
  done < "${CMDS_FILE:-/dev/null}"
fi
if has graphs; then
  left=$(( ${CALL_BUDGET:-990} - SECONDS )); [ $left -gt 420 ] && left=420  # CALL_BUDGET: seconds this call may use
  MODELS=${MODELS:-resnet18 yolo9t} PRECISIONS=${PRECISIONS:-fp16 fp32} timeout $left benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
  echo "graph_speedup rc=$?"; tail -12 $L/graph_speedup.txt; pack
fi
pack
