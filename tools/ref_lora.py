#!/usr/bin/python3
"""Float64 PyTorch reference of LoRA training on a Gemma 3 model: the loss
curve gemtrain's adapters should follow.

  /usr/bin/python3 tools/ref_lora.py DIR [--tol 1e-4]

DIR holds what a gemtrain run wrote (tests/test_lora.c writes it):
  run.json    the run's config (gemtrain's keys: ref_gemma3.py's model keys,
              lora_rank, lora_alpha, lora_use_rslora), AdamW's
              hyperparameters (constant learning rate, no clipping, no weight
              decay), the batch shape, gemtrain's per-step losses, and every
              tensor's name, shape and offset in params.bin
  params.bin  the initial parameters (float32, gemtrain's layout): the base
              and the adapters lora_A [r, in], lora_B [out, r]
  batch.bin   inputs, targets, positions (int32 [B, T] each)

The adapters' scale is PEFT's, from the config alone: lora_alpha / r, or
lora_alpha / sqrt(r) with lora_use_rslora (r = lora_rank, which must be the
adapters' rank in params.bin). Their initial values must be PEFT's: every
lora_B zero, every lora_A inside kaiming_uniform(a=sqrt(5))'s bound
1 / sqrt(in) and reaching past 0.9 of it (a uniform draw of a few hundred
values does); otherwise the script exits 1 before training.

The base stays frozen; each adapted weight W becomes W + scale B A inside
the autograd graph (the same function as x W^T + scale (x A^T) B^T without
dropout), ref_gemma3.forward runs in float64, and A and B take Adam steps
in float64 (optax's adam: bias-corrected moments, eps outside the root).
Prints both curves and exits 1 when a step's loss differs from gemtrain's
by more than --tol (relative; gemtrain's float32 steps stay within 1e-5 of
this float64 curve).

--out FILE writes the reference curve in the form tests/data/lora_ref_curve.txt
keeps (recorded once so that the test checks gemtrain's curve where torch is
missing): the settings the run used, fingerprints of its initial weights and
batch, and the 50 float64 losses. To record it again:

  GT_LORA_REF_RECORD=$PWD/tests/data/lora_ref_curve.txt build/test_lora

(test_lora then runs this script with --out that file)."""

import argparse
import datetime
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gemma3 as ref  # noqa: E402


def write_curve(path, run, flat, ids, losses):
    """The settings and fingerprints let test_lora check that a recorded
    curve belongs to the run it compares: the same overrides, the same
    initial weights (sums in float64, compared to 1e-6 relative) and the
    same batch (an exact weighted sum of the token ids)."""
    p = flat.astype(np.float64)
    flat_ids = ids.astype(np.int64).reshape(-1)
    with open(path, "w") as f:
        f.write("# Float64 PyTorch reference of test_lora's 50 LoRA steps (tools/ref_lora.py --out)\n")
        f.write("# torch %s, numpy %s, %s\n" % (torch.__version__, np.__version__,
                                               datetime.date.today().isoformat()))
        f.write("settings %s\n" % run["overrides"])
        f.write("params_sum_abs %.17g\n" % float(np.sum(np.abs(p))))
        f.write("params_sum_sq %.17g\n" % float(np.sum(p * p)))
        f.write("batch_checksum %d\n" % int(np.sum(flat_ids * np.arange(1, flat_ids.size + 1, dtype=np.int64))))
        for step, loss in enumerate(losses):
            f.write("loss %d %.17g\n" % (step, loss))


def lora_scale(raw):
    """PEFT's scale of the adapters' output from the run's config."""
    r, alpha = int(raw["lora_rank"]), float(raw["lora_alpha"])
    return alpha / math.sqrt(r) if raw.get("lora_use_rslora", False) else alpha / r


def init_errors(lora, rank):
    """What in the adapters' initial values is not PEFT's (none: [])."""
    errs = []
    for name, t in sorted(lora.items()):
        r = t.shape[1] if ".lora_B." in name else t.shape[0]
        if r != rank:
            errs.append("%s has rank %d, the config's lora_rank is %d" % (name, r, rank))
        if ".lora_B." in name:
            if bool(torch.any(t != 0)):
                errs.append("%s is not all zero (largest |value| %.3g)" % (name, float(t.abs().max())))
            continue
        bound, top = 1.0 / math.sqrt(t.shape[1]), float(t.abs().max())
        if top > bound * (1 + 1e-6) or top < 0.9 * bound:
            errs.append("%s reaches %.6g; kaiming_uniform(a=sqrt(5)) over in=%d draws up to %.6g" %
                        (name, top, t.shape[1], bound))
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--out", help="write the reference curve here (tests/data/lora_ref_curve.txt's form)")
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
    if not lora:
        raise SystemExit("params.bin holds no adapters (no tensor named *.lora_A / *.lora_B)")
    errs = init_errors(lora, int(run["config"]["lora_rank"]))
    if errs:
        print("the adapters' initial values are not PEFT's:\n  " + "\n  ".join(errs))
        return 1
    scale = lora_scale(run["config"])
    print("scale %.17g (lora_alpha %g, lora_rank %d, lora_use_rslora %s)" %
          (scale, float(run["config"]["lora_alpha"]), int(run["config"]["lora_rank"]),
           bool(run["config"].get("lora_use_rslora", False))))
    h = run["adam"]
    lr, b1, b2, eps, eps_root = h["lr"], h["b1"], h["b2"], h["eps"], h["eps_root"]
    mu = {k: torch.zeros_like(v) for k, v in lora.items()}
    nu = {k: torch.zeros_like(v) for k, v in lora.items()}
    want = run["losses"]
    worst = 0.0
    ref_losses = []
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
        ref_losses.append(float(loss))
        rel = abs(float(loss) - want[step]) / abs(float(loss))
        worst = max(worst, rel)
        print("step %2d  reference %.6f  gemtrain %.6f  rel %.2e" % (step, float(loss), want[step], rel))
    print("largest relative difference %.3e (tolerance %.0e)" % (worst, args.tol))
    if args.out:
        write_curve(args.out, run, flat, ids, ref_losses)
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
