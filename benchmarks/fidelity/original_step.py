#!/usr/bin/env python3
"""The original LibreYOLO's own training step time, eager, on one real batch: the counterpart of our
benchmarks/graph_speedup (eager arm) for issue 39's "beside the original's own step" table.

    python3 original_step.py SRC MODEL DATA_YAML OUT_DIR key=value ...

SRC, MODEL, DATA_YAML, OUT_DIR and the keys as original_train.py (which this reuses to build the model and
start the original's `train()`). Instead of training, its trainer is set up as `train()` would (`setup()`:
model on the device, criterion, data loader, optimizer, scaler, EMA), one batch is taken from its own
training loader and replayed, and each step is the body of its DEIM-line `_train_epoch` (autocast forward
with the criterion, scaled backward, unscale, optimizer step, scaler update, the loss read back):
  - arm "bare": without gradient clipping and EMA, as our graph_speedup arms time a step;
  - arm "full": with the recipe's clipping and the EMA update, as the original's training loop runs.
Each arm: --warmup steps, then --steps timed steps (CUDA-synchronised), min and median in ms; peak VRAM.
The c41461e snapshot has no CUDA-graph training: there is no graphed arm to time (its newer versions
capture backbone + encoder of these families; their published gain is 1.15-1.16x on DEIMv2-atto and EC-s,
docs/training_cuda_graphs.md, on another GPU). Prints one JSON line.
"""
import json
import os
import statistics
import sys
import time


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import original_train  # noqa: E402  (its FAMILIES table and value parsing)

    src, model, data, out = sys.argv[1:5]
    kwargs = {}
    warmup, steps = 10, 24
    for kv in sys.argv[5:]:
        k, _, v = kv.partition("=")
        if k == "warmup":
            warmup = int(v)
        elif k == "steps":
            steps = int(v)
        else:
            kwargs[k] = original_train.parse_value(v)
    import torch  # noqa: E402
    libreyolo = original_train.import_original(src)
    from libreyolo.training.trainer import BaseTrainer  # noqa: E402

    result = {}

    def timed(trainer):
        trainer.setup()
        dev = trainer.device
        batch = next(iter(trainer.train_loader))
        imgs, targets = batch[0].to(dev), batch[1].to(dev)
        model_ = trainer.model
        model_.train()
        clip = float(getattr(trainer.config, "clip_max_norm", 0.0))
        opt, scaler, ema = trainer.optimizer, trainer.scaler, trainer.ema_model

        def step(full):
            if scaler is not None:
                with torch.autocast("cuda"):
                    loss = trainer.on_forward(imgs, targets)["total_loss"]
                opt.zero_grad()
                scaler.scale(loss).backward()
                if full and clip > 0:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model_.parameters(), clip)
                scaler.step(opt)
                scaler.update()
            else:
                loss = trainer.on_forward(imgs, targets)["total_loss"]
                opt.zero_grad()
                loss.backward()
                if full and clip > 0:
                    torch.nn.utils.clip_grad_norm_(model_.parameters(), clip)
                opt.step()
            if full and ema is not None:
                ema.update(model_)
            return loss.item()

        arms = {}
        torch.cuda.reset_peak_memory_stats()
        for arm, full in (("bare", False), ("full", True)):
            for _ in range(warmup):
                step(full)
            ts = []
            for _ in range(steps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step(full)
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
            arms[arm] = {"min_ms": round(min(ts), 2), "median_ms": round(statistics.median(ts), 2)}
        result.update({"batch_shape": list(imgs.shape), "amp": scaler is not None, "clip": clip,
                       "ema": ema is not None, "arms": arms,
                       "peak_vram_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)})
        return {}

    BaseTrainer.train = timed  # the model's train() builds and sets up the trainer as a real run would
    net, cls_name, size = original_train.build_original(libreyolo, model, data)
    net.train(data=data, project=os.path.dirname(out), name=os.path.basename(out), exist_ok=True, **kwargs)
    print(json.dumps({"model": model, "original": cls_name, "size": size, "warmup": warmup, "steps": steps,
                      "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, **result}), flush=True)


if __name__ == "__main__":
    main()
