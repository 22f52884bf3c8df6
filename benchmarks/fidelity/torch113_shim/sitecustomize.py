"""Lets the original LibreYOLO (c41461e) import and validate under Debian 12's PyTorch 1.13 / torchvision 0.14
(benchmarks/fidelity/original_val_cpu.sh puts this folder on PYTHONPATH). Stand-ins only for what its import
chain touches and a YOLO-line val() does not run: torch._dynamo's config and scaled_dot_product_attention (the
fixture generator's, scripts/fixtures/fixture_format.py), torch.amp.GradScaler, torchvision.tv_tensors and
transforms.v2 (used by other families' training transforms), torch.serialization.safe_globals; and torch.load
with weights_only=False (1.13's safe unpickler rejects the original's checkpoint metadata)."""
import contextlib
import os
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "fixtures"))
import fixture_format  # noqa: E402

fixture_format.install_torch2_standins()

import torch  # noqa: E402
import torch.amp  # noqa: E402
import torch.cuda.amp  # noqa: E402
import torch.serialization  # noqa: E402
import torchvision  # noqa: E402
import torchvision.transforms  # noqa: E402

if not hasattr(torch.amp, "GradScaler"):
    torch.amp.GradScaler = torch.cuda.amp.GradScaler
if not hasattr(torch.serialization, "safe_globals"):
    torch.serialization.safe_globals = lambda names: contextlib.nullcontext()


def _stub(name):
    """A module whose every attribute is a new do-nothing class (enough for imports and class bodies)."""
    m = types.ModuleType(name)

    def attr(a):
        if a.startswith("__"):
            raise AttributeError(a)
        t = type(a, (object,), {"__init__": lambda self, *args, **kw: None})
        setattr(m, a, t)
        return t

    m.__getattr__ = attr
    sys.modules[name] = m
    return m


if not hasattr(torchvision, "tv_tensors"):
    torchvision.tv_tensors = _stub("torchvision.tv_tensors")
try:
    import torchvision.transforms.v2  # noqa: F401
except ImportError:
    torchvision.transforms.v2 = _stub("torchvision.transforms.v2")
    torchvision.transforms.v2.functional = _stub("torchvision.transforms.v2.functional")

_torch_load = torch.load


def _load(f, map_location=None, *, weights_only=False, **kw):  # keeps `weights_only` in the signature
    return _torch_load(f, map_location=map_location, weights_only=False, **kw)


torch.load = _load
