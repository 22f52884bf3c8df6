#!/usr/bin/env python3
"""Writes tests/data/pt/torch_mixed.pt with a real torch.save (needs torch and numpy; run with the
python that has them, e.g. Debian's /usr/bin/python3 with python3-torch 1.13). The output is
committed; the tests only read it. It holds what real checkpoints carry besides plain state dicts:
an nn.Parameter, dtypes other than float32, views sharing a storage, numpy scalars and an array,
a torch.device, a dtype object, a set and tuple keys.
"""
import collections
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_mixed.pt")

base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
sd = collections.OrderedDict()
sd["param"] = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.5]))
sd["base"] = base
sd["base_t"] = base.t()
sd["col2"] = base[:, 2]
sd["bf16"] = torch.tensor([1.5, -0.25], dtype=torch.bfloat16)
sd["half"] = torch.tensor([[0.5, 2.0]], dtype=torch.float16)
sd["i8"] = torch.tensor([-128, 0, 127], dtype=torch.int8)
sd["mask"] = torch.tensor([True, False])
sd["step"] = torch.tensor(41)
ck = {
    "model": sd,
    "np_float": np.float64(0.125),
    "np_int": np.int32(-5),
    "np_array": np.arange(3),
    "device": torch.device("cpu"),
    "dtype": torch.float16,
    "tags": {"b", "a"},
    "by_pair": {(1, "x"): 2},
    "nested": [1, [2, [3, None]]],
}
torch.save(ck, OUT)
print(OUT, os.path.getsize(OUT), "bytes, torch", torch.__version__)
