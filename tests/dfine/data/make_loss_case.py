#!/usr/bin/python3
"""Reference values for tests/dfine/test_criterion.cpp: the original's D-FINE and DEIM criteria
(libreyolo/models/{dfine,deim}/loss.py + matcher.py, snapshot c41461e) on a small random training
output with a fixed seed.

Run with the system python that has torch (1.13) and scipy (apt-get install python3-scipy):
    /usr/bin/python3 tests/dfine/data/make_loss_case.py [/work/orig/libreyolo/models]
Writes loss_case.bin (float32 / int64 little-endian blobs) and loss_case.json (the blobs' names, dtypes,
shapes and offsets; every named loss term of both criteria; the matches; a few gradients).
torchvision is stubbed (the criteria use only box_area from it).
"""
import importlib
import json
import os
import sys
import types

import numpy as np
import torch

ORIG = sys.argv[1] if len(sys.argv) > 1 else "/work/orig/libreyolo/models"
HERE = os.path.dirname(os.path.abspath(__file__))

# torchvision stub: box_ops imports torchvision.ops.boxes.box_area; loss.py imports torchvision.
tv = types.ModuleType("torchvision")
tv_ops = types.ModuleType("torchvision.ops")
tv_boxes = types.ModuleType("torchvision.ops.boxes")
tv_boxes.box_area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
tv_ops.boxes = tv_boxes
tv.ops = tv_ops
sys.modules.update({"torchvision": tv, "torchvision.ops": tv_ops, "torchvision.ops.boxes": tv_boxes})


def load(family):
    pkg = types.ModuleType("orig_" + family)
    pkg.__path__ = [os.path.join(ORIG, family)]
    sys.modules["orig_" + family] = pkg
    return (importlib.import_module(f"orig_{family}.loss"), importlib.import_module(f"orig_{family}.matcher"))


dfine_loss, dfine_matcher = load("dfine")
deim_loss, deim_matcher = load("deim")

torch.manual_seed(0)
B, Q, C, REG_MAX, L = 3, 10, 4, 32, 3
NB = 4 * (REG_MAX + 1)
num_gts = [3, 2, 0]
M = max(num_gts)
G = 2  # denoising groups
QDN = 2 * M * G


def rand_boxes(*shape):
    cxcy = torch.rand(*shape, 2) * 0.6 + 0.2
    wh = torch.rand(*shape, 2) * 0.3 + 0.05
    return torch.cat([cxcy, wh], -1)


blobs = {}


def blob(name, t):
    blobs[name] = t.detach().clone()
    return t


targets = []
for i, n in enumerate(num_gts):
    labels = torch.randint(0, C, (n,), dtype=torch.int64)
    boxes = rand_boxes(n)
    targets.append({"labels": labels, "boxes": boxes})
    blob(f"t{i}_labels", labels)
    blob(f"t{i}_boxes", boxes)

up = torch.tensor([0.5])
reg_scale = torch.tensor([4.0])
ref = blob("ref_points", rand_boxes(B, Q))  # every layer's reference boxes (the decoder's ref_points_initial)
dn_ref = blob("dn_ref_points", rand_boxes(B, QDN))


def head(prefix, q, corners=True, refp=None):
    h = {
        "pred_logits": blob(prefix + "_logits", torch.randn(B, q, C) * 2).requires_grad_(True),
        "pred_boxes": blob(prefix + "_boxes", rand_boxes(B, q)).requires_grad_(True),
    }
    if corners:
        h["pred_corners"] = blob(prefix + "_corners", torch.randn(B, q, NB) * 2).requires_grad_(True)
        h["ref_points"] = refp
    return h


layers = [head(f"layer{l}", Q, refp=ref) for l in range(L)]
pre = head("pre", Q, corners=False)
enc = head("enc0", Q, corners=False)
dn_layers = [head(f"dn_layer{l}", QDN, refp=dn_ref) for l in range(L)]
dn_pre = head("dn_pre", QDN, corners=False)
# A near-copy of the main output as layer 1 so the cross-layer union sees agreeing matches.
with torch.no_grad():
    layers[1]["pred_boxes"].copy_(layers[2]["pred_boxes"] + 0.01 * torch.randn(B, Q, 4))
    layers[1]["pred_logits"].copy_(layers[2]["pred_logits"] + 0.1 * torch.randn(B, Q, C))
    blobs["layer1_boxes"] = layers[1]["pred_boxes"].detach().clone()
    blobs["layer1_logits"] = layers[1]["pred_logits"].detach().clone()

pos = []
for i, n in enumerate(num_gts):
    pos.append(torch.cat([torch.arange(n) + g * 2 * M for g in range(G)]).long())
dn_meta = {"dn_positive_idx": pos, "dn_num_group": G, "dn_num_split": [QDN, Q]}


def outputs():
    last, dn_last = layers[-1], dn_layers[-1]
    out = {
        "pred_logits": last["pred_logits"], "pred_boxes": last["pred_boxes"],
        "pred_corners": last["pred_corners"], "ref_points": last["ref_points"],
        "up": up, "reg_scale": reg_scale,
        "aux_outputs": [dict(l, teacher_corners=last["pred_corners"], teacher_logits=last["pred_logits"]) for l in layers[:-1]],
        "enc_aux_outputs": [dict(enc)],
        "pre_outputs": dict(pre),
        "enc_meta": {"class_agnostic": False},
        "dn_outputs": [dict(l, teacher_corners=dn_last["pred_corners"], teacher_logits=dn_last["pred_logits"]) for l in dn_layers],
        "dn_pre_outputs": dict(dn_pre),
        "dn_meta": dn_meta,
    }
    return out


weights = {"loss_bbox": 5.0, "loss_giou": 2.0, "loss_fgl": 0.15, "loss_ddf": 1.5}
cost = {"cost_class": 2.0, "cost_bbox": 5.0, "cost_giou": 2.0}
variants = {
    "dfine": dfine_loss.DFINECriterion(
        matcher=dfine_matcher.HungarianMatcher(weight_dict=cost, use_focal_loss=True, alpha=0.25, gamma=2.0),
        weight_dict=dict(weights, loss_vfl=1.0), losses=["vfl", "boxes", "local"],
        alpha=0.75, gamma=2.0, num_classes=C, reg_max=REG_MAX),
    "deim": deim_loss.DEIMCriterion(
        matcher=deim_matcher.HungarianMatcher(weight_dict=cost, use_focal_loss=True, alpha=0.25, gamma=2.0),
        weight_dict=dict(weights, loss_mal=1.0), losses=["mal", "boxes", "local"],
        alpha=0.75, gamma=1.5, num_classes=C, reg_max=REG_MAX),
}

grad_of = ["layer2_logits", "layer2_corners", "layer0_corners", "layer0_boxes", "pre_boxes", "dn_layer0_corners", "enc0_logits"]


def leaf(name):
    kind = name.rsplit("_", 1)[1]
    key = {"logits": "pred_logits", "boxes": "pred_boxes", "corners": "pred_corners"}[kind]
    base = name.rsplit("_", 1)[0]
    if base.startswith("dn_layer"):
        return dn_layers[int(base[len("dn_layer"):])][key]
    if base.startswith("layer"):
        return layers[int(base[len("layer"):])][key]
    return {"pre": pre, "enc0": enc}[base][key]


result = {"B": B, "Q": Q, "C": C, "reg_max": REG_MAX, "num_layers": L, "num_gts": num_gts, "dn_num_group": G,
          "dn_queries": QDN, "up": 0.5, "reg_scale": 4.0, "variants": {}}
for name, crit in variants.items():
    out = outputs()
    # The matches the criterion will make (same calls as its forward).
    m = crit.matcher
    main_idx = m({k: v for k, v in out.items() if "aux" not in k}, targets)["indices"]
    aux_idx = [m(a, targets)["indices"] for a in out["aux_outputs"] + [out["pre_outputs"]]]
    enc_idx = [m(a, targets)["indices"] for a in out["enc_aux_outputs"]]
    go = crit._get_go_indices(main_idx, aux_idx + enc_idx)
    enc_list = lambda ind: [[s.tolist(), t.tolist()] for s, t in ind]
    for p in [leaf(g) for g in grad_of]:
        p.grad = None
    losses = crit(out, targets)
    total = sum(losses.values())
    total.backward()
    result["variants"][name] = {
        "terms": {k: float(v) for k, v in losses.items()},
        "total": float(total),
        "matches": {"main": enc_list(main_idx), "aux": [enc_list(a) for a in aux_idx], "enc": [enc_list(a) for a in enc_idx],
                    "go": enc_list(go)},
    }
    for g in grad_of:
        blobs[f"{name}_grad_{g}"] = leaf(g).grad.detach().clone()

# Blobs: float32 or int64, C order, concatenated.
index, offset = {}, 0
with open(os.path.join(HERE, "loss_case.bin"), "wb") as f:
    for k, t in blobs.items():
        a = t.numpy()
        a = a.astype(np.int64 if a.dtype.kind in "iu" else np.float32)
        data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        index[k] = {"dtype": "int64" if a.dtype == np.int64 else "float32", "shape": list(a.shape), "offset": offset}
        f.write(data)
        offset += len(data)
result["blobs"] = index
with open(os.path.join(HERE, "loss_case.json"), "w") as f:
    json.dump(result, f, indent=1, sort_keys=True)
for name, v in result["variants"].items():
    print(name, len(v["terms"]), "terms, total", v["total"])
    print("  go", v["matches"]["go"])
