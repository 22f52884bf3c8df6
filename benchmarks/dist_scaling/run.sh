#!/usr/bin/env bash
# Data-parallel scaling on one host (issue 8): YOLOv9-t at 640 px, the same batch per GPU, on 1, 2, 4
# and 8 GPUs (as many as are visible), one process per GPU over NCCL (`device=0,1,...`). Reports the
# images/s of the last epoch and the scaling efficiency ips(n) / (n * ips(1)), one JSON line per arm.
#   benchmarks/dist_scaling/run.sh BUILD_DIR DATA_YAML [PER_GPU_BATCH=8] [EPOCHS=3] > scaling.jsonl
# Each arm's training log is kept as $SCALING_LOGS/dist_scaling_g<N>.log (default /tmp).
set -uo pipefail
B=$1; DATA=$2; PER=${3:-8}; EPOCHS=${4:-3}
CLI=$B/tools/libreyolo
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
base=""
for n in 1 2 4 8; do
  if [ "$n" -gt "$gpus" ]; then
    echo "{\"gpus\": $n, \"skipped\": \"only $gpus GPU(s) visible\"}"
    continue
  fi
  dev=$(seq -s, 0 $((n - 1)))
  log=${SCALING_LOGS:-/tmp}/dist_scaling_g$n.log
  timeout -k 10 600 $CLI train model=yolo9t data=$DATA imgsz=640 batch=$((PER * n)) nbs=$((PER * n)) device=$dev \
    epochs=$EPOCHS val=false cache=ram workers=8 warmup_epochs=0 project=/tmp/dist_scaling name=g$n exist_ok=true > $log 2>&1
  rc=$?
  # "epoch E/N ... X it/s": the last epoch's optimizer steps per second, each of PER * n images.
  its=$(grep -E "^epoch" $log | tail -1 | grep -oE "[0-9.]+ it/s" | cut -d' ' -f1)
  if [ $rc -ne 0 ] || [ -z "$its" ]; then
    echo "{\"gpus\": $n, \"rc\": $rc, \"error\": \"$(tail -1 $log | tr -d '"\\')\"}"
    continue
  fi
  ips=$(python3 -c "print($its * $PER * $n)")
  [ -z "$base" ] && base=$ips
  eff=$(python3 -c "print(round($ips / ($n * $base), 3))")
  echo "{\"gpus\": $n, \"per_gpu_batch\": $PER, \"global_batch\": $((PER * n)), \"it_per_s\": $its, \"img_per_s\": $ips, \"efficiency\": $eff}"
done
