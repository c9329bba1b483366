#!/usr/bin/python3
"""Independent PyTorch reference of the Gemma 4 text decoder (dense, small and
mixture-of-experts models), written from the Gemma spec (kept outside the repository),
section 3 (3.2 layer math, 3.4 per-layer embeddings, 3.5 KV sharing, 3.6 MoE; the routed
block is tools/ref_moe.py's) on top of the Gemma 3
reference's helpers (tools/ref_gemma3.py: safetensors I/O, GELU, masks, loss,
batches). Used to make test fixtures for gemtrain.

  /usr/bin/python3 tools/ref_gemma4.py make-fixture --config cfg.json \\
      --batch B --seq T --seed S [--segments] [--mask-some-targets] \\
      [--qk-norm-scale 0.5 --matrix-scale 0.5] [--min-topk-gap G] --out f.safetensors
  /usr/bin/python3 tools/ref_gemma4.py check-fixture f.safetensors
  /usr/bin/python3 tools/ref_gemma4.py selftest

Math (names are Hugging Face's without "model."; Linear weights [out, in]):
  RMSNorm(x; w) = x * rsqrt(mean(x^2) + eps) * w      (stored scale: no +1)
  x0    = E[tok] * sqrt(d)
  PLE (hidden_size_per_layer_input = P > 0):
    ident = Eple[tok] * sqrt(P)                         -> [B,T,L,P]
    ctx   = RMSNorm_P((x0 Wproj^T) * d^-0.5; per_layer_projection_norm)
    ple   = (ident + ctx) * 2^-0.5
  layer l (global iff layer_pattern[l % len] == 'G'; globals use
  global_head_dim and global_num_kv_heads when set):
    a     = RMSNorm(x; input_layernorm)
    q     = RoPE(RMSNorm_hd(a Wq^T; q_norm))
    own K/V (l < L - num_kv_shared_layers):
      kraw = a Wk^T;  k = RoPE(RMSNorm_hd(kraw; k_norm))
      v    = RMSNorm_hd(kraw if K=V (share_kv_projections, globals) else a Wv^T;
                        v_norm weight if v_norm_with_scale else no scale)
    shared: k, v = those of the last own-K/V layer of the same kind
    scores = q.k * query_pre_attn_scalar^-0.5 (1 on Gemma 4), causal,
             window on local layers, same segment
    x     = x + RMSNorm(softmax(scores) v Wo^T; post_attention_layernorm)
    m     = RMSNorm(x; pre_feedforward_layernorm)
    x     = x + RMSNorm(down(gelu_tanh(gate m) * up m); post_feedforward_layernorm)
            (F doubled on shared layers with use_double_wide_mlp)
    MoE (num_experts > 1): with h = x after the attention add,
      shared = RMSNorm(down(gelu_tanh(gate m) * up m); post_feedforward_layernorm_1)
      routed, lb_l = ref_moe.forward(h) (router, top-k, experts, post_feedforward_layernorm_2)
      x = h + RMSNorm(shared + routed; post_feedforward_layernorm)
    loss = LM loss + mean over MoE layers of lb_l
    PLE:  x = x + RMSNorm((gelu_tanh(x Wg^T) * ple[:,:,l]) Wp^T; post_per_layer_input_norm)
    x     = x * layer_scalar     (a parameter when layer_scalar_trainable, else 1)
  logits = RMSNorm(x; norm) E^T, then cap * tanh(logits / cap)
RoPE (rotate-half over the whole head): inv_freq_i = base^(-2i/hd) / scale for
i < int(proportion * hd / 2), 0 (identity) for the rest; local layers use
local_rope_max_timescale and local_rope_proportion with scale 1, globals
rope_max_timescale, rope_linear_scaling_factor and global_rope_proportion.
Angles in float32, as Hugging Face computes them.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gemma3 as g3  # noqa: E402  (the shared helpers)
import ref_moe as rm  # noqa: E402  (the routed block)

CONFIG_KEYS = g3.CONFIG_KEYS + [
    "decoder_block", "global_head_dim", "global_num_kv_heads", "share_kv_projections",
    "global_rope_proportion", "local_rope_proportion", "v_norm_with_scale",
    "layer_scalar_trainable", "hidden_size_per_layer_input", "vocab_size_per_layer_input",
    "num_kv_shared_layers", "use_double_wide_mlp", "num_experts", "num_experts_per_tok", "base_moe_mlp_dim",
    "load_balance_loss_weight",
]

DEFAULTS = dict(g3.DEFAULTS, decoder_block="gemma4", global_head_dim=0, global_num_kv_heads=0,
                share_kv_projections=False, global_rope_proportion=1.0, local_rope_proportion=1.0,
                v_norm_with_scale=False, layer_scalar_trainable=True, hidden_size_per_layer_input=0,
                vocab_size_per_layer_input=0, num_kv_shared_layers=0, use_double_wide_mlp=False,
                query_pre_attn_scalar=1.0, num_experts=0, num_experts_per_tok=1, base_moe_mlp_dim=0,
                load_balance_loss_weight=0.0)

INTS = ["global_head_dim", "global_num_kv_heads", "hidden_size_per_layer_input",
        "vocab_size_per_layer_input", "num_kv_shared_layers", "num_experts", "num_experts_per_tok",
        "base_moe_mlp_dim"]
FLOATS = ["global_rope_proportion", "local_rope_proportion", "load_balance_loss_weight"]
BOOLS = ["share_kv_projections", "v_norm_with_scale", "layer_scalar_trainable", "use_double_wide_mlp"]


def load_config(path_or_dict):
    raw = dict(path_or_dict) if isinstance(path_or_dict, dict) else json.load(open(path_or_dict))
    merged = dict(DEFAULTS)
    merged.update(raw)
    cfg = g3.load_config({k: merged[k] for k in g3.CONFIG_KEYS if k in merged})
    for k in INTS:
        cfg[k] = int(merged[k])
    for k in FLOATS:
        cfg[k] = float(merged[k])
    for k in BOOLS:
        cfg[k] = bool(merged[k])
    cfg["decoder_block"] = str(merged["decoder_block"])
    assert cfg["decoder_block"] in ("gemma4", "gemma4_small")
    return cfg


# ----------------------------------------------------------------------------
# the layer graph (spec 3.1, 3.2.5, 3.5)

def layer_info(cfg, i):
    """Per-layer shapes and sharing: dict(glob, hd, K, F, donor, k_eq_v)."""
    glob = g3.is_global(cfg, i)
    L = cfg["base_num_decoder_layers"]
    first_shared = L - cfg["num_kv_shared_layers"]
    hd = cfg["global_head_dim"] if glob and cfg["global_head_dim"] else cfg["head_dim"]
    K = cfg["global_num_kv_heads"] if glob and cfg["global_num_kv_heads"] else cfg["base_num_kv_heads"]
    donor = -1
    if i >= first_shared:
        # the last non-shared layer of the same attention kind
        donor = max(j for j in range(first_shared) if g3.is_global(cfg, j) == glob)
    F = cfg["base_mlp_dim"] * (2 if cfg["use_double_wide_mlp"] and i >= first_shared else 1)
    return dict(glob=glob, hd=hd, K=K, F=F, donor=donor, k_eq_v=cfg["share_kv_projections"] and glob)


def param_shapes(cfg):
    V, d, H = cfg["vocab_size"], cfg["base_emb_dim"], cfg["base_num_query_heads"]
    L, P = cfg["base_num_decoder_layers"], cfg["hidden_size_per_layer_input"]
    out = [("embed_tokens.weight", (V, d)), ("norm.weight", (d,))]
    if P:
        Vp = cfg["vocab_size_per_layer_input"] or V
        out += [("embed_tokens_per_layer.weight", (Vp, L * P)),
                ("per_layer_model_projection.weight", (L * P, d)),
                ("per_layer_projection_norm.weight", (P,))]
    for i in range(L):
        li = layer_info(cfg, i)
        hd, K, F = li["hd"], li["K"], li["F"]
        p = "layers.%d." % i
        out += [(p + "input_layernorm.weight", (d,)), (p + "self_attn.q_proj.weight", (H * hd, d)),
                (p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.o_proj.weight", (d, H * hd))]
        if li["donor"] < 0:
            out += [(p + "self_attn.k_proj.weight", (K * hd, d)), (p + "self_attn.k_norm.weight", (hd,))]
            if not li["k_eq_v"]:
                out.append((p + "self_attn.v_proj.weight", (K * hd, d)))
            if cfg["v_norm_with_scale"]:
                out.append((p + "self_attn.v_norm.weight", (hd,)))
        out += [(p + "post_attention_layernorm.weight", (d,)), (p + "pre_feedforward_layernorm.weight", (d,)),
                (p + "mlp.gate_proj.weight", (F, d)), (p + "mlp.up_proj.weight", (F, d)),
                (p + "mlp.down_proj.weight", (d, F)), (p + "post_feedforward_layernorm.weight", (d,))]
        if P:
            out += [(p + "per_layer_input_gate.weight", (P, d)), (p + "per_layer_projection.weight", (d, P)),
                    (p + "post_per_layer_input_norm.weight", (d,))]
        if cfg["layer_scalar_trainable"]:
            out.append((p + "layer_scalar", (1,)))
        E, FE = cfg["num_experts"], cfg["base_moe_mlp_dim"]
        if E > 1:
            out += [(p + "router.proj.weight", (E, d)), (p + "router.scale", (d,)),
                    (p + "router.per_expert_scale", (E,)), (p + "pre_feedforward_layernorm_2.weight", (d,)),
                    (p + "post_feedforward_layernorm_1.weight", (d,)),
                    (p + "post_feedforward_layernorm_2.weight", (d,)),
                    (p + "experts.gate_up_proj", (E, 2 * FE, d)), (p + "experts.down_proj", (E, d, FE))]
    return out


def init_params(cfg, gen):
    """float32; scales stored (so around 1), matrices std 0.05..0.1, embedding 0.2."""
    params = {}
    for name, shape in param_shapes(cfg):
        if len(shape) == 1:
            params[name] = 1.0 + torch.randn(shape, generator=gen, dtype=torch.float32) * 0.1
            continue
        # a wide router keeps the top-k gaps far above float32 rounding
        std = 0.2 if name.startswith("embed_tokens") else 0.1 if "self_attn" in name else \
            1.5 if "router.proj" in name else 0.05 if "down_proj" in name else 0.08
        params[name] = torch.randn(shape, generator=gen, dtype=torch.float32) * std
    return params


# ----------------------------------------------------------------------------
# the model (functional)

def rms(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.to(y.dtype)


def rope_cos_sin(positions, hd, base, scale, proportion, dtype):
    """cos, sin [B,T,hd]: pairs (i, i + hd/2) rotate for i < int(proportion*hd/2);
    the others get an infinite timescale (inv_freq 0), i.e. the identity."""
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)) / scale
    inv_freq[int(proportion * hd / 2):] = 0.0
    ang = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def forward(params, cfg, inputs, positions, segments=None, dtype=torch.float64):
    """The logits; with MoE layers also their mean load-balance loss (as forward_moe)."""
    return forward_moe(params, cfg, inputs, positions, segments, dtype)[0]


def forward_moe(params, cfg, inputs, positions, segments=None, dtype=torch.float64, gaps=None):
    """(logits, mean lb over MoE layers or 0); gaps, a list, gets each MoE
    layer's smallest k-th/(k+1)-th router logit gap."""
    d, H, L = cfg["base_emb_dim"], cfg["base_num_query_heads"], cfg["base_num_decoder_layers"]
    P, eps = cfg["hidden_size_per_layer_input"], cfg["normalization_layer_epsilon"]
    B, T = inputs.shape
    if segments is None:
        segments = torch.ones(B, T, dtype=torch.int32)
    W = {k: v.to(dtype) for k, v in params.items()}
    x = W["embed_tokens.weight"][inputs.long()] * torch.tensor(d ** 0.5, dtype=dtype)
    ple = None
    if P:
        ident = (W["embed_tokens_per_layer.weight"][inputs.long()] * torch.tensor(P ** 0.5, dtype=dtype)).view(B, T, L, P)
        ctx = ((x @ W["per_layer_model_projection.weight"].t()) * d ** -0.5).view(B, T, L, P)
        ctx = rms(ctx, W["per_layer_projection_norm.weight"], eps)
        ple = (ident + ctx) * 2.0 ** -0.5
    scaling = cfg["query_pre_attn_scalar"] ** -0.5
    kv = {}
    lbs = []
    for i in range(L):
        li = layer_info(cfg, i)
        hd, K, glob = li["hd"], li["K"], li["glob"]
        p = "layers.%d." % i
        if glob:
            cos, sin = rope_cos_sin(positions, hd, cfg["rope_max_timescale"], cfg["rope_linear_scaling_factor"],
                                    cfg["global_rope_proportion"], dtype)
        else:
            cos, sin = rope_cos_sin(positions, hd, cfg["local_rope_max_timescale"], 1.0,
                                    cfg["local_rope_proportion"], dtype)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        a = rms(x, W[p + "input_layernorm.weight"], eps)
        q = rms((a @ W[p + "self_attn.q_proj.weight"].t()).view(B, T, H, hd), W[p + "self_attn.q_norm.weight"], eps)
        q = q * cos + g3.rotate_half(q) * sin
        if li["donor"] < 0:
            kraw = (a @ W[p + "self_attn.k_proj.weight"].t()).view(B, T, K, hd)
            k = rms(kraw, W[p + "self_attn.k_norm.weight"], eps)
            k = k * cos + g3.rotate_half(k) * sin
            vraw = kraw if li["k_eq_v"] else (a @ W[p + "self_attn.v_proj.weight"].t()).view(B, T, K, hd)
            v = rms(vraw, W.get(p + "self_attn.v_norm.weight"), eps)
            kv[i] = (k, v)
        else:
            k, v = kv[li["donor"]]
        G = H // K
        qh = q.transpose(1, 2)
        kh = k.transpose(1, 2).repeat_interleave(G, dim=1)
        vh = v.transpose(1, 2).repeat_interleave(G, dim=1)
        s = (qh @ kh.transpose(-1, -2)) * scaling
        mask = g3.attention_mask(segments, T, cfg["sliding_window_size"], local=not glob)
        s = s.masked_fill(~mask[:, None], float("-inf"))
        o = (torch.softmax(s, dim=-1) @ vh).transpose(1, 2).reshape(B, T, H * hd)
        x = x + rms(o @ W[p + "self_attn.o_proj.weight"].t(), W[p + "post_attention_layernorm.weight"], eps)
        m = rms(x, W[p + "pre_feedforward_layernorm.weight"], eps)
        f = g3.gelu_tanh(m @ W[p + "mlp.gate_proj.weight"].t()) * (m @ W[p + "mlp.up_proj.weight"].t())
        if cfg["num_experts"] > 1:
            shared = rms(f @ W[p + "mlp.down_proj.weight"].t(), W[p + "post_feedforward_layernorm_1.weight"], eps)
            pm = {n: W[p + n] for n in rm.PARAMS}
            h = x.reshape(B * T, d)
            routed, lb, _ = rm.forward(pm, h, B, T, cfg["num_experts_per_tok"], eps, cfg["load_balance_loss_weight"])
            if gaps is not None:
                gaps.append(rm.min_gap(pm, h.detach(), cfg["num_experts_per_tok"], eps))
            lbs.append(lb)
            x = x + rms(shared + routed.view(B, T, d), W[p + "post_feedforward_layernorm.weight"], eps)
        else:
            x = x + rms(f @ W[p + "mlp.down_proj.weight"].t(), W[p + "post_feedforward_layernorm.weight"], eps)
        if P:
            g = g3.gelu_tanh(x @ W[p + "per_layer_input_gate.weight"].t()) * ple[:, :, i, :]
            x = x + rms(g @ W[p + "per_layer_projection.weight"].t(), W[p + "post_per_layer_input_norm.weight"], eps)
        if cfg["layer_scalar_trainable"]:
            x = x * W[p + "layer_scalar"]
    logits = rms(x, W["norm.weight"], eps) @ W["embed_tokens.weight"].t()
    cap = cfg["final_logits_soft_cap"]
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    lb = torch.stack(lbs).mean() if lbs else torch.zeros((), dtype=dtype)
    return logits, lb


def forward_backward(params32, cfg, inputs, targets, positions, segments, dtype, gaps=None):
    """logits, LM loss, token count, gradients of LM loss + lb (forward_backward_lb also returns lb)."""
    return forward_backward_lb(params32, cfg, inputs, targets, positions, segments, dtype, gaps)[:4]


def forward_backward_lb(params32, cfg, inputs, targets, positions, segments, dtype, gaps=None):
    leaves = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params32.items()}
    logits, lb = forward_moe(leaves, cfg, inputs, positions, segments, dtype, gaps)
    loss, count = g3.loss_fn(logits, targets)
    (loss + lb).backward()
    return (logits.detach(), loss.detach(), count, {k: v.grad.detach() for k, v in leaves.items()},
            float(lb.detach()))


# ----------------------------------------------------------------------------
# fixtures

def calm_params(params, qk_norm_scale, matrix_scale):
    """--qk-norm-scale / --matrix-scale: multiply the drawn q_norm and k_norm
    scales by qk_norm_scale, and every matrix but the embeddings and the
    router by matrix_scale (after drawing, so the random stream is the same).
    With attention scale 1 (query_pre_attn_scalar 1) and q, k RMS-normalised
    to about 1 per element, a score q.k is a sum of hd terms of size ~1: the
    softmax is nearly one-hot and the gradients move chaotically with the
    weights' last bits. Scales of 0.5 give scores ~ 0.25 sqrt(hd) = O(1), as
    in trained models, for the bf16 fixtures (tests/data/README.md)."""
    for name in params:
        if name.endswith("self_attn.q_norm.weight") or name.endswith("self_attn.k_norm.weight"):
            params[name] = params[name] * qk_norm_scale
        elif params[name].dim() > 1 and not name.startswith("embed_tokens") and "router" not in name:
            params[name] = params[name] * matrix_scale
    return params


def cmd_make_fixture(args):
    cfg = load_config(args.config)
    gen = torch.Generator().manual_seed(args.seed)
    params = init_params(cfg, gen)
    if args.qk_norm_scale is not None or args.matrix_scale is not None:
        params = calm_params(params, 1.0 if args.qk_norm_scale is None else args.qk_norm_scale,
                             1.0 if args.matrix_scale is None else args.matrix_scale)
    inputs, targets, pos, seg = g3.make_batch(cfg, args.batch, args.seq, gen, args.segments, args.mask_some_targets)
    gaps = []
    logits, loss, count, grads, lb = forward_backward_lb(params, cfg, inputs, targets, pos, seg, torch.float64, gaps)
    if gaps:
        # gemtrain routes in float32: the chosen experts must not depend on
        # rounding (--min-topk-gap: a bf16 fixture needs a wider gap, as
        # rounding the weights and activations to bf16 moves router logits)
        assert min(gaps) > args.min_topk_gap, "a top-k gap of %.3g: pick another seed" % min(gaps)
    t = {}
    for name, _ in param_shapes(cfg):
        t[name] = params[name].numpy().astype(np.float32)
        t["grad." + name] = grads[name].to(torch.float32).numpy()
    t["inputs"], t["targets"] = inputs.numpy().astype(np.int32), targets.numpy().astype(np.int32)
    t["positions"], t["segments"] = pos.numpy().astype(np.int32), seg.numpy().astype(np.int32)
    t["expected.logits"] = logits.to(torch.float32).numpy()
    t["expected.loss"] = np.array([float(loss)], dtype=np.float32)
    t["expected.total_weights"] = np.array([count], dtype=np.int32)
    if cfg["num_experts"] > 1:
        t["expected.moe_lb_loss"] = np.array([lb], dtype=np.float32)
    meta = {"config": json.dumps({k: cfg[k] for k in CONFIG_KEYS}),
            "made_by": "/usr/bin/python3 tools/ref_gemma4.py " + " ".join(sys.argv[1:]),
            "compute_dtype": "float64", "loss_f64": repr(float(loss)), "format": "gemtrain reference fixture v1"}
    if gaps:
        meta["moe_lb_loss_f64"] = repr(lb)
        meta["min_topk_gap"] = repr(min(gaps))
    g3.save_safetensors(args.out, t, meta)
    print("wrote %s (%d tensors); loss = %.9f over %d tokens (ln V = %.6f)"
          % (args.out, len(t), float(loss), count, math.log(cfg["vocab_size"])))


def cmd_check_fixture(args):
    t, meta = g3.load_safetensors(args.file)
    cfg = load_config(json.loads(meta["config"]))
    params = {n: torch.from_numpy(t[n].copy()) for n, _ in param_shapes(cfg)}
    inputs, targets, pos, seg = (torch.from_numpy(t[k].copy()) for k in ("inputs", "targets", "positions", "segments"))
    ok = True
    for dtype, tol in ((torch.float64, 1e-6), (torch.float32, 2e-3)):
        logits, loss, count, grads, lb = forward_backward_lb(params, cfg, inputs, targets, pos, seg, dtype)
        if "expected.moe_lb_loss" in t:
            ok &= abs(lb - float(t["expected.moe_lb_loss"][0])) <= tol * abs(lb)
        el = g3._maxrel(logits.numpy(), t["expected.logits"])
        # each tensor to its largest element; a layer_scalar (one number whose
        # gradient nearly cancels) to the largest of the layer_scalars
        smax = max([abs(float(t["grad." + n][0])) for n, _ in param_shapes(cfg) if "layer_scalar" in n] + [1e-30])
        eg = max(float(np.abs(grads[n].numpy() - t["grad." + n]).max()) / smax if "layer_scalar" in n
                 else g3._maxrel(grads[n].numpy(), t["grad." + n]) for n, _ in param_shapes(cfg))
        good = el < tol and eg < tol and count == int(t["expected.total_weights"][0])
        ok &= good
        print("%-8s loss %.9f | max rel err: logits %.2e grads %.2e -> %s"
              % (str(dtype).split(".")[1], float(loss), el, eg, "OK" if good else "FAIL"))
    print("check-fixture:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


# ----------------------------------------------------------------------------
# self-test

TINY = {
    "vocab_size": 11, "base_emb_dim": 8, "base_num_query_heads": 4, "base_num_kv_heads": 2, "head_dim": 4,
    "base_mlp_dim": 6, "base_num_decoder_layers": 6, "sliding_window_size": 3, "layer_pattern": "LLG",
    "rope_max_timescale": 1000000.0, "local_rope_max_timescale": 10000.0, "final_logits_soft_cap": 3.0,
    "global_head_dim": 8, "global_num_kv_heads": 1, "share_kv_projections": True,
    "global_rope_proportion": 0.25, "hidden_size_per_layer_input": 3, "num_kv_shared_layers": 2,
    "use_double_wide_mlp": True, "v_norm_with_scale": True, "decoder_block": "gemma4_small",
}


def cmd_selftest(args):
    ok = True

    def report(name, err, tol):
        nonlocal ok
        ok &= err <= tol
        print("  %-64s %.3e (tol %.0e) %s" % (name, err, tol, "ok" if err <= tol else "FAIL"))

    cfg = load_config(TINY)
    print("tiny: V=11 d=8 H=4 K=2/1 hd=4/8 L=6 'LLG', K=V globals, PLE 3, layers 4-5 KV-shared, double-wide, cap 3")
    print("  (layer, donor, F):", [(i, layer_info(cfg, i)["donor"], layer_info(cfg, i)["F"]) for i in range(6)])
    gen = torch.Generator().manual_seed(3)
    params = init_params(cfg, gen)
    inputs, targets, pos, seg = g3.make_batch(cfg, 2, 7, gen, segments=True, mask_some=True)

    # 1. autograd against central differences, every parameter element, float64
    logits, loss, count, grads = forward_backward(params, cfg, inputs, targets, pos, seg, torch.float64)
    P64 = {k: v.double() for k, v in params.items()}

    def f(pp):
        with torch.no_grad():
            return float(g3.loss_fn(forward(pp, cfg, inputs, pos, seg), targets)[0])

    h, max_rel, n = 1e-6, 0.0, 0
    for name, _ in param_shapes(cfg):
        flat, g = P64[name].view(-1), grads[name].view(-1)
        gmax = float(g.abs().max()) + 1e-12
        for e in range(flat.numel()):
            old = float(flat[e])
            flat[e] = old + h
            fp = f(P64)
            flat[e] = old - h
            fm = f(P64)
            flat[e] = old
            fd = (fp - fm) / (2 * h)
            # the floor: the last layer's layer_scalar has a gradient of ~1e-7
            # (the final norm undoes a scale but for eps), below FD's noise
            max_rel = max(max_rel, abs(fd - float(g[e])) / max(abs(fd), 1e-3 * gmax, 1e-5))
            n += 1
    print("  loss %.9f over %d tokens; %d parameter elements checked" % (float(loss), count, n))
    report("grad vs finite differences (max rel err)", max_rel, 1e-4)

    # 2. proportional RoPE: with proportion 0.25 of hd 8, only pairs (0,4) rotate
    cos, sin = rope_cos_sin(torch.arange(6)[None], 8, 1e6, 1.0, 0.25, torch.float64)
    moving = [i for i in range(8) if float((cos[0, :, i] - 1).abs().max()) > 0 or float(sin[0, :, i].abs().max()) > 0]
    report("dims RoPE moves other than {0, 4}", float(moving != [0, 4]), 0)

    # 3. KV sharing: shared layers own no K/V parameters, take the right
    #    donors, and send gradient back into the donor's projections
    names = [n for n, _ in param_shapes(cfg)]
    report("shared layers without k_proj/k_norm/v_proj",
           float(any(("layers.4." in n or "layers.5." in n) and ("k_proj" in n or "k_norm" in n or "v_proj" in n)
                     for n in names)), 0)
    report("donors: layer 4 (L) -> 3, layer 5 (G) -> 2",
           float((layer_info(cfg, 4)["donor"], layer_info(cfg, 5)["donor"]) != (3, 2)), 0)
    # the donor's K/V reach the loss through their readers too: the same
    # weights without sharing give the donor's k_proj another gradient
    cfg_ns = load_config(dict(TINY, num_kv_shared_layers=0))
    p_ns = init_params(cfg_ns, torch.Generator().manual_seed(3))
    for name in params:
        p_ns[name] = params[name]
    _, _, _, g_ns = forward_backward(p_ns, cfg_ns, inputs, targets, pos, seg, torch.float64)
    report("readers change the donor's k_proj gradient (1 if not)",
           float(torch.equal(g_ns["layers.3.self_attn.k_proj.weight"], grads["layers.3.self_attn.k_proj.weight"])), 0)

    # 4. K = V: the global layer's value is the normalised raw key: giving the
    #    same model an explicit v_proj equal to k_proj gives the same logits
    cfg2 = load_config(dict(TINY, share_kv_projections=False))
    p2 = dict(params)
    p2["layers.2.self_attn.v_proj.weight"] = params["layers.2.self_attn.k_proj.weight"].clone()
    a = forward(params, cfg, inputs, pos, seg)
    b = forward(p2, cfg2, inputs, pos, seg)
    report("K=V vs explicit v_proj = k_proj (max abs logits diff)", float((a - b).abs().max()), 1e-12)

    # 5. RoPE still makes attention relative: shift all positions
    a = forward(params, cfg, inputs, pos, None)
    b = forward(params, cfg, inputs, pos + 5, None)
    report("logits change when all positions shift by 5 (max abs)", float((a - b).abs().max()), 1e-5)

    print("selftest:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-fixture")
    mk.add_argument("--config", required=True)
    mk.add_argument("--batch", type=int, required=True)
    mk.add_argument("--seq", type=int, required=True)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--segments", action="store_true")
    mk.add_argument("--mask-some-targets", action="store_true")
    mk.add_argument("--out", required=True)
    mk.add_argument("--qk-norm-scale", type=float, default=None,
                    help="multiply the drawn q_norm/k_norm scales by this (default: as drawn)")
    mk.add_argument("--matrix-scale", type=float, default=None,
                    help="multiply every drawn matrix but the embeddings and router by this (default: as drawn)")
    mk.add_argument("--min-topk-gap", type=float, default=1e-3,
                    help="MoE: refuse a seed whose smallest top-k router logit gap is not above this")
    ck = sub.add_parser("check-fixture")
    ck.add_argument("file")
    sub.add_parser("selftest")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "1")))
    return {"make-fixture": cmd_make_fixture, "check-fixture": cmd_check_fixture, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main() or 0)
