# Shared by session.sh and final.sh (sourced from the repository root): the carried .deps unpacked and
# on the library path, the log folder and its packing, the CUDA build of some targets and the GPU
# suites of some test areas.
OUT=${OUT:-/tmp/out}; L=/tmp/L; mkdir -p $L
# Unpacked once per machine (lanes.sh runs several scripts sourcing this at once).
[ -f /tmp/deps/.done ] || { mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done; touch /tmp/deps/.done; }
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr LIBREYOLO_TEST_PREFIX=/tmp/deps/usr
B=build-cuda; CLI=$B/tools/libreyolo
pack() { tar czf $OUT/logs.tgz -C $L . 2>/dev/null; }  # after every stage: a cut call still returns the logs
# synth_set DIR SEED: the detection set of STYLE (default scenes: issue 43's 600 images at 960 px, 12 classes;
# shapes: the earlier families' protocol, `data synth --task detect --images 400 --imgsz 640 --classes 8`), once.
synth_set() {
  [ -f $1/data.yaml ] && return
  case ${STYLE:-scenes} in
    scenes) timeout 180 $CLI data synth --task detect --style scenes --out $1 --images 600 --imgsz 960 --classes 12 --seed $2 ;;
    shapes) timeout 180 $CLI data synth --task detect --out $1 --images 400 --imgsz 640 --classes 8 --seed $2 ;;
    *) echo "STYLE=${STYLE}: allowed scenes, shapes"; return 2 ;;
  esac > $L/synth_${STYLE:-scenes}_$2.log 2>&1
}
# build_cuda SECONDS TARGET...
build_cuda() {
  local secs=$1 t0; shift; t0=$(date +%s)
  # BUILD_CONF: more configure arguments, after the defaults (a later -D wins), e.g. a family subset.
  timeout "$secs" scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_EXAMPLES=OFF ${BUILD_CONF:-} -- -k 0 "$@" > $L/build.log 2>&1
  echo "build rc=$? in $(( $(date +%s) - t0 ))s"; grep -E "error|FAILED" $L/build.log | head -20; pack
}
# gpu_tests SECONDS AREA...: each area's runner with --test-suite=gpu, its failures and messages.
gpu_tests() {
  local secs=$1 a; shift
  for a in "$@"; do
    timeout "$secs" $B/tests/test_$a --test-suite=gpu > $L/gpu_$a.log 2>&1; echo "gpu $a rc=$? $(grep 'test cases' $L/gpu_$a.log)"
    grep -E "ERROR|FATAL" -A3 $L/gpu_$a.log | head -24; grep -E "MESSAGE" -A1 $L/gpu_$a.log | grep -v skipped | head -12; pack
  done
}
# step_table DIR: one line per arm of DIR/detr_speed.jsonl (graph_speedup) and per model of DIR/orig_speed.jsonl
# (benchmarks/fidelity/original_step.py).
step_table() {
  python3 - "$1" <<'PY'
import json, sys
o = sys.argv[1]
for l in open(o + "/detr_speed.jsonl"):
    try: d = json.loads(l)
    except Exception: print("unparsed", l[:200]); continue
    print("ours", {k: d.get(k) for k in ("model", "arm", "precision", "step_ms_min", "step_ms_median", "gpu_busy_ms", "kernels_per_step", "peak_vram_mb", "failed")})
try:
    for l in open(o + "/orig_speed.jsonl"):
        d = json.loads(l); print("original", d["model"], d.get("batch_shape"), "amp", d.get("amp"), d.get("arms"), "peak", d.get("peak_vram_mb"))
except FileNotFoundError: print("no original step lines")
PY
}
# coco_shim: a `pycocotools` the original's own validator can import where none is installed (the CUDA machine):
# cocoapi's pure-Python coco.py and cocoeval.py from the carried .orig/cocoapi (a fetched snapshot of
# cocodataset/cocoapi, its commit in .orig/cocoapi/COMMIT) with benchmarks/fidelity/pycocotools_shim/mask.py (box IoU
# in numpy) for its C extension; matplotlib's imports dropped when matplotlib is absent (only showAnns uses it);
# cocoeval's `np.float` (an alias numpy 1.24 removed, which pycocotools 2.0.6+ also replaced) read as np.float64.
coco_shim() {
  python3 -c "import pycocotools.cocoeval" 2>/dev/null && return 0
  local d=/tmp/pyshim/pycocotools; mkdir -p $d
  cp .orig/cocoapi/coco.py .orig/cocoapi/cocoeval.py benchmarks/fidelity/pycocotools_shim/mask.py $d/ && : > $d/__init__.py
  python3 -c "import matplotlib" 2>/dev/null || sed -i '/matplotlib/d' $d/coco.py
  sed -i 's/dtype=np\.float)/dtype=np.float64)/' $d/cocoeval.py
  export PYTHONPATH=/tmp/pyshim${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import pycocotools.coco, pycocotools.cocoeval" || { echo "coco_shim: pycocotools still not importable"; return 1; }
}
# lane_arm MODEL SEED ours|original STYLE [ORIG_KEYS] [TAG] [OURS_KEYS]: one library's side of side_by_side.sh for one
# (model, seed), its lines in $L/lanes/STYLE_MODELTAG_SEED_SIDE.txt, under ARM_TIMEOUT (default 1500 s). For drivers
# that run many arms at once in the background (benchmarks/s25/driver.sh; session 24's driver holds its own copy).
lane_arm() {
  local skip=SKIP_ORIGINAL; [ "$3" = original ] && skip=SKIP_OURS
  mkdir -p $L/lanes
  env $skip=1 SKIP_BUILD=1 STYLE=$4 SEEDS=$2 ARM_TIMEOUT=${ARM_TIMEOUT:-1500} ORIG_KEYS="${5:-}" TAG="${6:-}" OURS_KEYS="${7:-}" \
    bash benchmarks/fidelity/side_by_side.sh $1 > $L/lanes/${4}_${1}${6:-}_$2_$3.txt 2>&1
  echo "arm done $4 $1${6:-} $2 $3 $(date -u +%T)"
}
# orig_step DATA_YAML MODEL...: the original's own eager training step of each model at b4 640 (original_step.py, .orig;
# multi_scale=false, so one fixed 640 batch from its own loader), logs under $L, the JSON rows into $OUT/orig_speed.jsonl.
orig_step() {
  local data=$1 m
  shift
  for m in "$@"; do
    PYTHONUNBUFFERED=1 timeout 180 python3 benchmarks/fidelity/original_step.py .orig $m "$data" /tmp/ostep/$m \
      batch=4 imgsz=640 workers=4 epochs=10 no_aug_epochs=2 eval_interval=0 multi_scale=false > $L/ostep_$m.log 2>&1
    echo "original_step $m rc=$? $(date -u +%T)"; grep '^{"model"' $L/ostep_$m.log | tee -a $OUT/orig_speed.jsonl || tail -5 $L/ostep_$m.log
  done
}
