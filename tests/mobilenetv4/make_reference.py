#!/usr/bin/python3
"""Writes the reference data of tests/mobilenetv4/reference/ and tests/resnet/reference/.

The original's network code is not in this repository. Reconstruct the original's
libreyolo/models/mobilenetv4/nn.py and libreyolo/models/resnet/nn.py (Libre-YOLO/libreyolo, newer source:
mobilenetv4/nn.py at 254804d, resnet/nn.py at 29d59f1) as SCRATCH/mobilenetv4_nn.py and SCRATCH/resnet_nn.py
outside the repository, then run under PyTorch 1.13.1 (Debian's python3-torch, on CPU):

    /usr/bin/python3 tests/mobilenetv4/make_reference.py SCRATCH

For every size the original registers (mobilenetv4 s m l; resnet 18 34 50 101) it builds the network as the
original does (num_classes=1000, the original's default), and writes to tests/<family>/reference/<size>/ the
files of shared/fixtures/libreyolo/README.md's format:
  keys.tsv     every state_dict entry in order: name, kind (param | bn_stat | buffer), shape, dtype, numel
  config.json  n_params (1000 classes) and the count at 10 classes
  ref.json/.bin the README's deterministic fill, the README's deterministic input at 160 px, eval mode, no
               grad: each stage's output (forward hooks: child.blocks.<i> / child.layer<i>) and the logits
               (output); a tensor of more than 16384 elements is stored as flat[::stride] (stride =
               ceil(numel / 16384)), smaller ones whole.
"""
import importlib.util
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
from fixture_format import deterministic_input, fill, write_keys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
IMGSZ = 160
MAX_STORED = 16384


def load(scratch, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(scratch, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(family, size, model, stages, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_keys(model, os.path.join(out_dir, "keys.tsv"))
    fill(model)
    model.eval()
    captured = []

    def hook(label):
        def fn(_m, _inp, out):
            captured.append((label, out.detach().clone()))
        return fn

    for label, module in stages:
        module.register_forward_hook(hook(label))
    x = deterministic_input(IMGSZ)
    with torch.no_grad():
        y = model(x)
    captured.append(("output", y.detach().clone()))
    tensors, blob, offset = {}, bytearray(), 0
    for label, t in captured:
        flat = t.contiguous().view(-1)
        stride = max(1, math.ceil(flat.numel() / MAX_STORED))
        stored = flat[::stride].to(torch.float32)
        blob += struct.pack("<%df" % stored.numel(), *stored.tolist())
        tensors[label] = {"shape": list(t.shape), "sum": float(flat.double().sum()),
                          "abs_sum": float(flat.double().abs().sum()), "offset": offset,
                          "count": stored.numel(), "stride": stride}
        offset += stored.numel()
    with open(os.path.join(out_dir, "ref.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(out_dir, "ref.json"), "w") as f:
        json.dump({"model": f"{family}-{size}", "imgsz": IMGSZ, "torch": torch.__version__, "tensors": tensors}, f, indent=1)
    return sum(p.numel() for p in model.parameters())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    scratch = sys.argv[1]
    torch.set_num_threads(1)
    mnv4 = load(scratch, "mobilenetv4_nn")
    resnet = load(scratch, "resnet_nn")
    jobs = [("mobilenetv4", s, lambda s, nc: mnv4.MobileNetV4(size=s, num_classes=nc),
             lambda m: [(f"child.blocks.{i}", b) for i, b in enumerate(m.blocks)]) for s in ("s", "m", "l")]
    jobs += [("resnet", s, lambda s, nc: resnet.ResNet(size=s, num_classes=nc),
              lambda m: [(f"child.layer{i}", getattr(m, f"layer{i}")) for i in range(1, 5)]) for s in ("18", "34", "50", "101")]
    for family, size, build, stages in jobs:
        out_dir = os.path.join(TESTS, family, "reference", size)
        n10 = sum(p.numel() for p in build(size, 10).parameters())
        model = build(size, 1000)
        n = write(family, size, model, stages(model), out_dir)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump({"model": f"{family}-{size}", "n_params": n, "n_params_10_classes": n10}, f, indent=1)
        print(f"{family}-{size}: {n} parameters (1000 classes), {n10} (10 classes) -> {out_dir}")


if __name__ == "__main__":
    main()
