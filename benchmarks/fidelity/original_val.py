#!/usr/bin/env python3
"""The original LibreYOLO validates a checkpoint its own trainer wrote, with its own validator (its letterbox,
its NMS, COCOeval), for issue 43's check that our `val` of the same checkpoint gives the same number.

    python3 original_val.py SRC CHECKPOINT DATA_YAML key=value ...

SRC holds the original's `libreyolo` package (c41461e). The keys go to its `val()` (imgsz, batch, ...).
Its validator needs pycocotools: on the CUDA machine run benchmarks/fidelity/common.sh `coco_shim` first.
Prints one JSON line: the checkpoint, its metrics (mAP50-95, mAP50) and the wall seconds.
"""
import json
import sys
import time

from original_train import parse_value, scratch_rtdetr


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    src, ckpt, data = sys.argv[1:4]
    kwargs = {k: parse_value(v) for k, _, v in (kv.partition("=") for kv in sys.argv[4:])}
    sys.path.insert(0, src)
    import libreyolo  # noqa: E402

    # Rebuilding an RT-DETR from its checkpoint runs its constructor, which would download ImageNet weights
    # that the checkpoint then replaces: build it without them.
    scratch_rtdetr()
    t0 = time.time()
    model = libreyolo.LibreYOLO(ckpt)
    m = model.val(data=data, plots=False, verbose=False, **kwargs)
    out = {"checkpoint": ckpt, "wall_s": round(time.time() - t0, 1)}
    for ours, key in (("mAP50-95", "metrics/mAP50-95"), ("mAP50", "metrics/mAP50")):
        out[ours] = m.get(key)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
