#!/usr/bin/env python3
"""Session 40: is the CUDA backward of F.interpolate(bilinear, align_corners=False) reproducible run to run, and is
the two-matrix-product form (include/libreyolo/nn/resize.hpp on branch semantic-deterministic-upsample)?

    python3 benchmarks/s40/upsample_determinism.py       (on the CUDA machine; one JSON line per shape and form)

The same input and upstream gradient, the backward run 20 times; how many distinct input gradients came out."""
import json

import torch
import torch.nn.functional as F


def weights(n_in, n_out, dev):
    w = torch.zeros(n_out, n_in)
    scale = n_in / n_out
    for o in range(n_out):
        src = max(scale * (o + 0.5) - 0.5, 0.0)
        i0 = int(src)
        i1 = i0 + (1 if i0 < n_in - 1 else 0)
        l1 = src - i0
        w[o, i0] += 1 - l1
        w[o, i1] += l1
    return w.to(dev)


def run(shape, out_hw, form, reps=20):
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda")
    g = torch.randn(shape[0], shape[1], *out_hw, device="cuda")
    ah, aw = weights(shape[2], out_hw[0], "cuda"), weights(shape[3], out_hw[1], "cuda")
    grads = []
    for _ in range(reps):
        xi = x.clone().requires_grad_(True)
        if form == "F.interpolate":
            y = F.interpolate(xi, size=out_hw, mode="bilinear", align_corners=False)
        else:
            y = ah @ xi @ aw.t()
        (y * g).sum().backward()
        grads.append(xi.grad.clone())
    torch.cuda.synchronize()
    distinct = len({t.cpu().numpy().tobytes() for t in grads})
    spread = max((a - grads[0]).abs().max().item() for a in grads)
    return {"shape": list(shape), "out": list(out_hw), "form": form, "reps": reps, "distinct_grads": distinct,
            "max_abs_spread": spread, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}


if __name__ == "__main__":
    for shape, out in (((4, 4, 4, 4), (64, 64)), ((16, 150, 32, 32), (512, 512))):
        for form in ("F.interpolate", "matmul"):
            print(json.dumps(run(shape, out, form)), flush=True)
