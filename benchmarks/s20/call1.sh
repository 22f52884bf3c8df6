#!/usr/bin/env bash
# Session 20, device call 1 (issue 41; carry .deps): the CLI and graph_speedup built at this tree (-O1), then
# graph_speedup's step arm (the whole-step graph: step time and Kineto kernel busy, --detail with the kernels'
# raw names) for each memory-format x cuDNN-algorithm arm, one process each:
#   nchw        NCHW, cuDNN's instant heuristics (graph_speedup's default before session 20)
#   nhwc        channels-last, instant heuristics (the trainer's default)
#   nhwc_b      channels-last, heuristic mode B (TORCH_CUDNN_USE_HEURISTIC_MODE_B=1)
#   nhwc_bench  channels-last, autotuning (cudnn_benchmark)
#   nhwc_bdet   channels-last, autotuning among deterministic engines (yolo9t only)
#   nchw_bench  NCHW, autotuning (yolo9t only)
# Also which cuDNN switches this PyTorch reads (strings of libtorch_cuda.so), and the fidelity set for call 2.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr
B=/tmp/b20
{ echo "date: $(date -u +%FT%TZ)"; echo "commit: ${COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch;print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'; } > "$OUT/env.txt"
tl=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
strings "$tl"/libtorch_cuda.so | grep -E "^TORCH_CUDNN|CUDNN_.*(MODE|LRU|V8)" | sort -u > "$OUT/torch_cudnn_env.txt" 2>&1
t0=$(date +%s)
timeout ${BUILD_TIMEOUT:-300} scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- -k 0 graph_speedup libreyolo_cli > "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - t0 )) s" | tee "$OUT/gs.txt"
grep -E "error:|FAILED" "$OUT/build.log" | head
( $B/tools/libreyolo data synth --task detect --images 400 --imgsz 640 --classes 8 --seed 0 --out /tmp/det0 > "$OUT/synth.log" 2>&1 ) &
gs=$B/benchmarks/graph_speedup/graph_speedup
arm() {  # arm NAME MODEL BATCH IMGSZ PREC [flags...]
  local name=$1 model=$2 b=$3 sz=$4 prec=$5; shift 5
  mkdir -p /tmp/st_$model
  local env=(); [ "$name" = nhwc_b ] && env=(TORCH_CUDNN_USE_HEURISTIC_MODE_B=1)
  echo -n "{\"cfg\":\"$name\",\"r\":" >> "$OUT/gs.jsonl"
  if ! env "${env[@]}" timeout 80 "$gs" --arm step --model $model --batch $b --imgsz $sz --precision $prec \
      --warmup 6 --steps 12 --detail 40 --state /tmp/st_$model/state "$@" >> "$OUT/gs.jsonl" 2>> "$OUT/gs_err.txt"; then
    echo "null}" >> "$OUT/gs.jsonl"; echo "$name $model failed" >> "$OUT/gs.txt"; return
  fi
  sed -i '$ s/$/}/' "$OUT/gs.jsonl"
}
for m in yolo9t:8:640:fp16 yoloxt:8:640:fp16 rtmdett:8:640:fp16 yolonass:8:640:fp32 resnet18:16:224:fp16; do
  IFS=: read -r model b sz prec <<< "$m"
  arm nchw $model $b $sz $prec --channels-last 0 --cudnn-benchmark 0
  arm nhwc $model $b $sz $prec --channels-last 1 --cudnn-benchmark 0
  arm nhwc_b $model $b $sz $prec --channels-last 1 --cudnn-benchmark 0
  arm nhwc_bench $model $b $sz $prec --channels-last 1 --cudnn-benchmark 1
  if [ $model = yolo9t ]; then
    arm nhwc_bdet $model $b $sz $prec --channels-last 1 --cudnn-benchmark 1 --cudnn-deterministic 1
    arm nchw_bench $model $b $sz $prec --channels-last 0 --cudnn-benchmark 1
  fi
  echo "$model done at $(( $(date +%s) - t0 )) s" >> "$OUT/gs.txt"
done
wait
python3 - "$OUT/gs.jsonl" <<'PY' | tee -a "$OUT/gs.txt"
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l); r = d["r"]
    if not r: print(d["cfg"], "failed"); continue
    print(f'{r["model"]:10} {r["precision"]} {d["cfg"]:11} step {r["step_ms_min"]:7.2f} busy {r["gpu_busy_ms"]:7.2f} '
          f'kernels {r["kernels_per_step"]:6.0f} vram {r["peak_vram_mb"]:6.0f} heur {r["cudnn_heuristic"]}')
PY
tar czf "$OUT/b20_cli.tgz" -C $B tools/libreyolo 2>/dev/null; ls -la $B/tools/libreyolo
