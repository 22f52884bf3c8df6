#!/usr/bin/env python3
"""Reference data for FOMO s/m/l from the original's network, in the shared fixtures' format.

The original's LibreFOMOModel (Libre-YOLO/libreyolo libreyolo/models/fomo/nn.py, newer than the fixtures'
snapshot c41461e, which has no FOMO) is not shipped here: read it from the public index, save it as
<scratch>/fomo/nn.py (with an empty <scratch>/fomo/__init__.py) and run, under Debian's PyTorch 1.13:

    /usr/bin/python3 tests/fomo/make_reference.py <scratch> tests/fomo/reference

For each size it writes <out>/fomo-<size>/ with the files of /work/shared/fixtures/libreyolo/README.md:
keys.tsv (every state_dict entry in order), config.json (parameter counts at 1, 3 and 80 classes, the
size's native input size), ref.json + ref.bin (the README's deterministic fill, the model built at
nb_classes=80 and run in eval mode at its native input size on the README's deterministic input; the
input, both direct children's outputs and the output; a tensor over 65 536 elements stored as
flat[::ceil(numel / 8192)], as in the shared fixtures).
"""
import json
import math
import struct
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "fixtures"))
from fixture_format import deterministic_input, fill, write_keys  # noqa: E402


def main():
    scratch, out_root = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(scratch))
    from fomo.nn import CONFIGS, LibreFOMOModel  # the original's module, from the scratch copy

    torch.set_grad_enabled(False)
    for size in ("s", "m", "l"):
        out = out_root / f"fomo-{size}"
        out.mkdir(parents=True, exist_ok=True)
        model = LibreFOMOModel(size=size, nc=80)
        sd = model.state_dict()
        write_keys(model, out / "keys.tsv")
        counts = {str(nc): sum(p.numel() for p in LibreFOMOModel(size=size, nc=nc).parameters()) for nc in (1, 3, 80)}
        imgsz = int(CONFIGS[size]["imgsz"])
        config = {
            "family": "fomo",
            "size": size,
            "task": "point",
            "model_class": "libreyolo.models.fomo.nn:LibreFOMOModel",
            "nb_classes": 80,
            "n_params": counts["80"],
            "n_params_by_classes": counts,
            "configs_entry": CONFIGS[size],
            "torch": torch.__version__,
        }
        (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")

        fill(model)
        model.eval()
        x = deterministic_input(imgsz)
        tensors = [("input", x.clone())]
        hooks = []
        for cname, child in model.named_children():
            hooks.append(child.register_forward_hook(
                lambda m, i, o, cname=cname: tensors.append((f"child.{cname}", o.detach().clone()))))
        y = model(x)
        for h in hooks:
            h.remove()
        tensors.append(("output", y))

        entries, blob, offset = {}, bytearray(), 0
        for name, t in tensors:
            flat = t.detach().to(torch.float32).reshape(-1)
            n = flat.numel()
            stride = 1 if n <= 65536 else math.ceil(n / 8192)
            stored = flat[::stride].contiguous()
            blob += struct.pack(f"<{stored.numel()}f", *stored.tolist())
            entries[name] = {"shape": list(t.shape), "offset": offset, "count": stored.numel(), "stride": stride,
                             "sum": float(flat.double().sum()), "abs_sum": float(flat.double().abs().sum()),
                             "dtype_orig": str(t.dtype).replace("torch.", "")}
            offset += stored.numel()
        ref = {"imgsz": imgsz,
               "fill": "the deterministic fill and input of /work/shared/fixtures/libreyolo/README.md "
                       "(float64 then cast to float32); model.eval(); no grad; nb_classes=80",
               "tensors": entries}
        (out / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")
        (out / "ref.bin").write_bytes(bytes(blob))
        print(f"fomo-{size}: {len(sd)} entries, n_params {counts}, imgsz {imgsz}, output {list(y.shape)}")


if __name__ == "__main__":
    main()
