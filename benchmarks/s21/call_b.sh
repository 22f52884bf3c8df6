#!/usr/bin/env bash
# Session 21, device call B on call A's warm machine (build-cuda kept; carry .deps):
# (1) the GPU suites of every area call A did not run;
# (2) issue 41 item 1: one YOLOv9-t step's gradients (b8, 640) under each cuDNN algorithm choice against an
#     fp32 NCHW reference without TF32, through the probe loss (graph_speedup --arm grads --grads-loss probe:
#     a fixed random linear function of the raw outputs; the family loss's target assignment flips between
#     fp16 and fp32 forwards on random weights) with the GradScaler-like halving loss scale;
# (3) issue 39: graph_speedup for DEIMv2-atto and EC-s, b4 640, default precision, eager and graph arms;
# (4) issue 42: `profile infer yolo9t --batch 1 --cuda-graph` fp32 NCHW (as session 19), --channels-last, --half,
#     --half --channels-last (random weights, 640 px).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=${B:-build-cuda}
AREAS="step train precision profile yolo9 yolox rtmdet segformer distributed data detect_data cli core deimv2 dfine ec eval fomo harden install io lingbot mobilenetv4 plot point resnet rtdetr semantic trainer yolonas yolov7" \
  SUITE_TIMEOUT=${SUITE_TIMEOUT:-150} bash benchmarks/gpu_suites.sh suites
gs=$B/benchmarks/graph_speedup/graph_speedup
mkdir -p /tmp/st
grads() {  # grads NAME [flags...]
  local name=$1; shift
  echo -n "{\"cfg\":\"$name\",\"r\":" >> "$OUT/grads.jsonl"
  timeout 90 "$gs" --arm grads --model yolo9t --batch 8 --imgsz 640 --state /tmp/st/state "$@" >> "$OUT/grads.jsonl" 2>> "$OUT/err.txt" \
    || echo -n "null" >> "$OUT/grads.jsonl"
  echo "}" >> "$OUT/grads.jsonl"
}
t0=$(date +%s)
grads fp16_nhwc_instant --precision fp16 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic instant
grads fp16_nhwc_b --precision fp16 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic b
grads fp16_nhwc_bench --precision fp16 --channels-last 1 --cudnn-benchmark 1 --cudnn-heuristic instant
grads fp16_nchw_instant --precision fp16 --channels-last 0 --cudnn-benchmark 0 --cudnn-heuristic instant
grads fp32_nhwc_instant --precision fp32 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic instant
grads fp32_nhwc_instant_again --precision fp32 --channels-last 1 --cudnn-benchmark 0 --cudnn-heuristic instant
echo "grads arms: $(( $(date +%s) - t0 )) s" | tee "$OUT/s21.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/s21.txt"
import json, sys
for l in open(sys.argv[1] + "/grads.jsonl"):
    d = json.loads(l); r = d["r"]
    if not r: print(d["cfg"], "failed"); continue
    c, a = r["conv_weights"], r["all_params"]
    f = lambda v: "nan" if v is None else f"{v:.2e}"
    print(f'{d["cfg"]:24} loss_scale {r.get("loss_scale")} finite {r["finite"]} conv-weight grad rel err median {f(c.get("median"))} '
          f'p90 {f(c.get("p90"))} max {f(c.get("max"))}; all max {f(a.get("max"))}; worst {c["worst"][0]["name"] if c.get("worst") else "-"}')
PY
t1=$(date +%s)
for m in deimv2atto ec-s; do
  for arm in eager graph; do
    timeout 120 "$gs" --arm $arm --model $m --batch 4 --imgsz 640 --warmup 8 --steps 20 --state /tmp/st/$m.state \
      >> "$OUT/detr_speed.jsonl" 2>> "$OUT/err.txt" || echo "{\"model\":\"$m\",\"arm\":\"$arm\",\"failed\":true}" >> "$OUT/detr_speed.jsonl"
  done
done
echo "graph_speedup DEIMv2-atto / EC-s: $(( $(date +%s) - t1 )) s" | tee -a "$OUT/s21.txt"
t2=$(date +%s)
cli=$B/tools/libreyolo
for flags in "" "--channels-last" "--half" "--half --channels-last"; do
  echo "{\"flags\":\"$flags\",\"r\":$(timeout 60 $cli profile infer yolo9t --batch 1 --imgsz 640 --cuda-graph --repeat 100 $flags --json 2>> "$OUT/err.txt" | tr -d '\n' || true)}" >> "$OUT/infer.jsonl"
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/s21.txt"
import json, sys
for l in open(sys.argv[1] + "/infer.jsonl"):
    try: d = json.loads(l)
    except Exception as e: print("unparsed:", l[:200]); continue
    for m in d["r"]["modes"]:
        print(f'yolo9t b1 {d["flags"] or "fp32 NCHW":24} {m["mode"]:10} forward p50 {m["stages_ms"]["forward"]["p50_ms"]:.3f} ms  latency p50 {m["latency_ms"]["p50_ms"]:.3f} ms')
PY
echo "profile infer: $(( $(date +%s) - t2 )) s" | tee -a "$OUT/s21.txt"
tail -c 3000 "$OUT/err.txt" > "$OUT/err_tail.txt" 2>/dev/null; rm -f "$OUT/err.txt"
