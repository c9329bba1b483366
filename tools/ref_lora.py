#!/usr/bin/python3
"""Float64 PyTorch reference of LoRA training on a Gemma 3 model: the loss
curve gemtrain's adapters should follow.

  /usr/bin/python3 tools/ref_lora.py DIR [--tol 0.05]

DIR holds what a gemtrain run wrote (tests/test_lora.c writes it):
  run.json    the model config (ref_gemma3.py's keys), the adapters' scale,
              AdamW's hyperparameters (constant learning rate, no clipping,
              no weight decay), the batch shape, gemtrain's per-step losses,
              and every tensor's name, shape and offset in params.bin
  params.bin  the initial parameters (float32, gemtrain's layout): the base
              and the adapters lora_A [r, in], lora_B [out, r]
  batch.bin   inputs, targets, positions (int32 [B, T] each)

The base stays frozen; each adapted weight W becomes W + scale B A inside
the autograd graph (the same function as x W^T + scale (x A^T) B^T without
dropout), ref_gemma3.forward runs in float64, and A and B take Adam steps
in float64 (optax's adam: bias-corrected moments, eps outside the root).
Prints both curves and exits 1 when a step's loss differs from gemtrain's
by more than --tol (relative)."""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gemma3 as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=0.05)
    args = ap.parse_args()
    run = json.load(open(os.path.join(args.dir, "run.json")))
    cfg = ref.load_config(run["config"])
    flat = np.fromfile(os.path.join(args.dir, "params.bin"), dtype=np.float32)
    base, lora = {}, {}
    for name, shape, off in run["tensors"]:
        n = int(np.prod(shape))
        t = torch.from_numpy(flat[off:off + n].astype(np.float64).reshape(shape))
        if ".lora_" in name:
            lora[name] = t.clone().requires_grad_(True)
        else:
            base[name] = t
    B, T = run["batch"], run["seq"]
    ids = np.fromfile(os.path.join(args.dir, "batch.bin"), dtype=np.int32).reshape(3, B, T)
    inputs, targets, positions = (torch.from_numpy(ids[i].astype(np.int64)) for i in range(3))
    scale = run["scale"]
    h = run["adam"]
    lr, b1, b2, eps, eps_root = h["lr"], h["b1"], h["b2"], h["eps"], h["eps_root"]
    mu = {k: torch.zeros_like(v) for k, v in lora.items()}
    nu = {k: torch.zeros_like(v) for k, v in lora.items()}
    want = run["losses"]
    worst = 0.0
    for step in range(len(want)):
        params = dict(base)
        for name in base:
            stem = name[:-len(".weight")]
            if stem + ".lora_A.weight" in lora:
                A, Bm = lora[stem + ".lora_A.weight"], lora[stem + ".lora_B.weight"]
                params[name] = base[name] + scale * (Bm @ A)
        logits = ref.forward(params, cfg, inputs, positions, None, torch.float64)
        loss, _ = ref.loss_fn(logits, targets)
        for v in lora.values():
            v.grad = None
        loss.backward()
        with torch.no_grad():
            t = step + 1
            for k, v in lora.items():
                g = v.grad
                mu[k] = b1 * mu[k] + (1 - b1) * g
                nu[k] = b2 * nu[k] + (1 - b2) * g * g
                mh = mu[k] / (1 - b1 ** t)
                nh = nu[k] / (1 - b2 ** t)
                v -= lr * mh / (torch.sqrt(nh + eps_root) + eps)
        rel = abs(float(loss) - want[step]) / abs(float(loss))
        worst = max(worst, rel)
        print("step %2d  reference %.6f  gemtrain %.6f  rel %.2e" % (step, float(loss), want[step], rel))
    print("largest relative difference %.3e (tolerance %.0e)" % (worst, args.tol))
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
