#!/usr/bin/env python3
"""Records PyTorch's own torch.amp.GradScaler on a fixed 50-step gradient sequence, as the fixture
tests/data/precision/scaler_reference.json that the C++ tests (tests/precision/) replay and compare.

The sequence is a closed-form formula of (step, element index) -- no RNG -- and must match
tests/precision/scaler_sequence.hpp exactly. Run on the CUDA machine:
    python3 benchmarks/precision/scaler_reference.py [--device cuda] [--out tests/data/precision/scaler_reference.json]
"""
import argparse
import datetime
import json
import math
import os

import torch

STEPS = 50
LR = 0.25
INIT_SCALE = 65536.0
GROWTH_INTERVAL = 10
SIZES = [4, 3, 2]  # three parameter tensors; q numbers their elements 0..8 in order


def initial_param(q):
    return (q - 4) / 4.0


def coefficient(s, q):
    """d loss / d p_q at step s (unscaled), with the injected non-finite values."""
    if s == 7 and q == 1:
        return math.inf
    if s == 31 and q == 5:
        return math.nan
    if s == 32 and q == 8:
        return -math.inf
    return ((5 * s + 3 * q) % 9 - 4) / 16.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "precision",
                                                  "scaler_reference.json"))
    args = ap.parse_args()
    dev = torch.device(args.device)

    params, q0 = [], 0
    for n in SIZES:
        p = torch.tensor([initial_param(q0 + i) for i in range(n)], dtype=torch.float32, device=dev)
        params.append(p.requires_grad_(True))
        q0 += n
    opt = torch.optim.SGD(params, lr=LR, momentum=0.0, foreach=False)
    scaler = torch.amp.GradScaler(dev.type, init_scale=INIT_SCALE, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=GROWTH_INTERVAL)
    stepped_now = [False]
    opt.register_step_post_hook(lambda *_: stepped_now.__setitem__(0, True))

    rows = []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=dev)
        q = 0
        for p in params:
            c = torch.tensor([coefficient(s, q + i) for i in range(p.numel())], dtype=torch.float32, device=dev)
            loss = loss + (c * p).sum()
            q += p.numel()
        scale_before = scaler.get_scale()
        scaler.scale(loss).backward()
        stepped_now[0] = False
        scaler.step(opt)
        scaler.update()
        rows.append({"step": s, "scale_before": scale_before, "stepped": stepped_now[0],
                     "scale_after": scaler.get_scale(),
                     "growth_tracker_after": int(scaler.state_dict()["_growth_tracker"])})

    final = [float(x) for p in params for x in p.detach().cpu().double().tolist()]
    out = {
        "what": "torch.amp.GradScaler trajectory on the closed-form sequence of tests/precision/scaler_sequence.hpp",
        "command": "python3 benchmarks/precision/scaler_reference.py --device " + args.device,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
        "init_scale": INIT_SCALE, "growth_factor": 2.0, "backoff_factor": 0.5,
        "growth_interval": GROWTH_INTERVAL, "lr": LR, "sizes": SIZES,
        "steps": rows, "final_params": final,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", args.out, "final scale", scaler.get_scale(),
          "skipped", [r["step"] for r in rows if not r["stepped"]])


if __name__ == "__main__":
    main()
