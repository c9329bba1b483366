#!/usr/bin/python3
"""Golden logits for `gemtrain logit-check` from a Hugging Face Gemma 3 or
Gemma 4 directory, computed by the independent float64 PyTorch references in
tools/ref_gemma3.py and tools/ref_gemma4.py (written from
the Gemma spec, kept outside the repository, not from gemtrain).

  /usr/bin/python3 tools/ref_hf_logits.py --hf-dir DIR --seqs N --len T \
      --seed S --out golden.jsonl

Reads DIR/config.json (model_type gemma3_text, or gemma3 with text_config;
keys the file omits take transformers' Gemma3TextConfig defaults; RoPE as
rope_theta / rope_local_base_freq / rope_scaling or, as newer releases
write it, rope_parameters per layer type) and
DIR/model.safetensors (or the shards of model.safetensors.index.json), parsed
here with numpy: F32, BF16 (the 16 bits are the high half of a float32) and
F16. The tensors are looked up under "model.", "model.language_model." or
"language_model.model."; a Gemma 3 262208-row embedding is cut to the 262144
tokens.

Gemma 4 (model_type gemma4_text, or gemma4 with text_config; not the MoE
block: this tool does not map an HF MoE layer's tensors onto
tools/ref_gemma4.py's forward_moe) is read as transformers' Gemma4TextConfig and
modeling_gemma4.py define it: defaults for omitted keys (note
hidden_size_per_layer_input = 256), the last layer forced to full attention,
global layers with global_head_dim and (only with attention_k_eq_v)
num_global_key_value_heads, rope_parameters per layer type ("default", or
"proportional" with partial_rotary_factor over the whole head dim and an
optional linear factor), attention scale 1, v_norm without weight, and every
layer's layer_scalar buffer multiplying its output (1 where the file has none,
as transformers initialises a missing buffer).

Writes N lines of {"tokens": [T ids], "logits": [[V floats] per position]}:
token ids uniform in [0, V) from torch.Generator().manual_seed(S), logits of
the float64 forward pass rounded to float32 (written as the shortest decimal
that reads back as the same float32). Prints the sha256 of every file of DIR, so a
fixture can record which export it belongs to.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gemma3  # noqa: E402  (the spec's model, independent of gemtrain)
import ref_gemma4  # noqa: E402

PREFIXES = ("model.", "model.language_model.", "language_model.model.")
HF_DEFAULTS = {  # transformers Gemma3TextConfig
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rms_norm_eps": 1e-6,
    "sliding_window_pattern": 6,
}


def hf_to_ref_config(hf):
    """HF config.json (dict) -> ref_gemma3 config dict."""
    if hf.get("model_type") == "gemma3":
        hf = hf.get("text_config") or {}
    elif hf.get("model_type") != "gemma3_text":
        raise SystemExit("config.json: model_type %r is not Gemma 3" % hf.get("model_type"))
    g = lambda k: hf.get(k, HF_DEFAULTS.get(k))  # noqa: E731
    assert hf.get("hidden_activation", "gelu_pytorch_tanh") == "gelu_pytorch_tanh"
    assert hf.get("attn_logit_softcapping") is None
    L = g("num_hidden_layers")
    if hf.get("layer_types"):
        kinds = ["G" if t == "full_attention" else "L" for t in hf["layer_types"]]
    else:
        p = g("sliding_window_pattern")
        kinds = ["G" if (i + 1) % p == 0 else "L" for i in range(L)]
    def rope_kind(r, allow_linear):
        """the linear factor of a rope_scaling / rope_parameters entry"""
        kind = r.get("rope_type", r.get("type", "default"))
        assert kind == "default" or (allow_linear and kind == "linear"), kind
        return float(r["factor"]) if kind == "linear" else 1.0
    scale = 1.0
    theta, local = g("rope_theta"), g("rope_local_base_freq")
    rs = hf.get("rope_scaling")
    if rs:
        scale = rope_kind(rs, True)
    # newer transformers releases write rope_parameters, per layer type (or
    # one set for both), instead of rope_theta / rope_local_base_freq /
    # rope_scaling
    rp = hf.get("rope_parameters")
    if rp:
        full, slide = rp.get("full_attention"), rp.get("sliding_attention")
        if not isinstance(full, dict) and not isinstance(slide, dict):
            full = rp
        if isinstance(full, dict):
            scale = rope_kind(full, True)
            theta = full.get("rope_theta", theta)
        if isinstance(slide, dict):
            rope_kind(slide, False)
            local = slide.get("rope_theta", local)
    V = g("vocab_size")
    return ref_gemma3.load_config({
        "vocab_size": 262144 if V == 262208 else V,
        "base_emb_dim": g("hidden_size"), "base_num_query_heads": g("num_attention_heads"),
        "base_num_kv_heads": g("num_key_value_heads"), "head_dim": g("head_dim"),
        "base_mlp_dim": g("intermediate_size"), "base_num_decoder_layers": L,
        "sliding_window_size": g("sliding_window"),
        # one letter per layer: the reference repeats the string modulo its length
        "layer_pattern": "".join(kinds),
        "query_pre_attn_scalar": g("query_pre_attn_scalar"),
        "rope_max_timescale": theta, "local_rope_max_timescale": local,
        "rope_linear_scaling_factor": scale, "normalization_layer_epsilon": g("rms_norm_eps"),
        "final_logits_soft_cap": hf.get("final_logit_softcapping") or 0.0,
    })


HF4_DEFAULTS = {  # transformers Gemma4TextConfig
    "vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "global_head_dim": 512, "sliding_window": 512, "rms_norm_eps": 1e-6,
    "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
    "num_kv_shared_layers": 0,
}
HF4_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}


def hf4_to_ref_config(hf):
    """HF Gemma 4 text config (dict) -> ref_gemma4 config dict."""
    g = lambda k: hf[k] if hf.get(k) is not None else HF4_DEFAULTS.get(k)  # noqa: E731
    assert hf.get("hidden_activation", "gelu_pytorch_tanh") == "gelu_pytorch_tanh"
    assert not hf.get("attention_bias") and hf.get("tie_word_embeddings", True)
    if hf.get("enable_moe_block"):
        raise SystemExit("config.json: enable_moe_block is set; this tool does not map an HF MoE layer's tensors "
                         "onto tools/ref_gemma4.py's forward_moe")
    L = g("num_hidden_layers")
    types = list(hf.get("layer_types") or
                 ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)])
    types[-1] = "full_attention"  # Gemma4TextConfig.__post_init__
    hd = g("head_dim")
    ghd = hf.get("global_head_dim", 512) or hd
    kev = bool(hf.get("attention_k_eq_v"))
    rope = hf.get("rope_parameters") or HF4_ROPE

    def rope_of(kind):
        r = rope[kind]
        kind_hd = ghd if kind == "full_attention" else hd
        if r.get("rope_type", "default") == "default":
            # transformers' default RoPE is sized by head_dim
            assert kind_hd == hd, "default RoPE on layers whose head dim is not head_dim"
            return float(r["rope_theta"]), 1.0, 1.0
        assert r["rope_type"] == "proportional", r
        return float(r["rope_theta"]), float(r.get("partial_rotary_factor", 1.0)), float(r.get("factor", 1.0))

    g_theta, g_frac, g_factor = rope_of("full_attention") if "full_attention" in types else (1e6, 1.0, 1.0)
    l_theta, l_frac, l_factor = rope_of("sliding_attention") if "sliding_attention" in types else (1e4, 1.0, 1.0)
    assert l_factor == 1.0
    P = g("hidden_size_per_layer_input")
    nshared = g("num_kv_shared_layers")
    return ref_gemma4.load_config({
        "decoder_block": "gemma4_small" if P or nshared else "gemma4",
        "vocab_size": g("vocab_size"), "base_emb_dim": g("hidden_size"),
        "base_num_query_heads": g("num_attention_heads"), "base_num_kv_heads": g("num_key_value_heads"),
        "head_dim": hd, "global_head_dim": ghd,
        "global_num_kv_heads": (hf.get("num_global_key_value_heads") or 0) if kev else 0,
        "share_kv_projections": kev, "base_mlp_dim": g("intermediate_size"), "base_num_decoder_layers": L,
        "sliding_window_size": g("sliding_window"),
        "layer_pattern": "".join("G" if t == "full_attention" else "L" for t in types),
        "query_pre_attn_scalar": 1.0,
        "rope_max_timescale": g_theta, "rope_linear_scaling_factor": g_factor, "global_rope_proportion": g_frac,
        "local_rope_max_timescale": l_theta, "local_rope_proportion": l_frac,
        "normalization_layer_epsilon": g("rms_norm_eps"),
        "final_logits_soft_cap": hf.get("final_logit_softcapping") or 0.0,
        "v_norm_with_scale": False, "layer_scalar_trainable": True,
        "hidden_size_per_layer_input": P, "vocab_size_per_layer_input": g("vocab_size_per_layer_input") if P else 0,
        "num_kv_shared_layers": nshared, "use_double_wide_mlp": bool(hf.get("use_double_wide_mlp")),
    })


def read_safetensors(path):
    """name -> float32 numpy array (F32, BF16, F16), by hand (spec section 8)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = buf[b:e]
        if info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            continue  # not a weight the text decoder uses
        out[name] = arr.reshape(info["shape"])
    return out


def read_hf_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(d, fn)))
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf-dir", required=True)
    ap.add_argument("--seqs", type=int, default=2)
    ap.add_argument("--len", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        hf = json.load(f)
    gemma4 = hf.get("model_type") in ("gemma4", "gemma4_text")
    if hf.get("model_type") == "gemma4":
        hf = hf.get("text_config") or {}
    ref = ref_gemma4 if gemma4 else ref_gemma3
    cfg = hf4_to_ref_config(hf) if gemma4 else hf_to_ref_config(hf)
    tensors = read_hf_dir(args.hf_dir)
    prefix = next(p for p in PREFIXES if p + "embed_tokens.weight" in tensors)
    V = cfg["vocab_size"]
    params = {}
    for name, shape in ref.param_shapes(cfg):
        if gemma4 and name.endswith(".layer_scalar") and prefix + name not in tensors:
            arr = np.ones(1, dtype=np.float32)  # transformers initialises a missing buffer to 1
        else:
            arr = tensors[prefix + name]
        if name == "embed_tokens.weight" and not gemma4:
            arr = arr[:V]
        assert tuple(arr.shape) == tuple(shape), (name, arr.shape, shape)
        params[name] = torch.from_numpy(np.ascontiguousarray(arr))
    gen = torch.Generator().manual_seed(args.seed)
    inputs = torch.randint(0, V, (args.seqs, args.len), generator=gen, dtype=torch.int64)
    positions = torch.arange(args.len, dtype=torch.int32)[None].repeat(args.seqs, 1)
    with torch.no_grad():
        logits = ref.forward(params, cfg, inputs, positions, None, torch.float64)
    logits32 = logits.to(torch.float32).numpy()
    with open(args.out, "w") as f:
        for b in range(args.seqs):
            # shortest decimal that reads back as the same float32
            rows = ["[" + ", ".join(np.format_float_positional(x, unique=True, trim="0") for x in logits32[b, t]) + "]"
                    for t in range(args.len)]
            f.write('{"tokens": [%s], "logits": [%s]}\n' % (", ".join(str(int(i)) for i in inputs[b]), ", ".join(rows)))
    print("wrote %s: %d sequences of %d tokens, vocab %d" % (args.out, args.seqs, args.len, V))
    for fn in sorted(os.listdir(args.hf_dir)):
        h = hashlib.sha256(open(os.path.join(args.hf_dir, fn), "rb").read()).hexdigest()
        print("sha256 %s  %s" % (h, fn))


if __name__ == "__main__":
    main()
