"""Reference forward of the original's LingBot-Vision segmenter (libreyolo/models/lingbotvision/nn.py),
transcribed from its structure for the C++ cross-check (tests/lingbot/test_reference.cpp).
Usage: ref_lingbot.py DIR SIZE NC; DIR as for tests/segformer/ref_segformer.py."""
import json, math, sys
import torch
import torch.nn.functional as F
from torch import nn

SIZES = {"s": (384, 12, 6), "b": (768, 12, 12)}


class Scale(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.gamma = nn.Parameter(torch.full((d,), 1e-5))

    def forward(s, x):
        return x * s.gamma


class QKV(nn.Linear):
    def __init__(s, i, o):
        super().__init__(i, o)
        m = torch.ones(o)
        m[o // 3: 2 * o // 3] = 0
        s.register_buffer("bias_mask", m)

    def forward(s, x):
        return F.linear(x, s.weight, s.bias * s.bias_mask)


def rot(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class Attn(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        s.heads, s.qkv, s.proj = heads, QKV(d, 3 * d), nn.Linear(d, d)

    def forward(s, x, sin, cos):
        b, n, c = x.shape
        q, k, v = (t.transpose(1, 2) for t in self_unbind(s.qkv(x).reshape(b, n, 3, s.heads, c // s.heads)))
        p = n - sin.shape[-2]
        q = torch.cat((q[:, :, :p], q[:, :, p:] * cos + rot(q[:, :, p:]) * sin), dim=-2)
        k = torch.cat((k[:, :, :p], k[:, :, p:] * cos + rot(k[:, :, p:]) * sin), dim=-2)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return s.proj((a @ v).transpose(1, 2).reshape(b, n, c))


def self_unbind(t):
    return torch.unbind(t, 2)


class Mlp(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.fc1, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(s, x):
        return s.fc2(F.gelu(s.fc1(x)))


class Block(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        s.norm1, s.attn, s.ls1 = nn.LayerNorm(d), Attn(d, heads), Scale(d)
        s.norm2, s.mlp, s.ls2 = nn.LayerNorm(d), Mlp(d), Scale(d)

    def forward(s, x, sin, cos):
        x = x + s.ls1(s.attn(s.norm1(x), sin, cos))
        return x + s.ls2(s.mlp(s.norm2(x)))


class Rope(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        dh = d // heads
        s.register_buffer("periods", 100.0 ** (2 * torch.arange(dh // 4, dtype=torch.float32) / (dh // 2)))

    def forward(s, H, W):
        ch = torch.arange(0.5, H, dtype=torch.float32) / H
        cw = torch.arange(0.5, W, dtype=torch.float32) / W
        c = torch.stack(torch.meshgrid(ch, cw, indexing="ij"), dim=-1).flatten(0, 1) * 2.0 - 1.0
        ang = (2 * math.pi * c[:, :, None] / s.periods[None, None, :]).flatten(1, 2).tile(2)
        return torch.sin(ang), torch.cos(ang)


class Backbone(nn.Module):
    def __init__(s, d, depth, heads):
        super().__init__()
        s.patch_embed = nn.Module()
        s.patch_embed.proj = nn.Conv2d(3, d, 16, 16)
        s.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        s.storage_tokens = nn.Parameter(torch.zeros(1, 4, d))
        s.mask_token = nn.Parameter(torch.zeros(1, d))
        s.rope_embed = Rope(d, heads)
        s.blocks = nn.ModuleList(Block(d, heads) for _ in range(depth))
        s.norm = nn.LayerNorm(d)

    def forward(s, x):
        b, _, H, W = x.shape
        h, w = H // 16, W // 16
        t = s.patch_embed.proj(x).permute(0, 2, 3, 1).flatten(1, 2)
        t = torch.cat([torch.cat([s.cls_token, s.storage_tokens], dim=1).expand(b, -1, -1), t], dim=1)
        sin, cos = s.rope_embed(h, w)
        for blk in s.blocks:
            t = blk(t, sin, cos)
        return s.norm(t)[:, 5:]


class Net(nn.Module):
    def __init__(s, size, nc):
        super().__init__()
        d, depth, heads = SIZES[size]
        s.backbone, s.predict = Backbone(d, depth, heads), nn.Conv2d(d, nc, 1)

    def forward(s, x):
        x = (x - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        t = s.backbone(x)
        b, n, d = t.shape
        return s.predict(t.transpose(1, 2).reshape(b, d, x.shape[-2] // 16, x.shape[-1] // 16))


def main():
    d, size, nc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    meta = json.load(open(f"{d}/meta.json"))
    flat = torch.frombuffer(bytearray(open(f"{d}/params.bin", "rb").read()), dtype=torch.float32)
    net = Net(size, nc).eval()
    state, off = {}, 0
    for name, shape in zip(meta["names"], meta["shapes"]):
        n = 1
        for v in shape:
            n *= v
        state[name] = flat[off:off + n].reshape(shape).clone()
        off += n
    net.load_state_dict(state, strict=True)
    x = torch.frombuffer(bytearray(open(f"{d}/x.bin", "rb").read()), dtype=torch.float32).reshape(meta["input"])
    with torch.no_grad():
        y = net(x).contiguous()
    open(f"{d}/out.bin", "wb").write(y.numpy().tobytes())


if __name__ == "__main__":
    main()
