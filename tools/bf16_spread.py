#!/usr/bin/python3
"""How far bf16 rounding moves the gradients of gemtrain's reference fixtures,
and how widely that distance spreads between equally valid bf16 roundings.

tests/test_bf16_model.c holds gemtrain's dtype=bfloat16 run to a bound on
the relative L2 error of all gradients against the float64 gradients the
fixture stores (computed at the float32 parameters). This tool measures, per
fixture, that same error for:

  exact     the float64 model at bf16 parameters: no arithmetic error at all,
            only the parameters rounded (gemtrain computes with bf16 weights)
  torch     PyTorch with every tensor in bfloat16 (tools/ref_bf16_errors.py)
  emul-P32  an emulation of gemtrain's bf16 scheme (below) whose attention
            keeps P in float32 before P.V (gemtrain's forward before this tool)
  emul-Pu   the same, P = exp(s - max) rounded to bf16 before P.V and divided
            by the float32 row sum after (gemtrain's bf16 attention kernel)
  emul-Pn   the same, the normalised softmax rounded to bf16 (PyTorch / HF)

each first with the parameters rounded to nearest even (what gemtrain and
PyTorch do; one number), then over --samples stochastic roundings of the
parameters to bf16 (each element to one of its two neighbouring bf16 values,
the upper one with probability equal to its distance from the lower one in
ulps): every such rounding is as valid a bf16 copy of the weights as
round-to-nearest, so the spread of the error over them is the error measure's
own noise at bf16 precision. It prints min / median / max, and per fixture
the bound tests/test_bf16_model.c holds gemtrain to (the larger of twice
PyTorch's error at round-to-nearest weights and the largest error exact
arithmetic or PyTorch showed over all the roundings).

The emulation of gemtrain's scheme (docs/precision.md): float32 storage and
float32 sums; every tensor a forward op writes rounded to bf16 (the
embeddings, every norm's output, q and k after norm and RoPE, v after its
norm, the attention context, every projection's output, the GeGLU product,
the residual sums, the per-layer inputs, the head's logits before the
soft-cap); matmul inputs bf16 (weights and activations are), and in the
backward the gradient operand of each matmul rounded to bf16; gradients
float32. Attention: S = q.k^T in float32 from bf16 q and k; softmax, running
max and sum, the log-sum-exp in float32; its backward as the kernel's bf16
mode: P = exp(S - lse) float32, D = rowsum(dO * ctx), dV = bf16(P)^T bf16(dO),
dP = bf16(dO) v^T, dS = P (dP - D), dQ = bf16(dS) k, dK = bf16(dS)^T q. The
routed experts of a MoE layer compute in float32 and round their output. The
emulation follows the ops, not gemtrain's exact summation order, so it is not
bit-identical to gemtrain; it is only for Gemma 4 (the Gemma 3 fixtures get
the exact and torch rows).

The fixtures: the five of tests/test_reference.c, and gemma4_bf16_{dense,ple,
moe}, the same three Gemma 4 models drawn with q_norm / k_norm scales and
matrices halved (tools/ref_gemma4.py make-fixture --qk-norm-scale 0.5
--matrix-scale 0.5; tests/data/README.md), whose attention scores are O(1)
instead of O(sqrt(hd)): gemma4_ref_ple spreads 0.18-2.0 here, gemma4_bf16_ple
a few hundredths, so the bf16 fixtures are the ones that measure gemtrain's
bf16 gradients.

  /usr/bin/python3 tools/bf16_spread.py [--samples 32] [fixture stems...]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gemma3 as g3  # noqa: E402
import ref_gemma4 as g4  # noqa: E402
import ref_moe as rm  # noqa: E402

FIXTURES = ["gemma3_ref_small", "gemma3_ref_packed", "gemma4_ref_dense", "gemma4_ref_ple", "gemma4_ref_moe",
            "gemma4_bf16_dense", "gemma4_bf16_ple", "gemma4_bf16_moe"]


def bf(x):
    """round to nearest even bf16, kept in x's dtype"""
    return x.to(torch.bfloat16).to(x.dtype)


def stochastic_bf16(x, gen):
    """float32 x to one of its two neighbouring bf16 values: the upper (in
    magnitude) with probability equal to its distance from the lower in ulps"""
    u = x.contiguous().view(torch.int32)
    lo = u & ~0xFFFF
    frac = (u & 0xFFFF).to(torch.float64) / 65536.0
    up = torch.rand(x.shape, generator=gen, dtype=torch.float64) < frac
    return torch.where(up, lo + 0x10000, lo).view(torch.float32)


class Round(torch.autograd.Function):
    """forward: the value rounded to bf16 (an op writing its output); backward: float32 gradient through"""
    @staticmethod
    def forward(ctx, x):
        return bf(x)

    @staticmethod
    def backward(ctx, g):
        return g


class RoundGrad(torch.autograd.Function):
    """forward: identity; backward: the gradient rounded to bf16 (a matmul's gradient operand as packed)"""
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return bf(g)


R, RG = Round.apply, RoundGrad.apply


class Attention(torch.autograd.Function):
    """q [B,T,H,hd], k, v [B,T,K,hd] (bf16 values), mask [B,T,T]; pmode: 'f32'
    (P unrounded), 'unnorm' (exp(s - max) rounded, divided by the float32 sum
    after P.V: the kernel) or 'norm' (softmax rounded). Returns the context
    [B,T,H*hd], not yet rounded."""
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, pmode):
        B, T, H, hd = q.shape
        G = H // k.shape[2]
        qh = q.transpose(1, 2)
        kh = k.transpose(1, 2).repeat_interleave(G, dim=1)
        vh = v.transpose(1, 2).repeat_interleave(G, dim=1)
        s = (qh @ kh.transpose(-1, -2)) * scale
        s = s.masked_fill(~mask[:, None], float("-inf"))
        m = s.max(-1, keepdim=True).values
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        if pmode == "unnorm":
            o = (bf(e) @ vh) / l
        elif pmode == "norm":
            o = bf(e / l) @ vh
        else:
            o = (e @ vh) / l
        lse = m + torch.log(l)
        ctx.save_for_backward(qh, kh, vh, bf(o), lse, mask)
        ctx.scale, ctx.G = scale, G
        return o.transpose(1, 2).reshape(B, T, H * hd)

    @staticmethod
    def backward(ctx, g):
        qh, kh, vh, o, lse, mask = ctx.saved_tensors
        scale, G = ctx.scale, ctx.G
        B, H, T, hd = qh.shape
        K = H // G
        do = g.view(B, T, H, hd).transpose(1, 2)
        s = (qh @ kh.transpose(-1, -2)) * scale
        p = torch.exp(s - lse).masked_fill(~mask[:, None], 0.0)
        D = (do * o).sum(-1, keepdim=True)
        dor = bf(do)
        dv = bf(p).transpose(-1, -2) @ dor
        dp = dor @ vh.transpose(-1, -2)
        ds = bf(p * (dp - D))
        dq = (ds @ kh) * scale
        dk = (ds.transpose(-1, -2) @ qh) * scale
        red = lambda x: x.view(B, K, G, T, hd).sum(2).transpose(1, 2)  # noqa: E731
        return dq.transpose(1, 2), red(dk), red(dv), None, None, None


def emul_forward(Wt, cfg, inputs, positions, segments, pmode):
    """gemtrain's bf16 scheme on a Gemma 4 model; Wt: bf16-valued float32 leaves. (logits, lb)"""
    d, H, L = cfg["base_emb_dim"], cfg["base_num_query_heads"], cfg["base_num_decoder_layers"]
    P, eps = cfg["hidden_size_per_layer_input"], cfg["normalization_layer_epsilon"]
    B, T = inputs.shape
    f32 = torch.float32

    def lin(a, w):
        return R(RG(a @ w.t()))

    def rms(x, w):
        return g4.rms(x, w, eps)

    x = R(Wt["embed_tokens.weight"][inputs.long()] * d ** 0.5)
    ple = None
    if P:
        ident = R(Wt["embed_tokens_per_layer.weight"][inputs.long()] * P ** 0.5).view(B, T, L, P)
        proj = R(RG(x @ Wt["per_layer_model_projection.weight"].t()))
        c = R(rms((proj * d ** -0.5).view(B, T, L, P), Wt["per_layer_projection_norm.weight"]))
        ple = R((ident + c) * 2.0 ** -0.5)
    scaling = cfg["query_pre_attn_scalar"] ** -0.5
    kv, lbs = {}, []
    for i in range(L):
        li = g4.layer_info(cfg, i)
        hd, K, glob = li["hd"], li["K"], li["glob"]
        p = "layers.%d." % i
        if glob:
            cos, sin = g4.rope_cos_sin(positions, hd, cfg["rope_max_timescale"], cfg["rope_linear_scaling_factor"],
                                       cfg["global_rope_proportion"], f32)
        else:
            cos, sin = g4.rope_cos_sin(positions, hd, cfg["local_rope_max_timescale"], 1.0,
                                       cfg["local_rope_proportion"], f32)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        a = R(rms(x, Wt[p + "input_layernorm.weight"]))
        q = rms(lin(a, Wt[p + "self_attn.q_proj.weight"]).view(B, T, H, hd), Wt[p + "self_attn.q_norm.weight"])
        q = R(q * cos + g3.rotate_half(q) * sin)
        if li["donor"] < 0:
            kraw = lin(a, Wt[p + "self_attn.k_proj.weight"]).view(B, T, K, hd)
            k = rms(kraw, Wt[p + "self_attn.k_norm.weight"])
            k = R(k * cos + g3.rotate_half(k) * sin)
            vraw = kraw if li["k_eq_v"] else lin(a, Wt[p + "self_attn.v_proj.weight"]).view(B, T, K, hd)
            v = R(rms(vraw, Wt.get(p + "self_attn.v_norm.weight")))
            kv[i] = (k, v)
        else:
            k, v = kv[li["donor"]]
        mask = g3.attention_mask(segments, T, cfg["sliding_window_size"], local=not glob)
        o = R(Attention.apply(q, k, v, mask, scaling, pmode))
        o = lin(o, Wt[p + "self_attn.o_proj.weight"])
        x = R(x + rms(o, Wt[p + "post_attention_layernorm.weight"]))
        m = R(rms(x, Wt[p + "pre_feedforward_layernorm.weight"]))
        gate, up = lin(m, Wt[p + "mlp.gate_proj.weight"]), lin(m, Wt[p + "mlp.up_proj.weight"])
        f = lin(R(g3.gelu_tanh(gate) * up), Wt[p + "mlp.down_proj.weight"])
        if cfg["num_experts"] > 1:
            shared = R(rms(f, Wt[p + "post_feedforward_layernorm_1.weight"]))
            pm = {n: Wt[p + n] for n in rm.PARAMS}
            routed, lb, _ = rm.forward(pm, x.reshape(B * T, d), B, T, cfg["num_experts_per_tok"], eps,
                                       cfg["load_balance_loss_weight"])
            lbs.append(lb)
            x = R(x + rms(R(shared + R(routed.view(B, T, d))), Wt[p + "post_feedforward_layernorm.weight"]))
        else:
            x = R(x + rms(f, Wt[p + "post_feedforward_layernorm.weight"]))
        if P:
            g = R(g3.gelu_tanh(lin(x, Wt[p + "per_layer_input_gate.weight"])) * ple[:, :, i, :])
            x = R(x + rms(lin(g, Wt[p + "per_layer_projection.weight"]), Wt[p + "post_per_layer_input_norm.weight"]))
        if cfg["layer_scalar_trainable"]:
            x = R(x * Wt[p + "layer_scalar"])
    logits = R(RG(R(rms(x, Wt["norm.weight"])) @ Wt["embed_tokens.weight"].t()))
    cap = cfg["final_logits_soft_cap"]
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    lb = torch.stack(lbs).mean() if lbs else torch.zeros((), dtype=f32)
    return logits, lb


def emul_grads(params_bf, cfg, inputs, targets, pos, seg, pmode):
    """(logits, gradients) of gemtrain's scheme"""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params_bf.items()}
    logits, lb = emul_forward(leaves, cfg, inputs, pos, seg, pmode)
    loss, _ = g3.loss_fn(logits, targets)
    (loss + lb).backward()
    return logits.detach(), {k: v.grad for k, v in leaves.items()}


def logit_err(logits, t):
    """largest logit error over the largest |logit| (test_bf16_model's logits measure)"""
    want = t["expected.logits"].astype(np.float64)
    return float(np.abs(logits.double().numpy() - want).max() / np.abs(want).max())


def grad_err(grads, t, names):
    num = sum(float(((grads[n].double().numpy() - t["grad." + n].astype(np.float64)) ** 2).sum()) for n in names)
    den = sum(float((t["grad." + n].astype(np.float64) ** 2).sum()) for n in names)
    return math.sqrt(num / den)


def run_fixture(stem, samples, seed):
    t, meta = g3.load_safetensors(os.path.join("tests", "data", stem + ".safetensors"))
    mod = g3 if stem.startswith("gemma3") else g4  # gemma4_ref_* and gemma4_bf16_*
    cfg = mod.load_config(json.loads(meta["config"]))
    names = [n for n, _ in mod.param_shapes(cfg)]
    params = {n: torch.from_numpy(t[n].copy()) for n in names}
    inputs, targets, pos, seg = (torch.from_numpy(t[k].copy()) for k in ("inputs", "targets", "positions", "segments"))

    def fb(p, dtype):
        if mod is g4:
            r = g4.forward_backward_lb(p, cfg, inputs, targets, pos, seg, dtype)
        else:
            r = g3.forward_backward(p, cfg, inputs, targets, pos, seg, dtype)
        return r[0], r[3]

    rows = [("exact", lambda p: fb(p, torch.float64)), ("torch", lambda p: fb(p, torch.bfloat16))]
    if mod is g4:
        for label, pm in (("emul-P32", "f32"), ("emul-Pu", "unnorm"), ("emul-Pn", "norm")):
            rows.append((label, lambda p, pm=pm: emul_grads(p, cfg, inputs, targets, pos, seg, pm)))
    rne = {n: bf(v) for n, v in params.items()}
    gen = torch.Generator().manual_seed(seed)
    draws = [{n: stochastic_bf16(params[n], gen) for n in names} for _ in range(samples)]
    out = {}
    for label, fn in rows:
        res = [fn(rne)] + [fn(p) for p in draws]
        el = [logit_err(r[0], t) for r in res]
        eg = [grad_err(r[1], t, names) for r in res]
        out[label] = (el, eg)
        ls, gs = sorted(el[1:]), sorted(eg[1:])
        print("%-18s %-9s logits RNE %.4f, stochastic min %.4f median %.4f max %.4f | "
              "gradients RNE %.3f, stochastic min %.3f median %.3f max %.3f" %
              (stem, label, el[0], ls[0], ls[len(ls) // 2], ls[-1], eg[0], gs[0], gs[len(gs) // 2], gs[-1]), flush=True)
    # what test_bf16_model.c holds gemtrain to: the larger of twice PyTorch's
    # error at round-to-nearest weights and the largest error the two
    # independent computations (exact arithmetic, PyTorch bf16) show over
    # every rounding of the weights tried
    sl = max(max(out[k][0]) for k in ("exact", "torch"))
    sg = max(max(out[k][1]) for k in ("exact", "torch"))
    tl, tg = out["torch"][0][0], out["torch"][1][0]
    print("%-18s bound     logits max(2 x %.3g, %.3g) = %.3g | gradients max(2 x %.3g, %.3g) = %.3g"
          % (stem, tl, sl, max(2 * tl, sl), tg, sg, max(2 * tg, sg)), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("fixtures", nargs="*", default=FIXTURES)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for stem in args.fixtures:
        run_fixture(stem, args.samples, args.seed)


if __name__ == "__main__":
    main()
