#!/usr/bin/env python3
"""Writes the small torch.save-format files that tests/io/ reads (and fuzz/corpus/pt/ seeds from).

Uses only the standard library (pickle + zipfile): torch, numpy and the custom classes are stand-in
modules registered in sys.modules, so `pickle` names the same globals torch.save would
(torch._utils._rebuild_tensor_v2, torch.FloatStorage, collections.OrderedDict, numpy scalars, ...) and
lays tensors out the same way (persistent ids ('storage', type, key, 'cpu', numel) + data/<key>).

    python3 tests/data/pt/make_pt_files.py        # rewrites tests/data/pt/*.pt deterministically

The outputs are committed so the tests need no Python. Each file is a few hundred bytes.
"""
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

OUT = os.path.dirname(os.path.abspath(__file__))


# ---- stand-in modules ---------------------------------------------------------------------------
def fake_module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


def fake_global(module, name, obj):
    obj.__module__ = module
    obj.__qualname__ = name
    obj.__name__ = name
    setattr(sys.modules[module], name, obj)
    return obj


for _m in ("torch", "torch._utils", "numpy", "numpy.core", "numpy.core.multiarray", "mypkg", "mypkg.settings"):
    fake_module(_m)


def _rebuild_tensor_v2(*args):
    raise RuntimeError("stand-in, never called")


def _np_scalar(*args):
    raise RuntimeError("stand-in, never called")


fake_global("torch._utils", "_rebuild_tensor_v2", _rebuild_tensor_v2)
fake_global("numpy.core.multiarray", "scalar", _np_scalar)

STORAGE_TYPES = {}
for _n, _fmt in (("FloatStorage", "f"), ("LongStorage", "q"), ("HalfStorage", "e"), ("ByteStorage", "B")):
    STORAGE_TYPES[_n] = (fake_global("torch", _n, type(_n, (), {})), _fmt)


class NpDtype:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (NpDtype, (self.code, False, True), (3, "<", None, None, None, -1, -1, 0))

    def __setstate__(self, state):
        pass


fake_global("numpy", "dtype", NpDtype)


class NpScalar:
    def __init__(self, code, fmt, value):
        self.dtype, self.data = NpDtype(code), struct.pack("<" + fmt, value)

    def __reduce__(self):
        return (_np_scalar, (self.dtype, self.data))


class Config:  # a custom class: pickled as NEWOBJ + BUILD, which the reader keeps as a placeholder
    def __init__(self):
        self.lr = 0.1
        self.tags = ["a", "b"]


fake_global("mypkg.settings", "Config", Config)


# ---- tensors ------------------------------------------------------------------------------------
class Storage:
    def __init__(self, key, type_name, values):
        self.key, self.type_name, self.values = key, type_name, values
        cls, fmt = STORAGE_TYPES[type_name]
        self.cls, self.bytes = cls, struct.pack("<%d%s" % (len(values), fmt), *values)


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __reduce__(self):
        return (_rebuild_tensor_v2,
                (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def __init__(self, f, storages):
        super().__init__(f, protocol=2)
        self.storages = storages

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            self.storages[obj.key] = obj
            return ("storage", obj.cls, obj.key, "cpu", len(obj.values))
        return None


def pickle_torch(obj):
    buf, storages = io.BytesIO(), {}
    TorchPickler(buf, storages).dump(obj)
    return buf.getvalue(), storages


def write_zip(path, records):
    """records: list of (name, bytes); stored, fixed timestamps, archive folder = file stem."""
    stem = os.path.splitext(os.path.basename(path))[0]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            info = zipfile.ZipInfo(stem + "/" + name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            z.writestr(info, data)


def write_pt(path, pkl, storages, extra=()):
    records = [("data.pkl", pkl), ("byteorder", b"little")]
    records += [("data/" + k, s.bytes) for k, s in sorted(storages.items())]
    records += list(extra)
    records.append(("version", b"3\n"))
    write_zip(path, records)


def out(name):
    return os.path.join(OUT, name)


# ---- the good file ------------------------------------------------------------------------------
s0 = Storage("0", "FloatStorage", [float(i) for i in range(6)])      # 0 1 2 3 4 5
s1 = Storage("1", "LongStorage", [10, 11, 12, 13, 14, 15])
s2 = Storage("2", "HalfStorage", [0.5, -2.0])
model = collections.OrderedDict()
model["w"] = Tensor(s0, 0, (2, 3), (3, 1))          # [[0,1,2],[3,4,5]]
model["w_t"] = Tensor(s0, 0, (3, 2), (1, 3))        # its transpose, same storage
model["row1"] = Tensor(s0, 3, (3,), (1,))           # [3,4,5]: offset into the same storage
model["idx"] = Tensor(s1, 2, (2, 2), (2, 1))        # [[12,13],[14,15]]
model["h"] = Tensor(s2, 0, (2,), (1,))
model["scalar"] = Tensor(s1, 5, (), ())             # 0-d: 15
good = {
    "model": model,
    "names": {0: "cat", 1: "dog"},
    "nc": 2,
    "lr": 0.01,
    "neg": -123456789012,
    "big": 2 ** 70,
    "flag": True,
    "nothing": None,
    "tup": (1, "x", 2.5),
    "raw": b"\x00\xff\x10",
    "np_f8": NpScalar("f8", "d", 0.25),
    "np_i8": NpScalar("i8", "q", -7),
    "np_f4": NpScalar("f4", "f", 1.5),
    "custom": Config(),
    "config": {"nested": {"deep": [1, 2, {"x": "y"}]}, "mosaic_scale": [0.5, 1.5]},
}
pkl, st = pickle_torch(good)
write_pt(out("tiny_ok.pt"), pkl, st)
GOOD_PKL, GOOD_ST = pkl, st

# ---- hostile / broken files ---------------------------------------------------------------------
class CallsSystem:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/libreyolo_pwned",))


class CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('echo pwned')",))


pkl, st = pickle_torch({"model": collections.OrderedDict(w=Tensor(s0, 0, (6,), (1,))), "x": CallsSystem()})
write_pt(out("evil_os_system.pt"), pkl, st)
pkl, st = pickle_torch({"epoch": 1, "x": CallsEval()})
write_pt(out("evil_eval.pt"), pkl, st)

with open(out("not_zip.pt"), "wb") as f:
    f.write(b"this is a text file, not a checkpoint\n")

# A bare pickle: the legacy (pre-1.6) torch.save layout starts like this.
with open(out("legacy_pickle.pt"), "wb") as f:
    f.write(pickle.dumps({"a": 1}, protocol=2))

with open(out("tiny_ok.pt"), "rb") as f:
    good_bytes = f.read()
with open(out("truncated.pt"), "wb") as f:
    f.write(good_bytes[: len(good_bytes) * 2 // 3])

# One flipped byte inside storage record data/0 (the CRC no longer matches).
flipped = bytearray(good_bytes)
with zipfile.ZipFile(out("tiny_ok.pt")) as z:
    info = z.getinfo("tiny_ok/data/0")
name_len, extra_len = struct.unpack("<HH", flipped[info.header_offset + 26: info.header_offset + 30])
data_start = info.header_offset + 30 + name_len + extra_len
flipped[data_start + 5] ^= 0x40
with open(out("crc_flipped.pt"), "wb") as f:
    f.write(bytes(flipped))

# A tensor whose storage record is absent.
pkl, st = pickle_torch({"model": collections.OrderedDict(w=Tensor(Storage("5", "FloatStorage", [1.0, 2.0]), 0, (2,), (1,)))})
write_pt(out("missing_record.pt"), pkl, {})

# A view that needs 16 elements of a 6-element storage.
pkl, st = pickle_torch({"model": collections.OrderedDict(w=Tensor(s0, 0, (4, 4), (4, 1)))})
write_pt(out("storage_too_small.pt"), pkl, st)

# An opcode that does not exist (0xff) after a valid start.
write_pt(out("bad_opcode.pt"), b"\x80\x02}q\x00(X\x01\x00\x00\x00a\xff.", {})

# A list that contains itself, and shared references that expand exponentially (2**60 values).
write_pt(out("recursive.pt"), b"\x80\x02]q\x00h\x00a.", {})
bomb = bytearray(b"\x80\x02]q\x00")
for i in range(60):
    bomb += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86q" + bytes([i + 1])
bomb += b"."
write_pt(out("bomb.pt"), bytes(bomb), {})

# The good file re-zipped with deflate (torch writes stored records; zip tools may not).
with zipfile.ZipFile(out("tiny_ok.pt")) as src, zipfile.ZipFile(out("deflated.pt"), "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        new = zipfile.ZipInfo("deflated/" + info.filename.split("/", 1)[1], date_time=(1980, 1, 1, 0, 0, 0))
        new.compress_type = zipfile.ZIP_DEFLATED
        dst.writestr(new, src.read(info))

# Two records whose names differ only by case (miniz looks names up case-insensitively).
write_zip(out("dup_case.pt"), [("data.pkl", b"\x80\x02K\x01."), ("DATA.PKL", b"\x80\x02K\x02."), ("version", b"3\n")])

for name in sorted(os.listdir(OUT)):
    if name.endswith(".pt"):
        print("%-24s %6d bytes" % (name, os.path.getsize(out(name))))
