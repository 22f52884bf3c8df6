#!/usr/bin/env bash
# Issue 42 on the CUDA machine (after benchmarks/gpu_suites.sh built build-cuda; .deps carried):
# 1. `profile infer` eager vs graphed for YOLOv9-t, YOLOX-t, RT-DETR-r18 and D-FINE-n at batch 1 and 16, 640 px
#    (random weights: latency does not depend on them), --json each, one table;
# 2. graphed = eager predictions on validation images: each model trained 2 epochs on a synthetic detection
#    set (so its boxes are a trained network's), then `predict conf=0.001` eager and cuda_graph=true on the
#    set's validation images, every box and score compared (tolerance 1e-5).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/infer"
[ -f /tmp/deps/.done ] || { mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done; touch /tmp/deps/.done; }
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CLI=${CLI:-build-cuda/tools/libreyolo}
O=$OUT/infer; D=/tmp/infer_data
MODELS=${MODELS:-yolo9t yoloxt rtdetr-r18 dfinen}
for m in $MODELS; do
  for b in 1 16; do
    timeout 120 $CLI profile infer $m --batch $b --imgsz 640 --device cuda --cuda-graph --repeat ${REPEAT:-100} --json \
      > $O/infer_${m}_b$b.json 2> $O/infer_${m}_b$b.err || echo "infer $m b$b rc=$?" >> $O/infer.txt
  done
done
rm -rf $D; $CLI data synth --task detect --out $D --images 200 --imgsz 320 --classes 8 --seed 0 > $O/synth.log 2>&1
for m in $MODELS; do
  timeout 150 $CLI train model=$m data=$D/data.yaml epochs=2 imgsz=320 batch=8 workers=4 plots=false \
    project=/tmp/infer_runs name=$m exist_ok=true > $O/train_$m.log 2>&1 || { echo "train $m rc=$?" >> $O/infer.txt; continue; }
  ck=/tmp/infer_runs/$m/weights/best.ckpt
  for g in false true; do
    timeout 120 $CLI predict model=$ck source=$D/images/val conf=0.001 imgsz=320 device=cuda cuda_graph=$g \
      project=/tmp/infer_pred name=${m}_$g exist_ok=true > $O/predict_${m}_$g.log 2>&1 \
      || echo "predict $m cuda_graph=$g rc=$?" >> $O/infer.txt
  done
  python3 - /tmp/infer_pred/${m}_false/predictions.json /tmp/infer_pred/${m}_true/predictions.json $m >> $O/infer.txt <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
worst, boxes, bad = 0.0, 0, []
if len(a) != len(b): bad.append(f"{len(a)} vs {len(b)} images")
for fa, fb in zip(a, b):
    ba, bb = fa.get("boxes", []), fb.get("boxes", [])
    if fa.get("file") != fb.get("file") or len(ba) != len(bb):
        bad.append(f'{fa.get("file")}: {len(ba)} vs {len(bb)} boxes'); continue
    for x, y in zip(ba, bb):
        boxes += 1
        if x.get("class") != y.get("class"): bad.append(f'{fa["file"]}: class {x.get("class")} vs {y.get("class")}')
        for k in ("box", "xyxy", "score", "conf"):
            if k in x:
                va = x[k] if isinstance(x[k], list) else [x[k]]; vb = y[k] if isinstance(y[k], list) else [y[k]]
                worst = max([worst] + [abs(p - q) for p, q in zip(va, vb)])
print(f"{sys.argv[3]}: {len(a)} images, {boxes} boxes compared, max |graphed - eager| = {worst:.3g}, "
      f"{'EQUAL (<= 1e-5)' if not bad and worst <= 1e-5 else 'DIFFER'} {bad[:5]}")
PY
done
python3 - $O $MODELS >> $O/infer.txt <<'PY'
import json, sys, os
o = sys.argv[1]
print(f'{"model":12} {"batch":>5} {"mode":6} {"pre p50":>8} {"fwd p50":>8} {"fwd p90":>8} {"fwd p99":>8} {"post p50":>8} {"total p50":>9} {"img/s":>8}')
for m in sys.argv[2:]:
    for b in (1, 16):
        p = f"{o}/infer_{m}_b{b}.json"
        if not os.path.exists(p) or os.path.getsize(p) == 0: print(f"{m:12} {b:5} (no result)"); continue
        doc = json.load(open(p))
        for mode in doc.get("modes", []):
            s = mode.get("stages_ms", {})
            g = lambda st, q: (mode.get("latency_ms", {}) if st == "total" else s.get(st, {})).get(q + "_ms", float("nan"))
            ips = mode.get("img_per_s")
            print(f'{m:12} {b:5} {mode.get("mode","?"):6} {g("preprocess","p50"):8.3f} {g("forward","p50"):8.3f} {g("forward","p90"):8.3f} '
                  f'{g("forward","p99"):8.3f} {g("postprocess","p50"):8.3f} {g("total","p50"):9.3f} {(ips if ips is not None else float("nan")):8.1f}')
PY
cat $O/infer.txt
