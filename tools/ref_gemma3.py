#!/usr/bin/python3
"""Independent PyTorch reference of the Gemma 3 text decoder, written from
the Gemma spec (kept outside the repository), section 1 (math) and 4.6 (loss), used to make test
fixtures for gemtrain.

Run with Debian's python (torch 1.13 + numpy, nothing else needed):

  /usr/bin/python3 tools/ref_gemma3.py make-fixture --config cfg.json \
      --batch B --seq T --seed S [--segments] [--mask-some-targets] \
      [--dtype float64|float32] --out file.safetensors
  /usr/bin/python3 tools/ref_gemma3.py check-fixture file.safetensors
  /usr/bin/python3 tools/ref_gemma3.py selftest

Math (per spec; names are Hugging Face's without the "model." prefix, Linear
weights stored [out, in]):
  x0      = E[tok] * sqrt(d)              (sqrt(d) rounded to the compute dtype)
  per layer i (global iff layer_pattern[i % len] == 'G'):
    a     = RMSNorm_input(x)              RMSNorm(x) = x*rsqrt(mean(x^2)+eps)*(1+w)
    q,k,v = a Wq^T, a Wk^T, a Wv^T        (no bias); q/k heads RMSNorm'd over hd
    q,k   = RoPE rotate-half after the norm; local: base local_rope_max_timescale,
            scale 1; global: base rope_max_timescale, scale rope_linear_scaling_factor
            inv_freq = 1/(base**(arange(0,hd,2).float()/hd)) / scale, angles in fp32
    s     = (q.k) * query_pre_attn_scalar**-0.5; q head h uses kv head h // (H/K)
    mask  : j <= i, same segment, and on local layers i - W < j
    o     = softmax(s) v, then o_proj
    x     = x + RMSNorm_post_attn(o)
    m     = RMSNorm_pre_ffw(x); f = down(gelu_tanh(gate(m)) * up(m))
    x     = x + RMSNorm_post_ffw(f)
  h       = RMSNorm_final(x); logits = h E^T (tied); cap*tanh(logits/cap) if cap > 0
  loss    = sum_{t: target_t >= 0} (logsumexp_t - logit_t[target_t]) / count

The model functions take a `dtype` (float32 by default).  Fixtures are computed
in float64 from float32 parameter values for a precise reference.  RoPE angles
(and their cos/sin) are always computed in float32, as Hugging Face does, then
cast to the compute dtype.

The safetensors format is written and read by hand (spec section 8).
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

CONFIG_KEYS = [
    "vocab_size", "base_emb_dim", "base_num_query_heads", "base_num_kv_heads",
    "head_dim", "base_mlp_dim", "base_num_decoder_layers", "sliding_window_size",
    "layer_pattern", "query_pre_attn_scalar", "rope_max_timescale",
    "local_rope_max_timescale", "rope_linear_scaling_factor",
    "normalization_layer_epsilon", "final_logits_soft_cap",
]

DEFAULTS = {
    "layer_pattern": "LLLLLG",
    "rope_max_timescale": 1000000.0,
    "local_rope_max_timescale": 10000.0,
    "rope_linear_scaling_factor": 1.0,
    "normalization_layer_epsilon": 1e-6,
    "final_logits_soft_cap": 0.0,
}


# ----------------------------------------------------------------------------
# config

def load_config(path_or_dict):
    if isinstance(path_or_dict, dict):
        raw = dict(path_or_dict)
    else:
        with open(path_or_dict) as f:
            raw = json.load(f)
    cfg = dict(DEFAULTS)
    cfg.update({k: raw[k] for k in CONFIG_KEYS if k in raw})
    if "query_pre_attn_scalar" not in cfg:
        cfg["query_pre_attn_scalar"] = cfg["head_dim"]
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    if missing:
        raise SystemExit("config is missing keys: %s" % ", ".join(missing))
    for k in ("vocab_size", "base_emb_dim", "base_num_query_heads",
              "base_num_kv_heads", "head_dim", "base_mlp_dim",
              "base_num_decoder_layers", "sliding_window_size"):
        cfg[k] = int(cfg[k])
    for k in ("query_pre_attn_scalar", "rope_max_timescale",
              "local_rope_max_timescale", "rope_linear_scaling_factor",
              "normalization_layer_epsilon", "final_logits_soft_cap"):
        cfg[k] = float(cfg[k])
    cfg["layer_pattern"] = str(cfg["layer_pattern"])
    assert cfg["base_num_query_heads"] % cfg["base_num_kv_heads"] == 0
    assert cfg["head_dim"] % 2 == 0
    assert set(cfg["layer_pattern"]) <= {"L", "G"} and cfg["layer_pattern"]
    return cfg


def is_global(cfg, i):
    p = cfg["layer_pattern"]
    return p[i % len(p)] == "G"


# ----------------------------------------------------------------------------
# parameters

def param_shapes(cfg):
    """Ordered list of (name, shape) in Hugging Face naming without 'model.'."""
    V, d = cfg["vocab_size"], cfg["base_emb_dim"]
    H, K, hd = cfg["base_num_query_heads"], cfg["base_num_kv_heads"], cfg["head_dim"]
    F = cfg["base_mlp_dim"]
    out = [("embed_tokens.weight", (V, d))]
    for i in range(cfg["base_num_decoder_layers"]):
        p = "layers.%d." % i
        out += [
            (p + "input_layernorm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (H * hd, d)),
            (p + "self_attn.k_proj.weight", (K * hd, d)),
            (p + "self_attn.v_proj.weight", (K * hd, d)),
            (p + "self_attn.o_proj.weight", (d, H * hd)),
            (p + "self_attn.q_norm.weight", (hd,)),
            (p + "self_attn.k_norm.weight", (hd,)),
            (p + "post_attention_layernorm.weight", (d,)),
            (p + "pre_feedforward_layernorm.weight", (d,)),
            (p + "mlp.gate_proj.weight", (F, d)),
            (p + "mlp.up_proj.weight", (F, d)),
            (p + "mlp.down_proj.weight", (d, F)),
            (p + "post_feedforward_layernorm.weight", (d,)),
        ]
    out.append(("norm.weight", (d,)))
    return out


def init_params(cfg, gen):
    """Random float32 parameters: matrices normal with std in 0.02..0.1 (embedding
    std 0.2 so the tied logits are O(1)), norm weights normal(0, 0.1) so the
    (1 + w) path matters."""
    params = {}
    for name, shape in param_shapes(cfg):
        if name == "embed_tokens.weight":
            std = 0.2
        elif len(shape) == 1:
            std = 0.1
        elif "self_attn" in name:
            std = 0.1
        elif "down_proj" in name:
            std = 0.05
        else:
            std = 0.08
        params[name] = torch.randn(shape, generator=gen, dtype=torch.float32) * std
    return params


# ----------------------------------------------------------------------------
# the model (functional)

def rms_norm(x, w, eps):
    """y = x * rsqrt(mean(x^2) + eps) * (1 + w); normalized in at least fp32."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = y * (1.0 + w.to(y.dtype))
    return y.to(x.dtype)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def rope_cos_sin(positions, hd, base, scale, dtype):
    """positions [B,T] int -> cos, sin [B,T,hd] in dtype (computed in fp32)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    inv_freq = inv_freq / scale
    ang = positions.to(torch.float32)[..., None] * inv_freq  # [B,T,hd/2] fp32
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def attention_mask(segments, T, window, local):
    """bool [B,T,T]: key j visible to query i."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    vis = j <= i
    if local:
        vis = vis & (j > i - window)
    vis = vis[None] & (segments[:, :, None] == segments[:, None, :])
    return vis


def forward(params, cfg, inputs, positions, segments=None, dtype=torch.float32):
    """Returns logits [B,T,V] in dtype. params: name -> tensor (cast to dtype)."""
    V, d = cfg["vocab_size"], cfg["base_emb_dim"]
    H, K, hd = cfg["base_num_query_heads"], cfg["base_num_kv_heads"], cfg["head_dim"]
    eps = cfg["normalization_layer_epsilon"]
    B, T = inputs.shape
    if segments is None:
        segments = torch.ones(B, T, dtype=torch.int32)
    P = {k: v.to(dtype) for k, v in params.items()}
    E = P["embed_tokens.weight"]
    x = E[inputs.long()] * torch.tensor(d ** 0.5, dtype=dtype)

    ropes = {
        False: rope_cos_sin(positions, hd, cfg["local_rope_max_timescale"], 1.0, dtype),
        True: rope_cos_sin(positions, hd, cfg["rope_max_timescale"],
                           cfg["rope_linear_scaling_factor"], dtype),
    }
    masks = {g: attention_mask(segments, T, cfg["sliding_window_size"], local=not g)
             for g in (False, True)}
    scaling = cfg["query_pre_attn_scalar"] ** -0.5
    G = H // K

    for li in range(cfg["base_num_decoder_layers"]):
        p = "layers.%d." % li
        glob = is_global(cfg, li)
        a = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (a @ P[p + "self_attn.q_proj.weight"].t()).view(B, T, H, hd)
        k = (a @ P[p + "self_attn.k_proj.weight"].t()).view(B, T, K, hd)
        v = (a @ P[p + "self_attn.v_proj.weight"].t()).view(B, T, K, hd)
        q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
        cos, sin = ropes[glob]
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        q = q.transpose(1, 2)                                   # [B,H,T,hd]
        k = k.transpose(1, 2).repeat_interleave(G, dim=1)       # head h -> kv h//G
        v = v.transpose(1, 2).repeat_interleave(G, dim=1)
        s = (q @ k.transpose(-1, -2)) * scaling                 # [B,H,T,T]
        s = s.masked_fill(~masks[glob][:, None], float("-inf"))
        sf = s.float() if dtype in (torch.float16, torch.bfloat16) else s
        pr = torch.softmax(sf, dim=-1).to(dtype)
        o = (pr @ v).transpose(1, 2).reshape(B, T, H * hd)
        o = o @ P[p + "self_attn.o_proj.weight"].t()
        x = x + rms_norm(o, P[p + "post_attention_layernorm.weight"], eps)
        m = rms_norm(x, P[p + "pre_feedforward_layernorm.weight"], eps)
        f = gelu_tanh(m @ P[p + "mlp.gate_proj.weight"].t()) * (m @ P[p + "mlp.up_proj.weight"].t())
        f = f @ P[p + "mlp.down_proj.weight"].t()
        x = x + rms_norm(f, P[p + "post_feedforward_layernorm.weight"], eps)

    h = rms_norm(x, P["norm.weight"], eps)
    logits = h @ E.t()
    cap = cfg["final_logits_soft_cap"]
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def loss_fn(logits, targets):
    """Masked mean cross-entropy (spec 4.6): tokens with target >= 0 count."""
    valid = targets >= 0
    lf = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    lse = torch.logsumexp(lf, dim=-1)
    picked = lf.gather(-1, targets.clamp(min=0).long()[..., None])[..., 0]
    xent = (lse - picked) * valid.to(lf.dtype)
    count = int(valid.sum())
    loss = xent.sum() / max(count, 1)
    return loss, count


def forward_backward(params32, cfg, inputs, targets, positions, segments, dtype):
    """Cast float32 params to dtype, run forward+backward.
    Returns logits, loss, count, grads (all in dtype)."""
    leaves = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params32.items()}
    logits = forward(leaves, cfg, inputs, positions, segments, dtype)
    loss, count = loss_fn(logits, targets)
    loss.backward()
    grads = {k: v.grad.detach() for k, v in leaves.items()}
    return logits.detach(), loss.detach(), count, grads


# ----------------------------------------------------------------------------
# safetensors (by hand, spec section 8)

_DT = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def _st_dtype(arr):
    for k, v in _DT.items():
        if arr.dtype == np.dtype(v):
            return k
    raise ValueError("unsupported dtype %s" % arr.dtype)


def save_safetensors(path, tensors, metadata=None):
    """tensors: name -> numpy array. Written sorted by name (all 4-byte dtypes)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        dt = _st_dtype(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(8 + len(hjson))) % 8
    hjson += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Returns (tensors: name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    spans = []
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = np.dtype(_DT[info["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(buf[b:e], dtype=dt).reshape(info["shape"])
        out[name] = arr.astype(arr.dtype.newbyteorder("="))
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, "gap/overlap in safetensors data at %d" % b
        pos = e
    assert pos == len(buf), "trailing bytes in safetensors data"
    return out, meta


# ----------------------------------------------------------------------------
# fixtures

def make_batch(cfg, B, T, gen, segments=False, mask_some=False):
    V = cfg["vocab_size"]
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64).to(torch.int32)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64).to(torch.int32)
    seg = torch.ones(B, T, dtype=torch.int32)
    pos = torch.arange(T, dtype=torch.int32)[None].repeat(B, 1)
    if segments:
        for b in range(B):
            # 2..4 segments per row; boundaries at random in [2, T-2]
            nseg = int(torch.randint(2, 5, (1,), generator=gen))
            cuts = sorted(set(int(c) for c in
                              torch.randperm(T - 3, generator=gen)[:nseg - 1] + 2))
            bounds = [0] + cuts + [T]
            for s in range(len(bounds) - 1):
                lo, hi = bounds[s], bounds[s + 1]
                seg[b, lo:hi] = s + 1
                pos[b, lo:hi] = torch.arange(hi - lo, dtype=torch.int32)
    if mask_some:
        drop = torch.rand(B, T, generator=gen) < 0.2
        drop[:, 0] = True          # at least one masked per row
        drop[:, 1] = False         # at least one counted per row
        targets = torch.where(drop, torch.full_like(targets, -1), targets)
    return inputs, targets, pos, seg


def cmd_make_fixture(args):
    cfg = load_config(args.config)
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    params = init_params(cfg, gen)
    inputs, targets, pos, seg = make_batch(cfg, args.batch, args.seq, gen,
                                           args.segments, args.mask_some_targets)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    logits, loss, count, grads = forward_backward(params, cfg, inputs, targets, pos, seg, dtype)
    t = {}
    for name, _ in param_shapes(cfg):
        t[name] = params[name].numpy().astype(np.float32)
        t["grad." + name] = grads[name].to(torch.float32).numpy()
    t["inputs"] = inputs.numpy().astype(np.int32)
    t["targets"] = targets.numpy().astype(np.int32)
    t["positions"] = pos.numpy().astype(np.int32)
    t["segments"] = seg.numpy().astype(np.int32)
    t["expected.logits"] = logits.to(torch.float32).numpy()
    t["expected.loss"] = np.array([float(loss)], dtype=np.float32)
    t["expected.total_weights"] = np.array([count], dtype=np.int32)
    cmd = "/usr/bin/python3 tools/ref_gemma3.py " + " ".join(sys.argv[1:])
    meta = {
        "config": json.dumps({k: cfg[k] for k in CONFIG_KEYS}),
        "made_by": cmd,
        "compute_dtype": args.dtype,
        "loss_f64": repr(float(loss)),
        "format": "gemtrain reference fixture v1",
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_safetensors(args.out, t, meta)
    print("wrote %s (%d tensors, %d bytes)" % (args.out, len(t), os.path.getsize(args.out)))
    print("loss = %.9f over %d tokens (ln V = %.6f)" % (float(loss), count, math.log(cfg["vocab_size"])))


def _fixture_inputs(t):
    return (torch.from_numpy(t["inputs"].copy()), torch.from_numpy(t["targets"].copy()),
            torch.from_numpy(t["positions"].copy()), torch.from_numpy(t["segments"].copy()))


def _maxrel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    scale = max(np.abs(b).max(), 1e-30)
    return float(np.abs(a - b).max() / scale)


def cmd_check_fixture(args):
    t, meta = load_safetensors(args.file)
    cfg = load_config(json.loads(meta["config"]))
    print("fixture:", args.file)
    print("made_by:", meta.get("made_by"))
    for name, shape in param_shapes(cfg):
        assert name in t and tuple(t[name].shape) == tuple(shape), name
        assert tuple(t["grad." + name].shape) == tuple(shape), "grad." + name
    params = {n: torch.from_numpy(t[n].copy()) for n, _ in param_shapes(cfg)}
    inputs, targets, pos, seg = _fixture_inputs(t)
    ok = True
    for dtype, tol in ((torch.float64, 1e-6), (torch.float32, 2e-3)):
        logits, loss, count, grads = forward_backward(params, cfg, inputs, targets, pos, seg, dtype)
        el = _maxrel(logits.numpy(), t["expected.logits"])
        eloss = abs(float(loss) - float(t["expected.loss"][0])) / abs(float(t["expected.loss"][0]))
        eg = max(_maxrel(grads[n].numpy(), t["grad." + n]) for n, _ in param_shapes(cfg))
        worst = max(param_shapes(cfg), key=lambda ns: _maxrel(grads[ns[0]].numpy(), t["grad." + ns[0]]))[0]
        cnt_ok = count == int(t["expected.total_weights"][0])
        good = el < tol and eloss < tol and eg < tol and cnt_ok
        ok &= good
        print("%-8s loss %.9f (stored %.9f) | max rel err: logits %.2e loss %.2e grads %.2e (%s) | count %s -> %s"
              % (str(dtype).split(".")[1], float(loss), float(t["expected.loss"][0]), el, eloss, eg,
                 worst, "ok" if cnt_ok else "MISMATCH", "OK" if good else "FAIL"))
    print("check-fixture:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


# ----------------------------------------------------------------------------
# self-test

def naive_forward_np(params, cfg, inputs, positions, segments):
    """A second, loop-based float64 implementation (numpy), written differently:
    RoPE as explicit pair rotations with float64 angles, attention per
    (b, h, i, j) with the visibility rule spelled out."""
    V, d = cfg["vocab_size"], cfg["base_emb_dim"]
    H, K, hd = cfg["base_num_query_heads"], cfg["base_num_kv_heads"], cfg["head_dim"]
    eps = cfg["normalization_layer_epsilon"]
    W = cfg["sliding_window_size"]
    P = {k: v.numpy().astype(np.float64) for k, v in params.items()}
    B, T = inputs.shape

    def norm(vec, w):
        return vec / math.sqrt(float(np.mean(vec * vec)) + eps) * (1.0 + w)

    def rope(vec, p, base, scale):
        out = vec.copy()
        half = hd // 2
        for i in range(half):
            theta = p / (base ** (2.0 * i / hd) * scale)
            c, s = math.cos(theta), math.sin(theta)
            x1, x2 = vec[i], vec[i + half]
            out[i] = x1 * c - x2 * s
            out[i + half] = x2 * c + x1 * s
        return out

    def gelu(z):
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))

    logits = np.zeros((B, T, V))
    for b in range(B):
        x = np.stack([P["embed_tokens.weight"][int(inputs[b, t])] * math.sqrt(d) for t in range(T)])
        for li in range(cfg["base_num_decoder_layers"]):
            p = "layers.%d." % li
            glob = is_global(cfg, li)
            base = cfg["rope_max_timescale"] if glob else cfg["local_rope_max_timescale"]
            scale = cfg["rope_linear_scaling_factor"] if glob else 1.0
            qs = np.zeros((T, H, hd)); ks = np.zeros((T, K, hd)); vs = np.zeros((T, K, hd))
            for t in range(T):
                a = norm(x[t], P[p + "input_layernorm.weight"])
                qf = P[p + "self_attn.q_proj.weight"] @ a
                kf = P[p + "self_attn.k_proj.weight"] @ a
                vf = P[p + "self_attn.v_proj.weight"] @ a
                for h in range(H):
                    qh = norm(qf[h * hd:(h + 1) * hd], P[p + "self_attn.q_norm.weight"])
                    qs[t, h] = rope(qh, float(positions[b, t]), base, scale)
                for kh in range(K):
                    kk = norm(kf[kh * hd:(kh + 1) * hd], P[p + "self_attn.k_norm.weight"])
                    ks[t, kh] = rope(kk, float(positions[b, t]), base, scale)
                    vs[t, kh] = vf[kh * hd:(kh + 1) * hd]
            newx = x.copy()
            for i in range(T):
                heads = []
                for h in range(H):
                    kvh = h // (H // K)
                    sc, idx = [], []
                    for j in range(T):
                        visible = j <= i and segments[b, i] == segments[b, j]
                        if not glob:
                            visible = visible and (i - W < j)
                        if visible:
                            sc.append(float(qs[i, h] @ ks[j, kvh]) / math.sqrt(cfg["query_pre_attn_scalar"]))
                            idx.append(j)
                    sc = np.array(sc)
                    pr = np.exp(sc - sc.max()); pr /= pr.sum()
                    heads.append(sum(pr[n] * vs[j, kvh] for n, j in enumerate(idx)))
                o = P[p + "self_attn.o_proj.weight"] @ np.concatenate(heads)
                xi = x[i] + norm(o, P[p + "post_attention_layernorm.weight"])
                m = norm(xi, P[p + "pre_feedforward_layernorm.weight"])
                f = P[p + "mlp.down_proj.weight"] @ (gelu(P[p + "mlp.gate_proj.weight"] @ m) *
                                                     (P[p + "mlp.up_proj.weight"] @ m))
                newx[i] = xi + norm(f, P[p + "post_feedforward_layernorm.weight"])
            x = newx
        for t in range(T):
            hfin = norm(x[t], P["norm.weight"])
            lg = P["embed_tokens.weight"] @ hfin
            cap = cfg["final_logits_soft_cap"]
            if cap > 0:
                lg = cap * np.tanh(lg / cap)
            logits[b, t] = lg
    return logits


TINY = {
    "vocab_size": 11, "base_emb_dim": 8, "base_num_query_heads": 4, "base_num_kv_heads": 2,
    "head_dim": 4, "base_mlp_dim": 6, "base_num_decoder_layers": 3, "sliding_window_size": 3,
    "layer_pattern": "LLG", "query_pre_attn_scalar": 3.0, "rope_max_timescale": 1000000.0,
    "local_rope_max_timescale": 10000.0, "rope_linear_scaling_factor": 8.0,
    "normalization_layer_epsilon": 1e-6, "final_logits_soft_cap": 0.0,
}


def cmd_selftest(args):
    ok = True

    def report(name, err, tol):
        nonlocal ok
        good = err <= tol
        ok &= good
        print("  %-58s %.3e (tol %.0e) %s" % (name, err, tol, "ok" if good else "FAIL"))

    torch.manual_seed(0)
    x = torch.randn(1000, dtype=torch.float64) * 3
    print("activation")
    report("gelu_tanh vs torch gelu(approximate='tanh')",
           float((gelu_tanh(x) - torch.nn.functional.gelu(x, approximate="tanh")).abs().max()), 1e-12)

    for softcap in (0.0, 5.0):
        cfg = load_config(dict(TINY, final_logits_soft_cap=softcap))
        gen = torch.Generator().manual_seed(1234)
        params = init_params(cfg, gen)
        # bigger weights than the fixture init so every nonlinearity is exercised
        params = {k: v * 3.0 for k, v in params.items()}
        inputs, targets, pos, seg = make_batch(cfg, 2, 9, gen, segments=True, mask_some=True)
        print("tiny config (softcap %g): V=11 d=8 H=4 K=2 hd=4 F=6 L=3 'LLG' W=3 T=9 B=2, segments + masked targets"
              % softcap)
        print("  segments:", seg.tolist(), "positions:", pos.tolist())

        # 1. naive loop implementation
        lg64 = forward(params, cfg, inputs, pos, seg, torch.float64)
        naive = naive_forward_np(params, cfg, inputs.numpy(), pos.numpy(), seg.numpy())
        report("logits: vectorized fp64 vs naive loop fp64 (max abs)",
               float(np.abs(lg64.numpy() - naive).max()), 1e-5)
        lg32 = forward(params, cfg, inputs, pos, seg, torch.float32)
        report("logits: fp32 vs fp64 (max abs)", float((lg32.double() - lg64).abs().max()), 1e-4)

        # 2. gradients vs central finite differences, every parameter element
        logits, loss, count, grads = forward_backward(params, cfg, inputs, targets, pos, seg, torch.float64)
        P64 = {k: v.double() for k, v in params.items()}

        def f(pp):
            with torch.no_grad():
                return float(loss_fn(forward(pp, cfg, inputs, pos, seg, torch.float64), targets)[0])

        h = 1e-6
        max_abs, max_rel, n = 0.0, 0.0, 0
        # every element without the soft-cap; a random 25% of them with it
        pick = torch.Generator().manual_seed(99)
        for name, _ in param_shapes(cfg):
            flat = P64[name].view(-1)
            g = grads[name].view(-1)
            gmax = float(g.abs().max()) + 1e-12
            elems = range(flat.numel())
            if softcap > 0:
                elems = torch.randperm(flat.numel(), generator=pick)[:max(1, flat.numel() // 4)].tolist()
            for e in elems:
                old = float(flat[e])
                flat[e] = old + h; fp = f(P64)
                flat[e] = old - h; fm = f(P64)
                flat[e] = old
                fd = (fp - fm) / (2 * h)
                err = abs(fd - float(g[e]))
                max_abs = max(max_abs, err)
                max_rel = max(max_rel, err / max(abs(fd), 1e-3 * gmax, 1e-8))
                n += 1
        print("  loss %.9f over %d tokens; %d parameter elements checked" % (float(loss), count, n))
        report("grad vs finite differences (max abs err)", max_abs, 1e-7)
        report("grad vs finite differences (max rel err)", max_rel, 1e-5)

    # 3. sliding window / segment visibility, seen from the outside: with one
    #    local layer, output row i may change when token j changes iff
    #    i - W < j <= i and both are in the same segment.
    cfg = load_config(dict(TINY, base_num_decoder_layers=1, layer_pattern="L"))
    gen = torch.Generator().manual_seed(7)
    params = {k: v * 3.0 for k, v in init_params(cfg, gen).items()}
    inputs, targets, pos, seg = make_batch(cfg, 1, 10, gen, segments=True)
    W = cfg["sliding_window_size"]
    base = forward(params, cfg, inputs, pos, seg, torch.float64)
    bad = 0
    for j in range(10):
        inp2 = inputs.clone()
        inp2[0, j] = (inp2[0, j] + 1) % cfg["vocab_size"]
        out = forward(params, cfg, inp2, pos, seg, torch.float64)
        changed = (out - base).abs().amax(-1)[0] > 1e-12
        for i in range(10):
            expect = (i - W < j <= i) and int(seg[0, i]) == int(seg[0, j])
            bad += int(bool(changed[i]) != expect)
    print("visibility (1 local layer, W=3, T=10, segments %s)" % seg.tolist())
    report("rows whose dependence on token j disagrees with i-W<j<=i", bad, 0)

    # 4. RoPE makes attention depend only on relative positions: shifting all
    #    positions of a single segment leaves the logits unchanged.
    inputs, targets, pos, seg = make_batch(load_config(TINY), 1, 8, gen)
    cfg = load_config(TINY)
    params = {k: v * 3.0 for k, v in init_params(cfg, gen).items()}
    a = forward(params, cfg, inputs, pos, seg, torch.float64)
    b = forward(params, cfg, inputs, pos + 5, seg, torch.float64)
    report("logits change when all positions shift by 5 (max abs)", float((a - b).abs().max()), 1e-5)

    # 5. safetensors round trip
    tmp = "/tmp/ref_gemma3_selftest.safetensors"
    arrs = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7], dtype=np.int32),
            "c": np.zeros((0,), np.float32)}
    save_safetensors(tmp, arrs, {"k": "v"})
    back, meta = load_safetensors(tmp)
    with open(tmp, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
    rt = all(np.array_equal(arrs[k], back[k]) and arrs[k].dtype == back[k].dtype for k in arrs)
    report("safetensors round trip mismatches (+ header alignment)",
           float((not rt) + ((8 + n) % 8 != 0) + (meta != {"k": "v"})), 0)
    os.remove(tmp)

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
    mk.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    mk.add_argument("--out", required=True)
    ck = sub.add_parser("check-fixture")
    ck.add_argument("file")
    sub.add_parser("selftest")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    if args.cmd == "make-fixture":
        return cmd_make_fixture(args)
    if args.cmd == "check-fixture":
        return cmd_check_fixture(args)
    return cmd_selftest(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
