#!/usr/bin/env bash
# Session 20, the device call at the final commit (carry .deps): benchmarks/gpu_suites.sh's build, then
# (1) issue 41's gradient-error arms: one step's gradients of YOLOv9-t (b8, 640, the graph_speedup batch) under
#     each algorithm choice against an fp32 NCHW reference without TF32 (graph_speedup --arm grads);
# (2) cudnn_heuristic=b set inside the process (core/cudnn.hpp, as the trainer does) against the instant
#     heuristic, the whole-step arm's kernel busy time (call 1 set it through the environment);
# (3) a profiled YOLOv9-t run (profile=true profile_stop=true) and `profile summary|convs|what-if` on it;
# (4) the GPU suites of the areas in AREAS (the rest in a second call: gpu_suites.sh suites).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=${B:-build-cuda}
bash benchmarks/gpu_suites.sh build
gs=$B/benchmarks/graph_speedup/graph_speedup; cli=$B/tools/libreyolo
mkdir -p /tmp/st
grads() {  # grads NAME [flags...]
  local name=$1; shift
  echo -n "{\"cfg\":\"$name\",\"r\":" >> "$OUT/grads.jsonl"
  timeout 90 "$gs" --arm grads --model yolo9t --batch 8 --imgsz 640 --state /tmp/st/state "$@" >> "$OUT/grads.jsonl" 2>> "$OUT/grads_err.txt" \
    || echo -n "null" >> "$OUT/grads.jsonl"
  echo "}" >> "$OUT/grads.jsonl"
}
t0=$(date +%s)
grads fp16_nhwc_instant --precision fp16 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic instant
grads fp16_nhwc_b --precision fp16 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic b
grads fp16_nhwc_bench --precision fp16 --channels-last 1 --cudnn-benchmark 1 --cudnn-heuristic instant
grads fp16_nchw_instant --precision fp16 --channels-last 0 --cudnn-benchmark 0 --cudnn-heuristic instant
grads fp32_nhwc_instant --precision fp32 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic instant
echo "grads arms: $(( $(date +%s) - t0 )) s" | tee "$OUT/s20.txt"
for h in instant b; do
  timeout 90 "$gs" --arm step --model yolo9t --batch 8 --imgsz 640 --precision fp16 --warmup 6 --steps 12 \
    --cudnn-heuristic $h --state /tmp/st/state >> "$OUT/heuristic_inprocess.jsonl" 2>> "$OUT/grads_err.txt"
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/s20.txt"
import json, sys
out = sys.argv[1]
for l in open(out + "/grads.jsonl"):
    d = json.loads(l); r = d["r"]
    if not r: print(d["cfg"], "failed"); continue
    c, a = r["conv_weights"], r["all_params"]
    print(f'{d["cfg"]:18} heur {r["cudnn_heuristic"]:7} loss {r["loss"]:.6f} ref {r["loss_ref"]:.6f} conv-weight grad rel err '
          f'median {c["median"]:.2e} p90 {c["p90"]:.2e} max {c["max"]:.2e} mean {c["mean"]:.2e}; all params max {a["max"]:.2e}; worst {c["worst"][0]["name"]}')
for l in open(out + "/heuristic_inprocess.jsonl"):
    r = json.loads(l)
    print(f'in-process cudnn_heuristic={r["cudnn_heuristic"]}: step {r["step_ms_min"]:.2f} ms, busy {r["gpu_busy_ms"]:.2f} ms')
PY
t1=$(date +%s)
timeout 60 $cli data synth --task detect --images 400 --imgsz 640 --classes 8 --seed 0 --out /tmp/pdet > "$OUT/pdet.log" 2>&1
timeout 150 $cli train model=yolo9t data=/tmp/pdet/data.yaml epochs=1 batch=8 imgsz=640 workers=4 profile=true profile_stop=true \
  project=/tmp/pr name=p exist_ok=true plots=false > "$OUT/profile_train.log" 2>&1
P=$(find /tmp/pr/p -name profile.json | head -1)
{ $cli profile summary "$P"; echo; $cli profile convs "$P"; echo; $cli profile what-if "$P"; } > "$OUT/profile_lenses.txt" 2>&1
$cli profile convs "$P" --json > "$OUT/profile_convs.json" 2>&1
gzip -c "$P" > "$OUT/profile.json.gz"
echo "profile run and lenses: $(( $(date +%s) - t1 )) s" | tee -a "$OUT/s20.txt"
SUITE_TIMEOUT=${SUITE_TIMEOUT:-150} bash benchmarks/gpu_suites.sh suites
