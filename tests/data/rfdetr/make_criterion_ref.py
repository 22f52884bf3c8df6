"""Reference values for tests/rfdetr/test_criterion.cpp: the ORIGINAL RF-DETR matcher + SetCriterion
(LibreYOLO c41461e, libreyolo/models/rfdetr/{matcher,loss,box_ops}.py) on deterministic inputs.

Run (PyTorch 1.13 of Debian's /usr/bin/python3; no scipy, no PIL, no transformers needed):
    /usr/bin/python3 tests/data/rfdetr/make_criterion_ref.py /path/to/.orig > tests/data/rfdetr/criterion_ref.json
where /path/to/.orig holds the original's `libreyolo` package.

What is loaded from the original: loss.py, matcher.py, box_ops.py, segmentation.py, tensors.py as the
modules of a synthetic package (its heavy __init__ chain is not run); the criterion's arguments
(_make_args of nn.py: loss coefficients, matcher costs, focal_alpha, ia_bce_loss, group_detr, ...) and
build_criterion_and_postprocessors of lwdetr.py are taken from their source with `ast` and executed, so
the weight dict and the SetCriterion / HungarianMatcher arguments are the original's own.

Stand-ins (this machine lacks them):
  * scipy.optimize.linear_sum_assignment: an exact shortest-augmenting-path Hungarian solver written
    here (pure Python, float64), checked below against brute force on every cost block small enough to
    enumerate (the "small" case) and on random matrices; rows ascending as scipy's.
  * torchvision: ops.boxes.box_area (torchvision's formula) and _is_tracing (False).
  * libreyolo.data.default_oks_sigmas (only read by the keypoint loss, which detection does not run).

Inputs: an exact integer hash (no RNG, reproducible bit for bit in C++, see u01() in the test), turned
into float32 logits, predicted cxcywh boxes and targets (normalised cxcywh, labels < num_classes).
"""
import ast
import itertools
import json
import math
import os
import sys
import types
from dataclasses import dataclass, fields  # noqa: F401 (used by the exec'd nn.py source)
from types import SimpleNamespace

import torch

ORIG = sys.argv[1] if len(sys.argv) > 1 else "/work/main/.orig"
RF = os.path.join(ORIG, "libreyolo", "models", "rfdetr")


# ---- stand-ins --------------------------------------------------------------------------------------
def _lsa(cost):
    """Exact linear sum assignment of a rows x cols list-of-lists (float64), as scipy's contract."""
    rows = len(cost)
    cols = len(cost[0]) if rows else 0
    if rows == 0 or cols == 0:
        return [], []
    tr = rows > cols
    n, m = (cols, rows) if tr else (rows, cols)
    a = [[(cost[j][i] if tr else cost[i][j]) for j in range(m)] for i in range(n)]
    INF = float("inf")
    u = [0.0] * (n + 1)
    v = [0.0] * (m + 1)
    p = [0] * (m + 1)
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = [INF] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = p[j0]
            delta = INF
            j1 = -1
            row = a[i0 - 1]
            ui0 = u[i0]
            for j in range(1, m + 1):
                if not used[j]:
                    cur = row[j - 1] - ui0 - v[j]
                    if cur < minv[j]:
                        minv[j] = cur
                        way[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(m + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while True:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
            if j0 == 0:
                break
    pairs = []
    for j in range(1, m + 1):
        if p[j]:
            pairs.append((j - 1, p[j] - 1) if tr else (p[j] - 1, j - 1))
    pairs.sort()
    return [r for r, _ in pairs], [c for _, c in pairs]


def _brute(cost):
    rows, cols = len(cost), len(cost[0])
    best, arg = None, None
    if rows >= cols:
        for perm in itertools.permutations(range(rows), cols):
            s = sum(cost[perm[c]][c] for c in range(cols))
            if best is None or s < best:
                best, arg = s, sorted((perm[c], c) for c in range(cols))
    else:
        for perm in itertools.permutations(range(cols), rows):
            s = sum(cost[r][perm[r]] for r in range(rows))
            if best is None or s < best:
                best, arg = s, [(r, perm[r]) for r in range(rows)]
    return [r for r, _ in arg], [c for _, c in arg]


BRUTE_CHECKED = [0]


def linear_sum_assignment(c):
    cost = c.double().tolist()
    r, k = _lsa(cost)
    rows, cols = c.shape
    if rows and cols and math.perm(max(rows, cols), min(rows, cols)) <= 50000:
        br, bk = _brute(cost)
        if (br, bk) != (r, k):
            raise SystemExit(f"stand-in solver disagrees with brute force: {(r, k)} vs {(br, bk)}")
        BRUTE_CHECKED[0] += 1
    return _np_int(r), _np_int(k)


def _np_int(x):
    import numpy as np

    return np.asarray(x, dtype=np.int64)


def _install_standins():
    scipy = types.ModuleType("scipy")
    opt = types.ModuleType("scipy.optimize")
    opt.linear_sum_assignment = linear_sum_assignment
    scipy.optimize = opt
    sys.modules.setdefault("scipy", scipy)
    sys.modules.setdefault("scipy.optimize", opt)
    tv = types.ModuleType("torchvision")
    tv_ops = types.ModuleType("torchvision.ops")
    tv_boxes = types.ModuleType("torchvision.ops.boxes")
    tv_boxes.box_area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    tv._is_tracing = lambda: False
    tv.ops = tv_ops
    tv_ops.boxes = tv_boxes
    for name, mod in (("torchvision", tv), ("torchvision.ops", tv_ops), ("torchvision.ops.boxes", tv_boxes)):
        sys.modules.setdefault(name, mod)
    pkgs = {
        "libreyolo": os.path.join(ORIG, "libreyolo"),
        "libreyolo.models": os.path.join(ORIG, "libreyolo", "models"),
        "libreyolo.models.rfdetr": RF,
    }
    for name, path in pkgs.items():
        mod = types.ModuleType(name)
        mod.__path__ = [path]
        sys.modules[name] = mod
    data = types.ModuleType("libreyolo.data")
    data.default_oks_sigmas = lambda k: [1.0 / k] * k
    sys.modules["libreyolo.data"] = data


_install_standins()
from libreyolo.models.rfdetr import loss as orig_loss  # noqa: E402
from libreyolo.models.rfdetr import matcher as orig_matcher  # noqa: E402


def _extract(path, names):
    src = open(path).read()
    tree = ast.parse(src)
    keep = [node for node in tree.body if getattr(node, "name", None) in names
            or (isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) in names)]
    return ast.Module(body=keep, type_ignores=[])


ns = {"dataclass": dataclass, "fields": fields, "SimpleNamespace": SimpleNamespace, "torch": torch, "Any": object,
      "SetCriterion": orig_loss.SetCriterion, "build_matcher": orig_matcher.build_matcher,
      "PostProcess": lambda num_select: None}
exec(compile(_extract(os.path.join(RF, "nn.py"), {"RFDETRSizeConfig", "RFDETR_CONFIGS", "_make_args"}), "nn.py", "exec"), ns)
exec(compile(_extract(os.path.join(RF, "lwdetr.py"), {"build_criterion_and_postprocessors"}), "lwdetr.py", "exec"), ns)


# ---- deterministic inputs ---------------------------------------------------------------------------
def u01(n, seed):
    """n values in [0, 1): exact integer hash (mirrored in the C++ test)."""
    out = []
    for i in range(n):
        x = (i * 2654435761 + seed * 40503 + 12345) % 4294967296
        x = (x * 1103515245 + 12345) % 2147483648
        x = (x * 69069 + 1) % 4294967296
        out.append(x / 4294967296.0)
    return out


def ramp(n, seed, lo, hi):
    return torch.tensor([lo + (hi - lo) * x for x in u01(n, seed)], dtype=torch.float64).float()


def make_pred(B, Q, C, seed):
    logits = ramp(B * Q * C, seed, -6.0, 1.0).view(B, Q, C)
    cxcy = ramp(B * Q * 2, seed + 1, 0.05, 0.95).view(B, Q, 2)
    wh = ramp(B * Q * 2, seed + 2, 0.02, 0.6).view(B, Q, 2)
    boxes = torch.cat([cxcy, wh], -1)
    return logits.requires_grad_(True), boxes.requires_grad_(True)


def make_targets(counts, nb_classes, seed):
    out = []
    for b, n in enumerate(counts):
        s = seed + 100 * b
        labels = torch.tensor([int(x * nb_classes) for x in u01(n, s)], dtype=torch.int64)
        cxcy = ramp(n * 2, s + 1, 0.1, 0.9).view(n, 2)
        wh = ramp(n * 2, s + 2, 0.05, 0.5).view(n, 2)
        out.append({"labels": labels, "boxes": torch.cat([cxcy, wh], -1).clamp(0.0, 1.0)})
    return out


# ---- cases --------------------------------------------------------------------------------------------
CASES = [
    # name, size (dec_layers), training, group_detr, queries per group, nb_classes, target counts, seed, loss flavour
    dict(name="train_g13_one_empty", size="n", training=True, group_detr=13, nq=300, nb=5, counts=[4, 0], seed=11, flavour="ia_bce"),
    dict(name="train_g13", size="s", training=True, group_detr=13, nq=300, nb=5, counts=[5, 3], seed=23, flavour="ia_bce"),
    dict(name="eval_g1", size="s", training=False, group_detr=13, nq=300, nb=5, counts=[5, 3], seed=37, flavour="ia_bce"),
    dict(name="train_all_empty", size="n", training=True, group_detr=13, nq=20, nb=5, counts=[0, 0], seed=41, flavour="ia_bce"),
    dict(name="small_bruteforce", size="m", training=True, group_detr=3, nq=6, nb=3, counts=[3, 2], seed=53, flavour="ia_bce"),
    dict(name="train_g13_focal", size="n", training=True, group_detr=13, nq=300, nb=5, counts=[5, 3], seed=61, flavour="focal"),
    dict(name="train_g13_varifocal", size="n", training=True, group_detr=13, nq=300, nb=5, counts=[5, 3], seed=71, flavour="varifocal"),
]


class Recorder(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.calls = []

    def forward(self, outputs, targets, group_detr=1):
        idx = self.inner(outputs, targets, group_detr=group_detr)
        self.calls.append([[i.tolist(), j.tolist()] for i, j in idx])
        return idx


def run_case(c):
    cfg = ns["RFDETR_CONFIGS"][c["size"]]
    args = ns["_make_args"](cfg, nb_classes=c["nb"], device="cpu", segmentation=False)
    args.group_detr = c["group_detr"]
    if c["flavour"] == "focal":
        args.ia_bce_loss = False
    elif c["flavour"] == "varifocal":
        args.ia_bce_loss = False
        args.use_varifocal_loss = True
    criterion, _ = ns["build_criterion_and_postprocessors"](args)
    criterion.matcher = Recorder(criterion.matcher)
    criterion.train(c["training"])
    B = len(c["counts"])
    C = c["nb"] + 1  # the network's class_embed width (num_classes + 1)
    Q = c["nq"] * (c["group_detr"] if c["training"] else 1)
    L = args.dec_layers
    seed = c["seed"]
    main = make_pred(B, Q, C, seed)
    aux = [make_pred(B, Q, C, seed + 10 * (i + 1)) for i in range(L - 1)]
    enc = make_pred(B, Q, C, seed + 500)
    outputs = {"pred_logits": main[0], "pred_boxes": main[1],
               "aux_outputs": [{"pred_logits": a[0], "pred_boxes": a[1]} for a in aux],
               "enc_outputs": {"pred_logits": enc[0], "pred_boxes": enc[1]}}
    targets = make_targets(c["counts"], c["nb"], seed + 1000)
    losses = criterion(outputs, targets)
    wd = criterion.weight_dict
    total = sum(losses[k] * wd[k] for k in losses if k in wd)
    total.backward()
    preds = [main] + aux + [enc]
    names = ["main"] + [f"aux{i}" for i in range(L - 1)] + ["enc"]

    def input_sum(t):
        return float(t.detach().double().sum())

    return {
        "name": c["name"], "size": c["size"], "training": c["training"], "group_detr": c["group_detr"],
        "queries_per_group": c["nq"], "num_classes": c["nb"], "counts": c["counts"], "seed": seed,
        "flavour": c["flavour"], "dec_layers": L,
        "args": {k: getattr(args, k) for k in ("cls_loss_coef", "bbox_loss_coef", "giou_loss_coef", "set_cost_class",
                                                 "set_cost_bbox", "set_cost_giou", "focal_alpha", "ia_bce_loss",
                                                 "use_varifocal_loss", "use_position_supervised_loss",
                                                 "sum_group_losses", "aux_loss", "two_stage")},
        "weight_dict": dict(wd),
        "losses": {k: float(v) for k, v in losses.items()},
        "loss_keys": list(losses.keys()),
        "total": float(total),
        "indices": dict(zip(names, criterion.matcher.calls)),
        "input_sums": {n: [input_sum(p[0]), input_sum(p[1])] for n, p in zip(names, preds)},
        "target_sums": [[int(t["labels"].sum()), input_sum(t["boxes"])] for t in targets],
        "grads": {n: [float(p[0].grad.double().sum()), float(p[0].grad.double().abs().sum()),
                      float(p[1].grad.double().sum()), float(p[1].grad.double().abs().sum())] for n, p in zip(names, preds)},
    }


def self_check_solver():
    g = torch.Generator().manual_seed(0)
    for rows, cols in [(7, 3), (3, 7), (5, 5), (8, 4), (1, 6), (6, 1)]:
        for _ in range(20):
            c = torch.rand(rows, cols, generator=g, dtype=torch.float64).tolist()
            if _lsa(c) != _brute(c):
                raise SystemExit("stand-in solver disagrees with brute force on a random matrix")


if __name__ == "__main__":
    torch.set_num_threads(1)
    self_check_solver()
    cases = [run_case(c) for c in CASES]
    json.dump({"source": "LibreYOLO c41461e libreyolo/models/rfdetr (matcher.py, loss.py, box_ops.py; "
                         "nn.py _make_args, lwdetr.py build_criterion_and_postprocessors)",
               "torch": torch.__version__, "brute_force_checked_blocks": BRUTE_CHECKED[0], "cases": cases},
              sys.stdout, indent=1)
    sys.stdout.write("\n")
