#!/usr/bin/env python3
"""Records the query selection of the original's DETR decoders under the fixtures' deterministic fill.

Test-data tooling for tests/dfine_net/test_fixture.cpp and tests/rtdetr/test_fixture.cpp (see README.md
here). For each model it builds the Python original's network (LibreYOLO, the source snapshot the
fixtures were made from) as the fixture README says, applies the README's deterministic fill, runs one
eval forward on the README's input, and records the token indices that the decoder's query selection
(its one torch.topk call) picked: <model>.bin, int64 little-endian, [batch = 1, num_queries = 300]
row-major, in the order the selection returned them (best score first).

To show that the recorded selection is the fixture's, it compares every child output and the model's
output with the fixture's ref.bin (max |diff| / mean |ref|, as the C++ harness does) and fails unless
each is within --tol (default 1e-4, the fixture README's float-rounding bound).

When this machine's rounding (backbone and encoder equal to the fixture's to ~1e-6, not bit for bit)
makes the run's own selection differ among near-ties, the fixture's selection is recovered from the
fixture's decoder outputs (recover(): each output row matched to the token whose decoder row is
nearest) and recorded only when the original's model, forced to it, reproduces every fixture tensor
within --tol. Tokens with identical decoder rows are interchangeable; the file then holds one choice.

Needs: a Python with PyTorch 1.13 (Debian's python3-torch: /usr/bin/python3), the original's source
(its `libreyolo` package folder), the fixtures. torchvision is stubbed when absent (only box_ops'
box_area refers to it, and the eval forward does not call it). The original's package __init__ (which
needs PIL, ...) is not run: the family subpackages are loaded from their folders directly.

    /usr/bin/python3 tests/detr_topk/make_topk.py --original /work/orig/snap/libreyolo \
        --fixtures ../shared/fixtures/libreyolo --out tests/detr_topk
"""
import argparse
import json
import os
import struct
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import fixture_format  # noqa: E402 (the fixtures' format: fill, input, forward hooks, selection)
from fixture_format import Selection, forward_all, install_sdpa, install_torch2_standins  # noqa: E402

# model -> (how to build the original's nn-level model: the module path and keyword arguments its
# Libre<Family>(None, size=..., nb_classes=80)._init_model passes at its 640 px default input size).
MODELS = {
    "dfine-n": ("libreyolo.models.dfine.nn", "LibreDFINEModel",
                dict(config="n", nb_classes=80, eval_spatial_size=(640, 640))),
    "deim-n": ("libreyolo.models.deim.nn", "LibreDEIMModel",
               dict(config="n", nb_classes=80, eval_spatial_size=(640, 640))),
    "rtdetrv4-s": ("libreyolo.models.dfine.nn", "LibreDFINEModel",
                   dict(config="s", nb_classes=80, eval_spatial_size=(640, 640), activation="silu")),
}
# The other sizes of the D-FINE line (the same constructors at their SIZE_CONFIGS keys).
for _sz in "smlx":
    MODELS["dfine-" + _sz] = ("libreyolo.models.dfine.nn", "LibreDFINEModel",
                              dict(config=_sz, nb_classes=80, eval_spatial_size=(640, 640)))
    MODELS["deim-" + _sz] = ("libreyolo.models.deim.nn", "LibreDEIMModel",
                             dict(config=_sz, nb_classes=80, eval_spatial_size=(640, 640)))
for _sz in "mlx":
    MODELS["rtdetrv4-" + _sz] = ("libreyolo.models.dfine.nn", "LibreDFINEModel",
                                 dict(config=_sz, nb_classes=80, eval_spatial_size=(640, 640), activation="silu"))
MODELS.update({
    # RT-DETR v1 (RTDETR_CONFIGS["r18"]); no eval_spatial_size: anchors per input, the fixture's 160 px.
    "rtdetr-r18": ("libreyolo.models.rtdetr.nn", "RTDETRModel",
                   dict(num_classes=80, backbone_depth=18, backbone_freeze_at=0, backbone_freeze_norm=False,
                        backbone_pretrained=False, hidden_dim=256, dim_feedforward=1024, expansion=0.5,
                        decoder_hidden_dim=256, decoder_dim_feedforward=1024, num_decoder_layers=3, eval_idx=-1)),
    "rtdetrv2-r18": ("libreyolo.models.rtdetrv2.nn", "RTDETRv2Model",
                     dict(num_classes=80, backbone_depth=18, backbone_freeze_at=0, backbone_freeze_norm=False,
                          backbone_pretrained=False, hidden_dim=256, dim_feedforward=1024, expansion=0.5,
                          decoder_hidden_dim=256, decoder_dim_feedforward=1024, num_decoder_layers=3, eval_idx=-1,
                          eval_spatial_size=(640, 640))),
})
# DEIMv2's HGNetv2 sizes (models/deimv2/nn.py LibreDEIMv2Model: SIZE_CONFIGS fixes each size's eval size,
# atto 320, femto 416, pico / n 640, and its query count, 100 / 150 / 200 / 300).
for _sz in ["atto", "femto", "pico", "n", "s", "m", "l", "x"]:
    MODELS["deimv2-" + _sz] = ("libreyolo.models.deimv2.nn", "LibreDEIMv2Model", dict(config=_sz, nb_classes=80))
# RT-DETR v1 / v2 r34 and r50 (RTDETR_CONFIGS["r34"], ["r50"]): r34 PResNet-34 and four decoder layers;
# r50 PResNet-50 with frozen norms, encoder expansion 1.0 and six decoder layers. Pretrained off.
_SIZES = {
    "r34": dict(backbone_depth=34, backbone_freeze_norm=False, expansion=0.5, num_decoder_layers=4),
    "r50": dict(backbone_depth=50, backbone_freeze_norm=True, expansion=1.0, num_decoder_layers=6),
}
for _size, _kw in _SIZES.items():
    for _name, (_module, _cls, _base) in [("rtdetr-", MODELS["rtdetr-r18"]), ("rtdetrv2-", MODELS["rtdetrv2-r18"])]:
        MODELS[_name + _size] = (_module, _cls, dict(_base, **_kw))
# EC s/m/l/x (models/ec/nn.py LibreECModel; its fixtures were made with PyTorch 2.11, the ViT's attention
# runs through scaled_dot_product_attention, given below where this PyTorch lacks it).
for _sz in "smlx":
    MODELS["ec-" + _sz] = ("libreyolo.models.ec.nn", "LibreECModel",
                           dict(config=_sz, nb_classes=80, eval_spatial_size=(640, 640)))


def install_original(src):
    """Makes `libreyolo.models.<family>` importable from `src` without running the package __init__s."""
    try:
        import torchvision.ops.boxes  # noqa: F401
    except ImportError:
        for n in ["torchvision", "torchvision.ops", "torchvision.ops.boxes"]:
            sys.modules[n] = types.ModuleType(n)
        sys.modules["torchvision.ops.boxes"].box_area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    pkgs = [("libreyolo", ""), ("libreyolo.models", "models")]
    pkgs += [("libreyolo.models." + f, os.path.join("models", f)) for f in ["dfine", "deim", "rtdetr", "rtdetrv2", "ec", "deimv2"]]
    for name, sub in pkgs:
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(src, sub)]
        sys.modules[name] = m
    # DEIMv2's ViT sizes (s..x): torch 2.x stand-ins (fixture_format.install_torch2_standins).
    install_torch2_standins()


def read_keys(path):
    with open(path) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [r[0] for r in rows if r and r[0]]


def fill(model, keys):
    """The fixture README's deterministic fill, after checking that the state_dict is keys.tsv's."""
    names = list(model.state_dict().keys())
    if names != keys:
        raise SystemExit("state_dict names differ from keys.tsv (first: %s)" %
                         next((a, b) for a, b in zip(names + [None] * len(keys), keys + [None] * len(names)) if a != b))
    fixture_format.fill(model)


def stored(refbin, r):
    return refbin[r["offset"]: r["offset"] + r["count"]].to(torch.float64)


def compare(name, ours, ref, refs, tol, verbose=False):
    """max |ours - ref| / mean |ref| over the stored elements, per tensor; returns (worst, first failing name)."""
    worst, bad = 0.0, None
    for tname, r in ref["tensors"].items():
        if tname not in ours:
            raise SystemExit("%s: no output named %s in this run" % (name, tname))
        t = ours[tname].detach().to(torch.float64).reshape(-1)[:: r["stride"]]
        numel = 1
        for d in r["shape"]:
            numel *= d
        rel = ((t - refs[tname]).abs().max() / max(r["abs_sum"] / numel, 1e-30)).item()
        worst = max(worst, rel)
        if verbose:
            print("%-14s %-28s max|diff|/mean|ref| = %.3g" % (name, tname, rel))
        if rel > tol and bad is None:
            bad = "%s: %.3g > %.3g" % (tname, rel, tol)
    return worst, bad


def decoder_rows(model, enc, ind):
    """The decoder's eval output rows (logits | boxes) with the selection forced to `ind` ([1, n])."""
    with torch.no_grad(), Selection(forced=ind):
        out = model.decoder(enc)
    return torch.cat([out["pred_logits"][0], out["pred_boxes"][0]], -1).to(torch.float64)


def match(target, rows_of, tokens, row_ids):
    """Greedy one-to-one matching of the fixture rows `row_ids` to `tokens` by the max normalised
    difference of their decoder rows (logits | boxes); returns {row: token}."""
    cand = torch.stack([rows_of[t] for t in tokens])
    tgt = target[row_ids]
    scale = target.abs().mean(0).clamp_min(1e-12)
    dist = ((tgt[:, None, :] - cand[None, :, :]).abs() / scale).amax(-1)  # [rows, tokens]
    out, used = {}, set()
    for p in dist.flatten().argsort(stable=True).tolist():
        r, c = divmod(p, len(tokens))
        if row_ids[r] in out or c in used:
            continue
        out[row_ids[r]] = tokens[c]
        used.add(c)
        if len(out) == len(row_ids):
            break
    return out


def recover(name, model, enc, scores, refs, extra=400, rounds=12, row_tol=1e-4):
    """The fixture's selection, recovered from its decoder outputs. The tokens it picked are, within
    rounding, among the best-scored ones (ours and theirs differ among near-ties at the boundary and in
    the order among equal scores), and each output row belongs to one selected token. Round 0 runs the
    decoder on all candidates (the 300 + `extra` best-scored tokens) and matches every fixture row to the
    token with the nearest decoder row. Each further round keeps the rows that the forced run reproduces
    (to `row_tol`) and rematches the others among the remaining candidates, whose rows are recomputed in
    probe runs: the current selection with the mismatched rows' slots given to the probed tokens (so the
    self-attention sees nearly the fixture's set). Ends when the forced run reproduces every row."""
    K = refs["child.decoder.pred_boxes"].numel() // 4  # the query count (300; DEIMv2 atto..pico fewer)
    target = torch.cat([refs["child.decoder.pred_logits"].view(K, -1),
                        refs["child.decoder.pred_boxes"].view(K, 4)], -1)
    mean = target.abs().mean()
    order = scores[0].sort(descending=True, stable=True).indices
    cands = order[: min(order.numel(), K + extra)].tolist()
    rows_of = dict(zip(cands, decoder_rows(model, enc, torch.tensor([cands]))))
    pick = [None] * K
    for r, t in match(target, rows_of, cands, list(range(K))).items():
        pick[r] = t
    for it in range(rounds):
        got = decoder_rows(model, enc, torch.tensor([pick]))
        err = ((got - target).abs() / mean).amax(-1)
        bad = [r for r in range(K) if err[r] > row_tol]
        print("%-14s recovery round %d: %d rows differ, max|diff|/mean|ref| = %.3g"
              % (name, it, len(bad), err.max().item()))
        if not bad:
            break
        rows_of.update({pick[r]: got[r] for r in range(K) if r not in bad})
        keep = {pick[r] for r in range(K) if r not in bad}
        pool = [t for t in cands if t not in keep]
        for start in range(0, len(pool), len(bad)):  # probe runs: the pool, len(bad) tokens at a time
            chunk = pool[start: start + len(bad)]
            probe = list(pick)
            for r, t in zip(bad, chunk):
                probe[r] = t
            probe_rows = decoder_rows(model, enc, torch.tensor([probe]))
            rows_of.update({t: probe_rows[r] for r, t in zip(bad, chunk)})
        for r, t in match(target, rows_of, pool, bad).items():
            pick[r] = t
    return torch.tensor([pick], dtype=torch.int64)


def run(name, fixtures, out_dir, tol, extra=400):
    module, cls, kwargs = MODELS[name]
    fdir = os.path.join(fixtures, name)
    ref = json.load(open(os.path.join(fdir, "ref.json")))
    with open(os.path.join(fdir, "ref.bin"), "rb") as f:
        raw = f.read()
    refbin = torch.tensor(struct.unpack("<%df" % (len(raw) // 4), raw), dtype=torch.float32)

    model = getattr(__import__(module, fromlist=[cls]), cls)(**kwargs)
    fill(model, read_keys(os.path.join(fdir, "keys.tsv")))
    model.eval()
    S = ref["imgsz"]
    x = fixture_format.deterministic_input(S)

    ours, sel = forward_all(model, x)
    k = ref["tensors"]["child.decoder.pred_boxes"]["shape"][1]
    scores, natural = sel.only(name, k)
    refs = {n: stored(refbin, r) for n, r in ref["tensors"].items()}
    worst, bad = compare(name, ours, ref, refs, tol, verbose=True)
    ind = natural
    if bad:
        # Another machine's rounding (the fixtures' maker) broke the near-ties otherwise: recover the
        # fixture's selection by matching the decoder's output rows, then prove it by a forced run.
        print("%-14s this run's own selection does not reproduce the fixture (%s); recovering it" % (name, bad))
        enc = [ours["child.encoder.%d" % i] for i in range(sum(k.startswith("child.encoder.") for k in ours))]
        ind = recover(name, model, enc, scores, refs, extra=extra)
        ours, _ = forward_all(model, x, forced=ind)
        worst, bad = compare(name, ours, ref, refs, tol, verbose=True)
        if bad:
            raise SystemExit("%s: the recovered selection does not reproduce the fixture (%s)" % (name, bad))
    differ = k - len(set(ind.view(-1).tolist()) & set(natural.view(-1).tolist()))
    moved = int((ind != natural).sum())
    print("%-14s the fixture's selection vs this run's own: %d of %d tokens differ, %d positions differ"
          % (name, differ, k, moved))
    path = os.path.join(out_dir, name + ".bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<%dq" % ind.numel(), *ind.reshape(-1).tolist()))
    print("%-14s wrote %s (%d indices; worst max|diff|/mean|ref| over %d tensors = %.3g)"
          % (name, path, ind.numel(), len(ref["tensors"]), worst))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--original", required=True, help="the original's package folder (.../libreyolo)")
    ap.add_argument("--fixtures", required=True, help="shared/fixtures/libreyolo")
    ap.add_argument("--out", required=True, help="where <model>.bin goes")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--extra", type=int, default=400, help="recovery: candidates beyond the query count (EC: 3000)")
    ap.add_argument("models", nargs="*", default=list(MODELS))
    a = ap.parse_args()
    install_original(os.path.abspath(a.original))
    install_sdpa()
    for m in a.models:
        run(m, a.fixtures, a.out, a.tol, a.extra)


if __name__ == "__main__":
    main()
