#!/usr/bin/env python3
"""Session 40: does a CUDA-graph memory pool shared by several captures let a later capture reuse the memory an
earlier one freed, when each capture runs on its own side stream (our step graphs take a new pool stream per
capture, c10::cuda::getStreamFromPool) against one stream for all of them?

    python3 benchmarks/s40/pool_streams.py        (on the CUDA machine; prints one JSON line per mode)

A small conv net's forward + backward at five input sizes, each recorded once into one shared pool, every
graph kept alive; the device memory reserved by each capture and by all of them."""
import json

import torch


def run(mode, shapes):
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU())
                                for _ in range(8)]).cuda()

    def body(x):
        loss = net(x).float().square().mean()
        loss.backward()
        return loss.detach()

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle()
    one = torch.cuda.Stream()
    kept, incs = [], []
    for s in shapes:
        x = torch.randn(4, 64, s, s, device="cuda")
        st = one if mode == "one stream" else torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):  # the eager warm-up, as the trainer's capture step runs first
            for p in net.parameters():
                p.grad = None
            body(x)
        torch.cuda.synchronize()
        for p in net.parameters():
            p.grad = None
        before = torch.cuda.memory_reserved()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, stream=st):
            out = body(x)
        torch.cuda.synchronize()
        incs.append(round((torch.cuda.memory_reserved() - before) / 2**20, 1))
        kept.append((g, x, out))
    for g, _, _ in kept:  # every graph replays
        g.replay()
    torch.cuda.synchronize()
    total = round((torch.cuda.memory_reserved() - base) / 2**20, 1)
    del kept, net
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {"mode": mode, "shapes": shapes, "reserved_per_capture_mib": incs, "reserved_total_mib": total,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}


if __name__ == "__main__":
    shapes = [96, 128, 112, 80, 120]
    for mode in ("a new stream per capture", "one stream"):
        print(json.dumps(run(mode, shapes)), flush=True)
