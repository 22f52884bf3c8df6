#!/usr/bin/env bash
# The original's own val() of a checkpoint on this CPU machine (Debian 12, PyTorch 1.13), beside ours: for
# issue 43's "our val of the original's checkpoint gives its own validator's number" without the GPU.
#   benchmarks/fidelity/original_val_cpu.sh CHECKPOINT DATA_YAML [key=value ...]   (keys go to its val())
# Needs .orig/libreyolo (the original at c41461e) and .orig/cocoapi (see common.sh coco_shim). Installs the
# Debian packages its import chain needs. Prints original_val.py's JSON line.
# Session 27: the committed original YOLOv9-t (fixtures yolo9-t-trained/ly9t_ckpt.pt) on `data synth --task
# detect --images 400 --imgsz 640 --classes 8 --seed 0`, imgsz=640 batch=8 device=cpu: mAP50-95 0.51619.
set -euo pipefail
cd "$(dirname "$0")/../.."
ckpt=$1 data=$2; shift 2
for m in cv2 PIL torchvision scipy yaml tqdm; do
  /usr/bin/python3 -c "import $m" 2>/dev/null || apt-get install -y python3-opencv python3-pil python3-torchvision python3-scipy \
    python3-yaml python3-tqdm > /dev/null
done
source benchmarks/fidelity/common.sh
PATH=/usr/bin:$PATH coco_shim
PYTHONPATH=$PWD/benchmarks/fidelity/torch113_shim:$PYTHONPATH /usr/bin/python3 benchmarks/fidelity/original_val.py "$PWD/.orig" \
  "$ckpt" "$data" device=cpu "$@"
