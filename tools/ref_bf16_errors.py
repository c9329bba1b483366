#!/usr/bin/python3
"""PyTorch's own bfloat16 error on gemtrain's reference fixtures.

Runs tools/ref_gemma3.py / ref_gemma4.py (the float64 references that wrote
tests/data/*.safetensors) with every tensor in torch.bfloat16, parameters,
activations and gradients alike, and prints, against the float64 results
stored in each fixture: the largest logit error over the largest |logit|,
the loss's relative error, and the relative L2 error of all gradients as one
vector. tests/test_bf16_model.c holds gemtrain's dtype=bfloat16 run to the
larger of twice these figures and the spread over stochastic roundings of
the weights that tools/bf16_spread.py prints (which also prints these).
The gemma4_bf16_* fixtures are the Gemma 4 models drawn well-conditioned
for this test (tests/data/README.md).

  /usr/bin/python3 tools/ref_bf16_errors.py [fixture stems...]   (from the repository root)
"""
import sys, json, torch, numpy as np
sys.path.insert(0, "tools")
import ref_gemma3 as g3, ref_gemma4 as g4
torch.set_num_threads(1)
for stem in sys.argv[1:] or ["gemma3_ref_small", "gemma3_ref_packed", "gemma4_ref_dense", "gemma4_ref_ple",
                             "gemma4_ref_moe", "gemma4_bf16_dense", "gemma4_bf16_ple", "gemma4_bf16_moe"]:
    t, meta = g3.load_safetensors("tests/data/%s.safetensors" % stem)
    mod = g3 if stem.startswith("gemma3") else g4
    cfg = mod.load_config(json.loads(meta["config"]))
    params = {n: torch.from_numpy(t[n].copy()) for n, _ in mod.param_shapes(cfg)}
    inputs, targets, pos, seg = (torch.from_numpy(t[k].copy()) for k in ("inputs", "targets", "positions", "segments"))
    if mod is g4:
        logits, loss, count, grads, lb = mod.forward_backward_lb(params, cfg, inputs, targets, pos, seg, torch.bfloat16)
    else:
        logits, loss, count, grads = mod.forward_backward(params, cfg, inputs, targets, pos, seg, torch.bfloat16)
    L = logits.float().numpy(); W = t["expected.logits"]
    el = np.abs(L-W).max()/np.abs(W).max()
    eloss = abs(float(loss)-float(t["expected.loss"][0]))/float(t["expected.loss"][0])
    num = sum(float(((grads[n].float().numpy()-t["grad."+n])**2).sum()) for n,_ in mod.param_shapes(cfg))
    den = sum(float((t["grad."+n].astype(np.float64)**2).sum()) for n,_ in mod.param_shapes(cfg))
    print("%-18s torch bf16: logits %.3g of max |logit|, loss rel %.3g, gradients L2 rel %.3g"
          % (stem, el, eloss, (num/den)**0.5))
