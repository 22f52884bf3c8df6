#!/usr/bin/env python3
"""Train one model of the original LibreYOLO from scratch through its own Python API (its trainer, its
recipe), for benchmarks/fidelity/side_by_side.sh.

    python3 original_train.py SRC MODEL DATA_YAML OUT_DIR key=value ...

SRC is the folder that holds the original's `libreyolo` package (a fetched snapshot; c41461e for the
fixtures' families). MODEL is our model name (yolo9t, yoloxt, rtmdett, yolonass, rtdetr-r18, dfinen, deimv2atto,
ec-s, rfdetr-n, ...).
The keys are passed to its `train()` (epochs, batch, imgsz, workers, seed, no_aug_epochs, eval_interval).
Prints one JSON line: model, wall seconds, the checkpoint it wrote (weights/last.pt) and its return value's
scalar fields. Its own validation needs pycocotools, which the CUDA machine lacks; side_by_side.sh runs it with
eval_interval=0, then validates weights/last.pt with our `libreyolo val` and with the original's own validator
(original_val.py, pycocotools from common.sh's coco_shim), issue 43's check that the two agree.
"""
import json
import os
import sys
import time

# Our model name -> (the original's class, its size). The RT-DETR names differ (ours: rtdetr-r18).
FAMILIES = [
    ("rtdetrv2-", "LibreRTDETRv2"),
    ("rtdetrv4", "LibreRTDETRv4"),
    ("rtdetr-", "LibreRTDETR"),
    ("yolonas", "LibreYOLONAS"),
    ("yolo9", "LibreYOLO9"),
    ("yolox", "LibreYOLOX"),
    ("rtmdet", "LibreRTMDet"),
    ("dfine", "LibreDFINE"),
    ("deimv2", "LibreDEIMv2"),
    ("deim", "LibreDEIM"),
    ("ec-", "LibreEC"),
    ("rfdetr-", "LibreRFDETR"),
]


def parse_value(v):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v.lower(), v)


def build_original(libreyolo, model, data):
    """The original's model object for our model name, built for the dataset's class count from the start:
    (model, its class name, size)."""
    for prefix, cls_name in FAMILIES:
        if model.startswith(prefix):
            size = model[len(prefix):]
            cls = getattr(libreyolo, cls_name)
            break
    else:
        sys.exit(f"no original family for model {model!r}")
    import yaml

    with open(data) as f:
        nc = len(yaml.safe_load(f)["names"])
    # LibreRFDETR(None, ...) resolves and downloads the size's pretrained checkpoint; an empty dict is its
    # constructor's own "no weights" form (models/rfdetr/model.py:362-365 at c41461e): the from-scratch network.
    weights = {} if cls_name == "LibreRFDETR" else None
    return cls(weights, size=size, nb_classes=nc), cls_name, size


def scratch_rtdetr():
    """RT-DETR v1 "from scratch" in the original loads an ImageNet PResNet backbone from the internet
    (models/rtdetr/model.py RTDETR_CONFIGS backbone_pretrained=True, backbone.py torch.hub download): it fails
    where nothing can be downloaded, and is not a from-scratch run where it can. This builds every size without
    it (v2 already passes backbone_pretrained=False). The caller has put the original's package on sys.path."""
    from libreyolo.models.rtdetr import model as rtdetr_model

    for cfg in rtdetr_model.RTDETR_CONFIGS.values():
        cfg["backbone_pretrained"] = False


def import_original(src):
    """The original's package from SRC, or a stop naming what SRC must hold (session 40: a snapshot's repository
    root at .orig/libreyolo made `import libreyolo` an empty namespace package, and both scripts failed late)."""
    init = os.path.join(src, "libreyolo", "__init__.py")
    if not os.path.isfile(init):
        sys.exit(f"SRC={src}: no {init}; SRC must hold the original's package folder (libreyolo/ of a snapshot), "
                 "not its repository root: benchmarks/fidelity/prepare_orig.sh MIRROR [COMMIT] makes .orig so")
    sys.path.insert(0, src)
    import libreyolo  # noqa: E402

    return libreyolo


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    src, model, data, out = sys.argv[1:5]
    kwargs = {}
    for kv in sys.argv[5:]:
        k, _, v = kv.partition("=")
        kwargs[k] = parse_value(v)
    libreyolo = import_original(src)

    # pretrained_backbone=false: this driver's key, not the original's.
    if str(kwargs.pop("pretrained_backbone", True)).lower() == "false":
        scratch_rtdetr()

    net, cls_name, size = build_original(libreyolo, model, data)
    t0 = time.time()
    result = net.train(data=data, project=os.path.dirname(out), name=os.path.basename(out), exist_ok=True, **kwargs)
    wall = time.time() - t0
    scalars = {k: v for k, v in (result or {}).items() if isinstance(v, (int, float, str, bool))}
    print(json.dumps({"model": model, "original": cls_name, "size": size, "wall_s": round(wall, 1),
                      "last": os.path.join(out, "weights", "last.pt"), "result": scalars}), flush=True)


if __name__ == "__main__":
    main()
