#!/usr/bin/python3
"""Reference values for tests/dfine/test_criterion.cpp: the original's D-FINE, DEIM, DEIMv2 and EC criteria
(libreyolo/models/{dfine,deim,deimv2,ec}/loss.py + matcher.py, snapshot c41461e) on a small random training
output with a fixed seed. DEIMv2 as its trainer builds it for s (local terms, GO-LSD's union) and atto (MAL and
boxes on each output's own match), each also past its matcher change (variants "*_late"); EC as ECTrainer
builds it (D-FINE's matcher and forward, MAL at gamma 2).

Run with the system python that has torch (1.13), torchvision and scipy (apt-get install python3-torch
python3-torchvision python3-scipy), from the repository root with the original's package at .orig/libreyolo
(benchmarks/fidelity/prepare_orig.sh):
    /usr/bin/python3 tests/dfine/data/make_loss_case.py .orig/libreyolo
Writes loss_case.bin (float32 / int64 little-endian blobs) and loss_case.json (the blobs' names, dtypes,
shapes and offsets; every named loss term of each variant; the matches; a few gradients).
"""
import importlib
import json
import os
import sys

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

ORIG = sys.argv[1] if len(sys.argv) > 1 else ".orig/libreyolo"
HERE = os.path.dirname(os.path.abspath(__file__))

# The original's package without its __init__s (scripts/fixtures/make_fixture.py), and its criteria as the
# families' trainers build them (scripts/fixtures/make_train_case.py's criterion, shared with the training-step
# fixtures).
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts", "fixtures"))
import make_fixture  # noqa: E402
import make_train_case  # noqa: E402

make_fixture.install_original(os.path.abspath(ORIG), "dfine")

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


# For the variants past DEIMv2's matcher change (cost -p x IoU^alpha): large central boxes that every
# prediction overlaps, so no cost is 0 and no assignment is tied (the targets above leave many queries
# without overlap, whose costs tie at 0). Same labels. Drawn after every other input, which keeps those as
# they were before these variants were added.
late_targets = []
for i, n in enumerate(num_gts):
    cxcy = torch.rand(n, 2) * 0.1 + 0.45
    wh = torch.rand(n, 2) * 0.2 + 0.7
    late_targets.append({"labels": targets[i]["labels"], "boxes": blob(f"t{i}_late_boxes", torch.cat([cxcy, wh], -1))})

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


# D-FINE's, DEIM's and EC's criteria; DEIMv2's as its trainer builds it for s (local terms, the union, matcher
# change at epoch 100) and atto (MAL and boxes on own matches, change at 450).
variants = {name: make_train_case.criterion(family, size, C)
            for name, family, size in [("dfine", "dfine", "n"), ("deim", "deim", "n"), ("deimv2s", "deimv2", "s"),
                                       ("deimv2atto", "deimv2", "atto"), ("ec", "ec", "s")]}
# The epoch each variant's criterion is called at; "<name>_late": DEIMv2's from its matcher change on.
epochs = {"deimv2s_late": 100, "deimv2atto_late": 450}
variants["deimv2s_late"] = variants["deimv2s"]
variants["deimv2atto_late"] = variants["deimv2atto"]


# Every assignment the matchers make must be the only optimum, by a margin above float32 rounding: another
# of (nearly) equal cost is the tie-break of scipy's solver (fidelity row 32), not the original's rule, and
# ours, summing in float32, may pick it. Each matched pair is forbidden in turn; a total within 1e-5 of the
# chosen entries' magnitude without it is a tie, and the case is refused.
def _checked_lsa(c):
    rows, cols = _lsa(c)
    c = np.asarray(c, dtype=np.float64)
    best, size = c[rows, cols].sum(), np.abs(c[rows, cols]).sum()
    for r, k in zip(rows, cols):
        d = c.copy()
        d[r, k] = 1e30
        r2, k2 = _lsa(d)
        if d[r2, k2].sum() <= best + 1e-5 * size:
            sys.exit(f"tied assignment: pair ({r}, {k}) can be replaced at cost {d[r2, k2].sum()} for {best}")
    return rows, cols


_lsa = linear_sum_assignment
for _f in ("dfine", "deim", "deimv2"):
    importlib.import_module("libreyolo.models.%s.matcher" % _f).linear_sum_assignment = _checked_lsa

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


result = {"epochs": epochs, "B": B, "Q": Q, "C": C, "reg_max": REG_MAX, "num_layers": L, "num_gts": num_gts, "dn_num_group": G,
          "dn_queries": QDN, "up": 0.5, "reg_scale": 4.0, "variants": {}}
for name, crit in variants.items():
    out = outputs()
    # The matches the criterion will make (same calls as its forward).
    at = {"epoch": epochs.get(name, 0)} if name.startswith("deimv2") else {}
    tg = late_targets if name.endswith("_late") else targets
    m = lambda o, t: crit.matcher(o, t, **at)
    main_idx = m({k: v for k, v in out.items() if "aux" not in k}, tg)["indices"]
    aux_idx = [m(a, tg)["indices"] for a in out["aux_outputs"] + [out["pre_outputs"]]]
    enc_idx = [m(a, tg)["indices"] for a in out["enc_aux_outputs"]]
    go = crit._get_go_indices(main_idx, aux_idx + enc_idx)
    enc_list = lambda ind: [[s.tolist(), t.tolist()] for s, t in ind]
    for p in [leaf(g) for g in grad_of]:
        p.grad = None
    losses = crit(out, tg, **at)
    total = sum(losses.values())
    total.backward()
    result["variants"][name] = {
        "terms": {k: float(v) for k, v in losses.items()},
        "total": float(total),
        "matches": {"main": enc_list(main_idx), "aux": [enc_list(a) for a in aux_idx], "enc": [enc_list(a) for a in enc_idx],
                    "go": enc_list(go)},
    }
    # Inputs no term reaches (the corners without the local terms) have no gradient: listed, not stored.
    result["variants"][name]["no_grad"] = [g for g in grad_of if leaf(g).grad is None]
    for g in grad_of:
        if leaf(g).grad is not None:
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
