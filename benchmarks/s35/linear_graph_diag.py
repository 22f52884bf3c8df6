# Session 35: where does a graphed region's backward (torch, the same scheme as the library's GraphedCallable:
# warm-up on a side stream, forward graph, backward graph of autograd.grad w.r.t. the parameters with static
# gradient-output buffers) compute other bits than eager .backward()? Lockstep: every step both arms compute the
# gradients at the same parameters; the parameters then move by the eager gradients. Prints, per variant, the first
# step and the parameters whose gradients differ.
import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")

class TokenNet(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.stem = nn.Conv2d(3, 128, 32, stride=32)
        self.attention = attention
        if attention:
            self.attn = nn.MultiheadAttention(128, 8, batch_first=True)
        else:
            self.l1 = nn.Linear(128, 512); self.l2 = nn.Linear(512, 128)
    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)
        if self.attention:
            return t + self.attn(t, t, t, need_weights=False)[0]
        return t + self.l2(F.gelu(self.l1(t)))

def loss_of(out):
    return out.float().pow(2).mean()

def run(variant, attention=False, amp=True, steps=12):
    torch.manual_seed(0)
    net = TokenNet(attention).to(dev).train()
    params = list(net.parameters())
    torch.manual_seed(11)
    xs = [torch.randn(4, 3, 64, 64, device=dev) for _ in range(3)]
    ac = lambda: torch.autocast("cuda", dtype=torch.float16, enabled=amp)
    # capture
    static_x = xs[0].clone()
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            with ac():
                o = net(static_x)
            torch.autograd.grad(o, params, torch.zeros_like(o), allow_unused=True)
    torch.cuda.current_stream().wait_stream(side); torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    fwd, bwd = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(fwd, pool=pool, capture_error_mode="thread_local"):
        with ac():
            static_out = net(static_x)
    if variant == "contiguous grad-output buffer":
        static_gout = torch.zeros(static_out.shape, dtype=static_out.dtype, device=dev)
    else:
        static_gout = torch.zeros_like(static_out)
    with torch.cuda.graph(bwd, pool=pool, capture_error_mode="thread_local"):
        static_grads = torch.autograd.grad(static_out, params, static_gout, allow_unused=True)
    info = f"out {tuple(static_out.shape)} strides {static_out.stride()} gout strides {static_gout.stride()}"
    first = None; where = []
    for i in range(steps):
        x = xs[i % 3]
        # eager
        for p in params: p.grad = None
        if variant == "eager by autograd.grad":
            with ac():
                o = net(x)
            l = loss_of(o)
            go = torch.autograd.grad(l, o, retain_graph=True)[0]
            eg = torch.autograd.grad(o, params, go)
        else:
            with ac():
                o = net(x)
            l = loss_of(o)
            l.backward()
            eg = [p.grad.clone() for p in params]
        # graph
        static_x.copy_(x)
        fwd.replay()
        so = static_out.detach().requires_grad_(True)
        gl = loss_of(so)
        go2 = torch.autograd.grad(gl, so)[0]
        if i == 0: info += f" | eager-loss grad strides {go2.stride()}"
        static_gout.copy_(go2)
        bwd.replay()
        gg = [g.clone() for g in static_grads]
        names = [n for n, _ in net.named_parameters()]
        diff = [(n, (a.double() - b.double()).abs().max().item()) for n, a, b in zip(names, eg, gg) if not torch.equal(a, b)]
        loss_eq = torch.equal(l, gl)
        if (diff or not loss_eq) and first is None:
            first = i; where = diff + ([("loss", (l - gl).abs().item())] if not loss_eq else [])
        with torch.no_grad():
            for p, g in zip(params, eg): p.sub_(0.01 * g)
    print(f"{variant:32s} attention={attention} amp={amp}: first differing step {first} {where[:6]} ({info})", flush=True)

for attention in (False, True):
    for amp in (True, False):
        for v in ("as library", "contiguous grad-output buffer", "eager by autograd.grad"):
            try:
                run(v, attention, amp)
            except Exception as e:
                print(v, attention, amp, "failed:", repr(e)[:300])
with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True) if hasattr(torch.backends.cuda, "sdp_kernel") else torch.no_grad():
    run("as library (SDPA math)", True, True)
