#!/usr/bin/env bash
# The original and ours side by side on the scenes set (issue 43's protocol), on the CUDA machine:
# `data synth --task detect --style scenes --images 600 --imgsz 960 --classes 12 --seed S` (480 train /
# 120 val), from scratch, 10 epochs, 640 px, no_aug_epochs=2, batch 8 for the CNNs and 4 for the DETRs,
# each library at its own defaults otherwise. The original trains through its own API
# (benchmarks/fidelity/original_train.py; its validation needs pycocotools, absent there, so it runs with
# eval_interval=0) and its weights/last.pt is validated by our `val` (val_resize=letterbox) and by its own validator
# (benchmarks/fidelity/original_val.py through common.sh's coco_shim; ORIG_VAL=0 skips it), and for the DETR line
# by our `val` once more with val_resize=stretch (the originals' validation geometry); ours validates after epoch 10.
# STYLE=shapes trains on issue 39's set instead (`data synth --task detect --images 400 --imgsz 640 --classes 8
# --seed S`, common.sh synth_set). One line per (model, library): mAP50-95, mAP50 and wall seconds; logs under $OUT/logs.tgz.
#   OUT=dir ORIG=.orig SEEDS="0 1" benchmarks/fidelity/side_by_side.sh MODEL...   (.deps and .orig carried)
# ORIG: the folder holding the original's `libreyolo` package (a fetched snapshot, c41461e). ORIG_KEYS: more
# key=value for the original's run, e.g. pretrained_backbone=false (RT-DETR v1/v2 truly from scratch: by
# default the original downloads an ImageNet backbone, which fails on the CUDA machine). OURS_KEYS: more
# key=value for our run (e.g. train_resize=stretch); TAG: a suffix of our run's name and log (an arm with
# OURS_KEYS beside a plain one, e.g. TAG=_stretch).
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/fidelity/common.sh
ORIG=${ORIG:-.orig}
[ "${SKIP_BUILD:-0}" = 1 ] || build_cuda ${BUILD_TIMEOUT:-300} libreyolo_cli
batch_for() { case $1 in rtdetr*|dfine*|deim*|ec-*|rfdetr*) echo 4 ;; *) echo 8 ;; esac; }
# The last mAP50 / mAP50-95 pair a log holds: `val` prints its metrics as JSON ("mAP50":x,"mAP50-95":y),
# train's epoch lines as "mAP50 x  mAP50-95 y".
metric() {
  grep -E 'mAP50-95' "$1" | tail -1 | sed -E -e 's/.*"mAP50":([0-9.eE+-]+),"mAP50-95":([0-9.eE+-]+).*/mAP50 \1 mAP50-95 \2/' \
    -e 's/.*mAP50 ([0-9.eE+-]+).*mAP50-95 ([0-9.eE+-]+).*/mAP50 \1 mAP50-95 \2/'
}
# The original refuses to train a family it marks experimental without this key (RTMDet at c41461e:
# models/rtmdet/model.py:234; EC's detection training: models/ec/model.py:269); its trainer is then the one
# it ships.
orig_keys_for() { case $1 in rtmdet*|ec-*) echo allow_experimental=true ;; esac; }
for seed in ${SEEDS:-0}; do
  D=/tmp/${STYLE:-scenes}_$seed
  synth_set $D $seed
  for m in "$@"; do
    b=$(batch_for $m)
    if [ "${SKIP_OURS:-0}" != 1 ]; then
      t0=$(date +%s.%N)
      n=${m}${TAG:-}_$seed
      timeout ${ARM_TIMEOUT:-240} $CLI train model=$m data=$D/data.yaml epochs=10 batch=$b imgsz=640 workers=8 \
        no_aug_epochs=2 seed=$seed project=/tmp/ours name=$n exist_ok=true ${OURS_KEYS:-} > $L/ours_$n.log 2>&1
      rc=$?; t1=$(date +%s.%N)
      echo "seed $seed $m${TAG:-} ours rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(metric $L/ours_$n.log)"
      cp /tmp/ours/$n/results.csv $L/ours_results_$n.csv 2>/dev/null; pack
    fi
    if [ "${SKIP_ORIGINAL:-0}" != 1 ]; then
      t0=$(date +%s.%N)
      PYTHONUNBUFFERED=1 timeout ${ARM_TIMEOUT:-240} python3 benchmarks/fidelity/original_train.py "$ORIG" $m $D/data.yaml \
        /tmp/orig/${m}_$seed epochs=10 batch=$b imgsz=640 workers=8 no_aug_epochs=2 seed=$seed eval_interval=0 $(orig_keys_for $m) ${ORIG_KEYS:-} \
        > $L/orig_${m}_$seed.log 2>&1
      rc=$?; t1=$(date +%s.%N)
      # Letterboxed, explicitly: the original's DETR-line .pt carries val_resize=stretch (io/original-inl.hpp), and
      # sessions before 24 read every original letterboxed.
      timeout 120 $CLI val model=/tmp/orig/${m}_$seed/weights/last.pt data=$D/data.yaml imgsz=640 batch=16 val_resize=letterbox \
        > $L/orig_val_${m}_$seed.log 2>&1
      vrc=$?
      # The DETR line's originals validate by stretching to a square: our val once more in that geometry.
      stretched=""
      case $m in rtdetr*|dfine*|deim*|ec-*|rfdetr*)
        timeout 120 $CLI val model=/tmp/orig/${m}_$seed/weights/last.pt data=$D/data.yaml imgsz=640 batch=16 val_resize=stretch \
          > $L/orig_valstretch_${m}_$seed.log 2>&1
        stretched="stretch_rc=$? stretched: $(metric $L/orig_valstretch_${m}_$seed.log)" ;;
      esac
      # The original's own validator on the same checkpoint (its number, for the check that ours reproduces it).
      own="own: skipped (ORIG_VAL=0)"
      if [ "${ORIG_VAL:-1}" = 1 ]; then
        coco_shim > $L/coco_shim_${m}_$seed.log 2>&1
        timeout 300 python3 benchmarks/fidelity/original_val.py "$ORIG" /tmp/orig/${m}_$seed/weights/last.pt $D/data.yaml \
          imgsz=640 batch=16 > $L/orig_ownval_${m}_$seed.log 2>&1
        own="own_rc=$? own: $(grep -E '^\{"checkpoint"' $L/orig_ownval_${m}_$seed.log | tail -1)"
      fi
      echo "seed $seed $m original rc=$rc val_rc=$vrc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(metric $L/orig_val_${m}_$seed.log) $stretched $own"
      pack
    fi
  done
done
