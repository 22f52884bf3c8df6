#!/usr/bin/env python3
"""Issue 41 item 1: which convolution algorithm cuDNN picks for each layer of a real training step, and how far
each one's result lies from an fp64 reference, per mode of choosing (the instant heuristic, heuristic mode B,
autotuning).

    python3 conv_algos.py measure SRC MODEL DATA_YAML OUT_JSONL MODE [key=value ...]
    python3 conv_algos.py report OUT_DIR                     (reads OUT_DIR/*.jsonl, prints the tables)

MODE: instant (PyTorch's default), b (heuristic mode B: run the process with TORCH_CUDNN_USE_HEURISTIC_MODE_B=1),
bench (cudnn.benchmark on), benchdet (autotuning among the deterministic engines: benchmark and deterministic on;
session 20 timed it as fast as autotuning). Keys: batch= imgsz= (the original's train() keys), device=cpu for a dry run of the
plumbing (no cuDNN, no kernel names).

How: the original's trainer (SRC, c41461e) is set up as its train() would (original_train.build_original, the
trick of original_step.py), one batch of its own loader goes through its forward and loss under fp16 autocast
with the model and batch channels-last (our trainer's CUDA default), and every Conv2d's input, weight and output
gradient are kept. Then each layer is run alone, three ops: forward, backward-data, backward-filter (ATen's
convolution_backward with one output mask each, so each is its own cuDNN call), in fp16 channels-last and in fp32
(cuDNN's TF32 as PyTorch allows by default). Each op runs once to warm (autotuning times its candidates then),
twice more to check it gives the same bits, and once under the profiler for the kernels' names and times. The
reference is the same op on the same (fp16-rounded) tensors in fp64 with cuDNN off.

Per op: err = ||out - ref|| / ||ref||; floor = the same for ref rounded to the op's output dtype (the error no
algorithm can avoid); bias = <out - ref, ref> / <ref, ref> (a systematic shrink or growth); zeros = the share of
elements out == 0 where ref != 0 (underflow); same = the two runs equal bit for bit.
"""
import glob
import json
import os
import statistics
import sys
import time


def measure_layers(layers, mode, cpu, rows, sink=None):
    """Each (name, Conv2d, fp16 input, fp16 output gradient): its three ops in fp16 and fp32, one row each (also
    written to sink as it is made, so that a run cut by its time limit keeps the layers it finished)."""
    import torch
    import torch.nn.functional as F

    def op_fn(kind, x, w, g, m):
        args = (m.stride, m.padding, m.dilation)
        if kind == "fwd":
            return lambda: F.conv2d(x, w, None, *args, m.groups)
        mask = [True, False, False] if kind == "dgrad" else [False, True, False]
        idx = 0 if kind == "dgrad" else 1
        return lambda: torch.ops.aten.convolution_backward(g, x, w, None, list(m.stride), list(m.padding),
                                                           list(m.dilation), False, [0, 0], m.groups, mask)[idx]

    def kernels(fn):
        if cpu:
            return []
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        out = []
        for e in prof.events():
            if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
                t = getattr(e, "device_time", None)
                if t is None:
                    t = getattr(e, "cuda_time", 0.0)
                out.append([e.name[:160], round(float(t), 2)])
        return out

    for name, m, x16, g16 in layers:
        w16 = m.weight.detach().half()
        for dtype in ("fp16", "fp32") if not cpu else ("fp32",):  # no fp16 convolution on the CPU
            cast = (lambda t: t) if dtype == "fp16" else (lambda t: t.float())
            x, w, g = cast(x16), cast(w16), cast(g16)
            if not cpu:
                x = x.contiguous(memory_format=torch.channels_last)
                w = w.contiguous(memory_format=torch.channels_last)
                g = g.contiguous(memory_format=torch.channels_last)
            xd, wd, gd = x16.double(), w16.double(), g16.double()
            for kind in ("fwd", "dgrad", "wgrad"):
                fn = op_fn(kind, x, w, g, m)
                fn()  # warm-up: autotuning times its candidates here
                if not cpu:
                    torch.cuda.synchronize()
                a, b = fn(), fn()
                same = bool(torch.equal(a, b))
                with torch.backends.cudnn.flags(enabled=False):
                    ref = op_fn(kind, xd, wd, gd, m)()
                ad = a.double()
                nref = ref.norm().item()
                row = {
                    "mode": mode, "dtype": dtype, "layer": name, "op": kind,
                    "x": list(x.shape), "w": list(w.shape), "stride": list(m.stride), "groups": m.groups,
                    "err": (ad - ref).norm().item() / nref if nref > 0 else 0.0,
                    "floor": (ref.to(a.dtype).double() - ref).norm().item() / nref if nref > 0 else 0.0,
                    "bias": ((ad - ref) * ref).sum().item() / (nref * nref) if nref > 0 else 0.0,
                    "zeros": ((a == 0) & (ref != 0)).double().mean().item(),
                    "same": same,
                    "kernels": kernels(fn),
                }
                rows.append(row)
                if sink is not None:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()


def measure(src, model, data, out_path, mode, kv):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "fidelity"))
    import original_train  # noqa: E402

    import torch  # noqa: E402

    libreyolo = original_train.import_original(src)
    from libreyolo.training.trainer import BaseTrainer  # noqa: E402

    kwargs = {k: original_train.parse_value(v) for k, v in (x.partition("=")[::2] for x in kv)}
    cpu = kwargs.get("device") == "cpu"
    if mode not in ("instant", "b", "bench", "benchdet"):
        sys.exit(f"MODE={mode}: allowed instant, b, bench, benchdet")
    if mode == "b" and os.environ.get("TORCH_CUDNN_USE_HEURISTIC_MODE_B") != "1":
        sys.exit("mode b: run with TORCH_CUDNN_USE_HEURISTIC_MODE_B=1 in the environment")
    rows = []

    def run(trainer):
        trainer.setup()
        torch.backends.cudnn.benchmark = mode in ("bench", "benchdet")
        torch.backends.cudnn.deterministic = mode == "benchdet"
        dev = trainer.device
        batch = next(iter(trainer.train_loader))
        imgs, targets = batch[0].to(dev), batch[1].to(dev)
        net = trainer.model
        net.train()
        if not cpu:
            net = net.to(memory_format=torch.channels_last)
            imgs = imgs.contiguous(memory_format=torch.channels_last)
        kept = {}

        def keep(name):
            def fwd_hook(mod, inputs, output):
                entry = kept.setdefault(name, {"mod": mod})
                entry["x"] = inputs[0].detach().half()
                output.register_hook(lambda g: entry.__setitem__("g", g.detach().half()))
            return fwd_hook

        hooks = [m.register_forward_hook(keep(n)) for n, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)]
        with torch.autocast("cuda" if not cpu else "cpu", enabled=not cpu):
            loss = trainer.on_forward(imgs, targets)["total_loss"]
        # A modest scale keeps fp16 output gradients away from underflow without overflowing (the trainer's
        # GradScaler starts at 2^16 and backs off; the recorded gradients are only inputs to the isolated ops).
        (loss * 256.0).backward()
        for h in hooks:
            h.remove()
        layers = [(n, e) for n, e in kept.items() if "g" in e and torch.isfinite(e["g"]).all()]
        print(f"{len(layers)} of {len(kept)} conv layers with finite gradients; loss {loss.item():.4f}", flush=True)

        with open(out_path, "w") as sink:
            measure_layers([(n, e["mod"], e["x"], e["g"]) for n, e in layers], mode, cpu, rows, sink)
        return {}

    BaseTrainer.train = run
    net, cls_name, size = original_train.build_original(libreyolo, model, data)
    t0 = time.time()
    net.train(data=data, project="/tmp/conv_algos", name=f"{model}_{mode}", exist_ok=True, **kwargs)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not cpu else "cpu"
    cudnn = torch.backends.cudnn.version() if not cpu else None
    print(json.dumps({"model": model, "mode": mode, "rows": len(rows), "gpu": gpu, "torch": torch.__version__,
                      "cudnn": cudnn, "seconds": round(time.time() - t0, 1)}), flush=True)


def family(kname):
    """A short name for a convolution kernel's algorithm family, from its (demangled) name."""
    k = kname.lower()
    for key, fam in (("winograd", "winograd"), ("fft", "fft"), ("cutlass", "cutlass"), ("xmma", "xmma"),
                     ("implicit_convolve", "implicit_gemm"), ("implicit", "implicit_gemm"),
                     ("precomputed", "precomputed_gemm"), ("dgrad", "dgrad"), ("wgrad", "wgrad"),
                     ("gemm", "gemm"), ("direct", "direct")):
        if key in k:
            fam += "_splitk" if "splitk" in k or "split_k" in k else ""
            fam += "_f16acc" if "f16f16_f16f16" in k else ""  # half-precision accumulation
            return fam
    return "other"


def ratio_of(r):
    """err / floor; an exact result where the reference itself is exact (both 0: an all-zero gradient) is 1."""
    if r["floor"] > 0:
        return r["err"] / r["floor"]
    return 1.0 if r["err"] == 0 else float("inf")


def report(out_dir):
    rows = []
    for p in sorted(glob.glob(os.path.join(out_dir, "*.jsonl"))):
        tag = os.path.basename(p)[:-len(".jsonl")]
        for line in open(p):
            r = json.loads(line)
            r["tag"] = tag
            rows.append(r)
    if not rows:
        sys.exit(f"no *.jsonl in {out_dir}")
    tags = sorted({r["tag"] for r in rows})
    by = {(r["tag"], r["dtype"], r["layer"], r["op"]): r for r in rows}
    print("## Error against fp64 over all layers (err / floor: 1 = the output rounding alone)\n")
    print("| run | dtype | op | layers | median err/floor | max err/floor (layer) | mean bias | max zeros | not same twice | GPU us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tag in tags:
        for dtype in ("fp16", "fp32"):
            for op in ("fwd", "dgrad", "wgrad"):
                rs = [r for r in rows if r["tag"] == tag and r["dtype"] == dtype and r["op"] == op]
                if not rs:
                    continue
                ratio = [ratio_of(r) for r in rs]
                worst = max(range(len(rs)), key=lambda i: ratio[i])
                us = sum(sum(k[1] for k in r["kernels"]) for r in rs)
                print(f"| {tag} | {dtype} | {op} | {len(rs)} | {statistics.median(ratio):.2f} | "
                      f"{ratio[worst]:.1f} ({rs[worst]['layer']}) | {statistics.mean(r['bias'] for r in rs):+.2e} | "
                      f"{max(r['zeros'] for r in rs):.2e} | {sum(not r['same'] for r in rs)} | {us:.0f} |")
    print("\n## Kernel families (GPU time share per run, dtype, op)\n")
    for tag in tags:
        for dtype in ("fp16", "fp32"):
            for op in ("fwd", "dgrad", "wgrad"):
                acc = {}
                for r in rows:
                    if r["tag"] == tag and r["dtype"] == dtype and r["op"] == op:
                        for name, us in r["kernels"]:
                            acc[family(name)] = acc.get(family(name), 0.0) + us
                tot = sum(acc.values())
                if tot > 0:
                    parts = ", ".join(f"{k} {v / tot:.0%}" for k, v in sorted(acc.items(), key=lambda kv: -kv[1]))
                    print(f"- {tag} {dtype} {op}: {parts} ({tot:.0f} us)")
    base = next((t for t in tags if t.endswith("instant")), tags[0])  # file names are conv_<run>
    print("\n## Layers where a run's error is over 2x the " + base + " run's\n")
    print("| run | dtype | layer | op | x | w | err/floor, this run | err/floor, " + base + " | bias | its largest kernel |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tag in (t for t in tags if t != base):
        for key, r in sorted(by.items()):
            if key[0] != tag:
                continue
            b = by.get((base,) + key[1:])
            if not b or r["floor"] <= 0 or b["floor"] <= 0:
                continue
            rr, br = ratio_of(r), ratio_of(b)
            if rr > 2 * br and rr > 2:
                big = max(r["kernels"], key=lambda k: k[1])[0][:90] if r["kernels"] else "-"
                print(f"| {tag} | {r['dtype']} | {r['layer']} | {r['op']} | {r['x']} | {r['w']} | {rr:.1f} | {br:.1f} | "
                      f"{r['bias']:+.1e} | {big} |")
    print("\n## Kernel choice differing between runs of the same mode (autotuning's run-to-run choice)\n")
    pairs = [(a, b) for i, a in enumerate(tags) for b in tags[i + 1:] if a.rstrip("0123456789_") == b.rstrip("0123456789_")]
    for a, b in pairs:
        n = diff = 0
        for key, r in by.items():
            if key[0] != a:
                continue
            o = by.get((b,) + key[1:])
            if not o:
                continue
            n += 1
            ka = sorted(k[0] for k in r["kernels"])
            kb = sorted(k[0] for k in o["kernels"])
            diff += ka != kb
        print(f"- {a} vs {b}: {diff} of {n} ops ran other kernels")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "report" and len(sys.argv) == 3:
        report(sys.argv[2])
    elif len(sys.argv) >= 7 and sys.argv[1] == "measure":
        measure(*sys.argv[2:7], sys.argv[7:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
