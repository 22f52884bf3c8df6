"""Reference forward of the original's SegFormer (libreyolo/models/segformer/nn.py), transcribed from its
structure for the C++ cross-check (tests/segformer/test_reference.cpp). Usage: ref_segformer.py DIR SIZE NC.
DIR holds meta.json ({"names": [...], "shapes": [...], "input": [B,3,H,W]}), params.bin (every tensor as
float32, in names order) and x.bin; writes out.bin (eval logits before the final resize, float32)."""
import json, sys
import torch
import torch.nn.functional as F
from torch import nn

SIZES = {"b0": ((2, 2, 2, 2), (32, 64, 160, 256), 256), "b1": ((2, 2, 2, 2), (64, 128, 320, 512), 256)}
HEADS, SR, MLP, PATCH, STRIDE = (1, 2, 5, 8), (8, 4, 2, 1), (4, 4, 4, 4), (7, 3, 3, 3), (4, 2, 2, 2)


class Reduce(nn.Module):
    def __init__(s, d, r):
        super().__init__()
        s.sequence_reduction = nn.Conv2d(d, d, r, r)
        s.layer_norm = nn.LayerNorm(d)

    def forward(s, x, h, w):
        b, n, c = x.shape
        y = s.sequence_reduction(x.transpose(1, 2).reshape(b, c, h, w))
        return s.layer_norm(y.reshape(b, c, -1).transpose(1, 2))


class Attn(nn.Module):
    def __init__(s, d, heads, r):
        super().__init__()
        s.heads, s.hd, s.r = heads, d // heads, r
        s.q_proj, s.k_proj, s.v_proj, s.o_proj = (nn.Linear(d, d) for _ in range(4))
        if r > 1:
            s.sequence_reduction = Reduce(d, r)

    def forward(s, x, h, w):
        b, n, c = x.shape
        q = s.q_proj(x).view(b, n, -1, s.hd).transpose(1, 2)
        kv = s.sequence_reduction(x, h, w) if s.r > 1 else x
        m = kv.shape[1]
        k = s.k_proj(kv).view(b, m, -1, s.hd).transpose(1, 2)
        v = s.v_proj(kv).view(b, m, -1, s.hd).transpose(1, 2)
        a = F.softmax(q @ k.transpose(2, 3) * s.hd ** -0.5, dim=-1, dtype=torch.float32).to(q.dtype)
        return s.o_proj((a @ v).transpose(1, 2).reshape(b, n, -1))


class DW(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.dwconv = nn.Conv2d(d, d, 3, 1, 1, groups=d)

    def forward(s, x, h, w):
        b, n, c = x.shape
        return s.dwconv(x.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)


class Mix(nn.Module):
    def __init__(s, d, hid):
        super().__init__()
        s.fc1, s.dwconv, s.fc2 = nn.Linear(d, hid), DW(hid), nn.Linear(hid, d)

    def forward(s, x, h, w):
        return s.fc2(F.gelu(s.dwconv(s.fc1(x), h, w)))


class Layer(nn.Module):
    def __init__(s, d, heads, r, ratio):
        super().__init__()
        s.layernorm_before, s.attention = nn.LayerNorm(d), Attn(d, heads, r)
        s.layernorm_after, s.mlp = nn.LayerNorm(d), Mix(d, d * ratio)

    def forward(s, x, h, w):  # eval: drop-path is the identity
        x = s.attention(s.layernorm_before(x), h, w) + x
        return s.mlp(s.layernorm_after(x), h, w) + x


class Embed(nn.Module):
    def __init__(s, p, st, cin, d):
        super().__init__()
        s.proj, s.layer_norm = nn.Conv2d(cin, d, p, st, p // 2), nn.LayerNorm(d)

    def forward(s, x):
        e = s.proj(x)
        return s.layer_norm(e.flatten(2).transpose(1, 2)), e.shape[2], e.shape[3]


class Stage(nn.Module):
    def __init__(s, i, cin, depths, dims):
        super().__init__()
        d = dims[i]
        s.patch_embeddings = Embed(PATCH[i], STRIDE[i], cin, d)
        s.blocks = nn.ModuleList(Layer(d, HEADS[i], SR[i], MLP[i]) for _ in range(depths[i]))
        s.layer_norm = nn.LayerNorm(d)

    def forward(s, x):
        t, h, w = s.patch_embeddings(x)
        for b in s.blocks:
            t = b(t, h, w)
        t = s.layer_norm(t)
        return t.reshape(t.shape[0], h, w, -1).permute(0, 3, 1, 2).contiguous()


class Proj(nn.Module):
    def __init__(s, cin, d):
        super().__init__()
        s.proj = nn.Linear(cin, d)

    def forward(s, x):
        return s.proj(x.flatten(2).transpose(1, 2))


class Head(nn.Module):
    def __init__(s, dims, D, nc):
        super().__init__()
        s.linear_projections = nn.ModuleList(Proj(dims[i], D) for i in range(4))
        s.linear_fuse = nn.Conv2d(4 * D, D, 1, bias=False)
        s.batch_norm = nn.BatchNorm2d(D)
        s.classifier = nn.Conv2d(D, nc, 1)

    def forward(s, feats):
        b, size, outs = feats[-1].shape[0], feats[0].shape[2:], []
        for f, p in zip(feats, s.linear_projections):
            h, w = f.shape[2], f.shape[3]
            t = p(f).transpose(1, 2).reshape(b, -1, h, w)
            outs.append(F.interpolate(t, size=size, mode="bilinear", align_corners=False))
        return s.classifier(F.relu(s.batch_norm(s.linear_fuse(torch.cat(outs[::-1], dim=1)))))


class Net(nn.Module):
    def __init__(s, size, nc):
        super().__init__()
        depths, dims, D = SIZES[size]
        enc = nn.Module()
        enc.stages = nn.ModuleList(Stage(i, 3 if i == 0 else dims[i - 1], depths, dims) for i in range(4))
        s.encoder, s.decode_head = enc, Head(dims, D, nc)

    def forward(s, x):
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        h = (x - mean) / std
        feats = []
        for st in s.encoder.stages:
            h = st(h)
            feats.append(h)
        return s.decode_head(feats)


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
    ref = net.state_dict()
    state = {k: v.to(ref[k].dtype) for k, v in state.items()}
    net.load_state_dict(state, strict=True)  # the C++ names are exactly these
    x = torch.frombuffer(bytearray(open(f"{d}/x.bin", "rb").read()), dtype=torch.float32).reshape(meta["input"])
    with torch.no_grad():
        y = net(x).contiguous()
    open(f"{d}/out.bin", "wb").write(y.numpy().tobytes())


if __name__ == "__main__":
    main()
