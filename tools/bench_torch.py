#!/usr/bin/python3
"""PyTorch training-throughput baseline for gemtrain: a Gemma 3 decoder as an
nn.Module (the same math as tools/ref_gemma3.py, the Gemma spec, section 1),
float32, trained with AdamW on random tokens.

Run it with a passive OpenMP wait policy, otherwise PyTorch's OpenMP pool
busy-waits and steals the cores from its own BLAS threads (1.2-2.2x slower
here, see docs/performance.md#figures); the variable must be set before Python
starts:

  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=Haswell \
      /usr/bin/python3 tools/bench_torch.py [--threads 2] \
      [--vocab 4096 --d 512 --layers 8 --heads 8 --kv-heads 2 --head-dim 64 \
       --mlp 2048 --window 128 --pattern LLLLLG --batch 4 --seq 512 --steps 8]

Also keep OpenBLAS's kernel choice the same as the runtime being compared:
the project machines set OPENBLAS_CORETYPE=Haswell (cpu.md).  Where it is
unset and OpenBLAS 0.3.21 does not know the CPU (e.g. a VM reporting "Intel(R)
Xeon(R) Processor", family 6 model 207), it falls back to the generic Prescott
kernel and sgemm runs 3-5x slower; the script warns when it is unset.  Torch
from Debian calls the system libblas.so.3 (check with OPENBLAS_VERBOSE=2).

Prints, per measured step and as medians over the steps after 2 warmup steps:
  step tokens/s      = B*T / (forward + backward + clip + AdamW step)
  fwd+bwd tokens/s   = B*T / (forward + backward)
plus achieved GFLOP/s (FLOPs counted as in cpu.md) and peak RSS.

  --check   compares this module's loss and gradients with tools/ref_gemma3.py
            on a small config (float32) and exits.
  --remat   per-layer activation checkpointing (torch.utils.checkpoint).
"""

import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as Fn
from torch.utils.checkpoint import checkpoint


def gelu_tanh(x):
    return Fn.gelu(x, approximate="tanh")


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def rope_tables(T, hd, base, scale):
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)) / scale
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()          # [T, hd]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H, K, hd = c.d, c.heads, c.kv_heads, c.head_dim
        self.H, self.K, self.hd = H, K, hd
        self.q_proj = nn.Linear(d, H * hd, bias=False)
        self.k_proj = nn.Linear(d, K * hd, bias=False)
        self.v_proj = nn.Linear(d, K * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, c.eps)
        self.k_norm = RMSNorm(hd, c.eps)
        self.scaling = c.qpas ** -0.5

    def forward(self, a, cos, sin, bias):
        B, T, _ = a.shape
        H, K, hd = self.H, self.K, self.hd
        G = H // K
        q = self.q_norm(self.q_proj(a).view(B, T, H, hd))
        k = self.k_norm(self.k_proj(a).view(B, T, K, hd))
        v = self.v_proj(a).view(B, T, K, hd).transpose(1, 2)            # [B,K,T,hd]
        c, s = cos[:, None, :], sin[:, None, :]
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        # GQA without copying K/V: q head h = kv*G + g reads kv head h // G
        q = q.view(B, T, K, G, hd).permute(0, 2, 3, 1, 4).reshape(B, K, G * T, hd)
        k = k.transpose(1, 2)                                            # [B,K,T,hd]
        sc = torch.matmul(q, k.transpose(-1, -2)) * self.scaling          # [B,K,G*T,T]
        sc = sc.view(B, K, G, T, T) + bias
        p = torch.softmax(sc, dim=-1).view(B, K, G * T, T)
        o = torch.matmul(p, v).view(B, K, G, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H * hd)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.d, c.mlp, bias=False)
        self.up_proj = nn.Linear(c.d, c.mlp, bias=False)
        self.down_proj = nn.Linear(c.mlp, c.d, bias=False)

    def forward(self, m):
        return self.down_proj(gelu_tanh(self.gate_proj(m)) * self.up_proj(m))


class Layer(nn.Module):
    def __init__(self, c, is_global):
        super().__init__()
        self.is_global = is_global
        self.input_layernorm = RMSNorm(c.d, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.d, c.eps)
        self.pre_feedforward_layernorm = RMSNorm(c.d, c.eps)
        self.mlp = MLP(c)
        self.post_feedforward_layernorm = RMSNorm(c.d, c.eps)

    def forward(self, x, cos, sin, bias):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, bias))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab, c.d)
        self.layers = nn.ModuleList(
            [Layer(c, c.pattern[i % len(c.pattern)] == "G") for i in range(c.layers)])
        self.norm = RMSNorm(c.d, c.eps)
        self.remat = False
        T = c.seq
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        neg = torch.tensor(float("-inf"))
        self.register_buffer("bias_global", torch.where(j <= i, torch.tensor(0.0), neg), persistent=False)
        self.register_buffer("bias_local", torch.where((j <= i) & (j > i - c.window), torch.tensor(0.0), neg),
                             persistent=False)
        cl, sl = rope_tables(T, c.head_dim, c.local_base, 1.0)
        cg, sg = rope_tables(T, c.head_dim, c.global_base, c.rope_scale)
        for n, v in (("cos_l", cl), ("sin_l", sl), ("cos_g", cg), ("sin_g", sg)):
            self.register_buffer(n, v, persistent=False)

    def forward(self, tokens, targets):
        c = self.c
        x = self.embed_tokens(tokens) * torch.tensor(c.d ** 0.5, dtype=torch.float32)
        for layer in self.layers:
            if layer.is_global:
                args = (self.cos_g, self.sin_g, self.bias_global)
            else:
                args = (self.cos_l, self.sin_l, self.bias_local)
            if self.remat:
                x = checkpoint(layer, x, *args, use_reentrant=False)
            else:
                x = layer(x, *args)
        h = self.norm(x)
        logits = h @ self.embed_tokens.weight.t()
        if c.softcap > 0:
            logits = c.softcap * torch.tanh(logits / c.softcap)
        return Fn.cross_entropy(logits.view(-1, c.vocab), targets.reshape(-1).long(), ignore_index=-1)


def flops_per_token(c):
    d, H, K, hd, F, V, T, W = c.d, c.heads, c.kv_heads, c.head_dim, c.mlp, c.vocab, c.seq, c.window
    weights = c.layers * (2 * d * H * hd + 2 * d * K * hd + 3 * d * F)
    keys = 0.0
    for i in range(c.layers):
        if c.pattern[i % len(c.pattern)] == "G":
            keys += (T + 1) / 2
        else:
            keys += sum(min(t + 1, W) for t in range(T)) / T
    return 3 * (2 * weights + 2 * d * V + 4 * H * hd * keys)


def check(args):
    """Loss and grads of this module vs tools/ref_gemma3.py (float32)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ref_gemma3 as ref
    c = argparse.Namespace(vocab=97, d=48, heads=4, kv_heads=2, head_dim=12, mlp=80, layers=6,
                           window=5, pattern="LLLLLG", qpas=12.0, global_base=1e6, local_base=1e4,
                           rope_scale=8.0, eps=1e-6, softcap=0.0, seq=13)
    cfg = ref.load_config({
        "vocab_size": c.vocab, "base_emb_dim": c.d, "base_num_query_heads": c.heads,
        "base_num_kv_heads": c.kv_heads, "head_dim": c.head_dim, "base_mlp_dim": c.mlp,
        "base_num_decoder_layers": c.layers, "sliding_window_size": c.window,
        "layer_pattern": c.pattern, "query_pre_attn_scalar": c.qpas, "rope_max_timescale": c.global_base,
        "local_rope_max_timescale": c.local_base, "rope_linear_scaling_factor": c.rope_scale,
        "normalization_layer_epsilon": c.eps, "final_logits_soft_cap": c.softcap})
    gen = torch.Generator().manual_seed(5)
    params = ref.init_params(cfg, gen)
    inputs, targets, pos, seg = ref.make_batch(cfg, 3, c.seq, gen, mask_some=True)
    _, rloss, _, rgrads = ref.forward_backward(params, cfg, inputs, targets, pos, seg, torch.float32)
    model = Gemma3(c)
    sd = {k: v for k, v in params.items()}
    model.load_state_dict(sd, strict=True)
    loss = model(inputs.long(), targets)
    loss.backward()
    named = dict(model.named_parameters())
    worst = max(float((named[k].grad - rgrads[k]).abs().max() / rgrads[k].abs().max()) for k in rgrads)
    dl = abs(float(loss) - float(rloss))
    print("check vs ref_gemma3 (float32): loss %.7f vs %.7f (diff %.2e); max rel grad diff %.2e"
          % (float(loss), float(rloss), dl, worst))
    ok = dl < 1e-5 and worst < 1e-4
    print("check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--mlp", type=int, default=2048)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--pattern", default="LLLLLG")
    ap.add_argument("--qpas", type=float, default=0.0, help="query_pre_attn_scalar (0: head_dim)")
    ap.add_argument("--global-base", type=float, default=1e6)
    ap.add_argument("--local-base", type=float, default=1e4)
    ap.add_argument("--rope-scale", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=8, help="measured steps (after 2 warmup steps)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=1.0, help="global-norm gradient clip (0: off)")
    ap.add_argument("--remat", action="store_true", help="per-layer activation checkpointing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    c = ap.parse_args()
    torch.set_num_threads(c.threads)
    if c.check:
        return check(c)
    if c.qpas <= 0:
        c.qpas = float(c.head_dim)

    wait = os.environ.get("OMP_WAIT_POLICY", "(unset)")
    if wait.upper() != "PASSIVE":
        print("WARNING: OMP_WAIT_POLICY=%s; run with OMP_WAIT_POLICY=PASSIVE for fair timing" % wait)
    if "OPENBLAS_CORETYPE" not in os.environ:
        print("WARNING: OPENBLAS_CORETYPE is unset; OpenBLAS may pick a generic kernel on this CPU "
              "(the project machines use OPENBLAS_CORETYPE=Haswell)")
    torch.manual_seed(c.seed)
    model = Gemma3(c)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.zero_()
            elif n == "embed_tokens.weight":
                p.normal_(0.0, 1.0 / math.sqrt(c.d))
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    model.remat = c.remat
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    nparams = sum(p.numel() for p in model.parameters())
    B, T = c.batch, c.seq
    ntok = B * T
    fpt = flops_per_token(c)
    print("torch %s, threads %d, OMP_WAIT_POLICY=%s, OPENBLAS_CORETYPE=%s, remat %s, load average %s"
          % (torch.__version__, torch.get_num_threads(), wait, os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
             c.remat, "%.2f %.2f %.2f" % os.getloadavg()))
    print("model: V%d d%d L%d H%d KV%d hd%d F%d W%d pattern %s qpas %g; B%d T%d; %.2fM params; "
          "%.1f MFLOP/token (train)" % (c.vocab, c.d, c.layers, c.heads, c.kv_heads, c.head_dim, c.mlp,
                                        c.window, c.pattern, c.qpas, B, T, nparams / 1e6, fpt / 1e6))
    gen = torch.Generator().manual_seed(c.seed + 1)
    step_t, fb_t, losses = [], [], []
    for step in range(c.warmup + c.steps):
        tokens = torch.randint(0, c.vocab, (B, T), generator=gen)
        targets = torch.cat([tokens[:, 1:], torch.randint(0, c.vocab, (B, 1), generator=gen)], 1)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        t1 = time.perf_counter()
        if c.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c.clip)
        opt.step()
        t2 = time.perf_counter()
        tag = "warmup" if step < c.warmup else "step"
        print("%-6s %2d loss %.4f  step %.3f s (%.0f tok/s)  fwd+bwd %.3f s (%.0f tok/s)"
              % (tag, step, float(loss), t2 - t0, ntok / (t2 - t0), t1 - t0, ntok / (t1 - t0)), flush=True)
        if step >= c.warmup:
            step_t.append(t2 - t0)
            fb_t.append(t1 - t0)
            losses.append(float(loss))
    ms, mf = statistics.median(step_t), statistics.median(fb_t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("median over %d steps: step %.3f s -> %.1f tokens/s (%.1f GFLOP/s); fwd+bwd %.3f s -> %.1f tokens/s; "
          "peak RSS %.0f MiB" % (len(step_t), ms, ntok / ms, fpt * ntok / ms / 1e9, mf, ntok / mf, rss))
    print("load average at the end: %.2f %.2f %.2f (the machine is shared: compare runs side by side)"
          % os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
