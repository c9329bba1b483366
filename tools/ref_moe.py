#!/usr/bin/python3
"""Independent float64 PyTorch reference of the routed Gemma 4 MoE block
(the Gemma spec (kept outside the repository), section 3.6; norms as section 3.2: stored scale, no
+1), written from the spec and not from gemtrain's C sources. It makes the
fixture tests/data/moe_ref.safetensors that tests/test_moe.c checks.

  /usr/bin/python3 tools/ref_moe.py make-fixture --seed 7 --out tests/data/moe_ref.safetensors
  /usr/bin/python3 tools/ref_moe.py selftest

Math, h [N = B*T, d]:
  gate_in = rms(h) * router.scale * d**-0.5      rms(x) = x * rsqrt(mean(x^2) + eps)
  logits  = gate_in @ router.proj.weight.T ;  P = softmax(logits)
  top-k by logits (stable descending sort: ties to the lower index)
  w       = P[topk] / sum(P[topk]) * router.per_expert_scale[topk]
  rin     = rms(h) * pre_feedforward_layernorm_2.weight
  sum     = sum_j w_j * (gelu_tanh(rin Wg^T) * rin Wu^T) Wd^T,
            [Wg; Wu] = experts.gate_up_proj[e] (rows 0..F-1 gate), Wd = experts.down_proj[e]
  out     = rms(sum) * post_feedforward_layernorm_2.weight
  lb      = lb_weight * E^2 * mean_{b,e}(f[b,e] * Pbar[b,e]),
            f = mean over the sequence of top-k membership, Pbar = mean of P
Objective for the gradients: L = sum(out * dout) + dlb * lb (f held constant:
top-k membership has no gradient).

Why a second fixture with eps = 1: the post norm is scale-invariant up to
eps, which makes the gradient through the top-k normalisation w /= sum(w)
vanish (sum_j w_j dL/dw_j = dL/dsum . sum ~ 0). With eps = 1 that term is of
the same order as the others, so the fixture checks it too.
"""

import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_gemma3 import gelu_tanh, load_safetensors, save_safetensors  # noqa: E402

PARAMS = [
    "router.proj.weight", "router.scale", "router.per_expert_scale",
    "pre_feedforward_layernorm_2.weight", "post_feedforward_layernorm_2.weight",
    "experts.gate_up_proj", "experts.down_proj",
]


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def route(p, h, k, eps):
    d = h.shape[1]
    gate_in = rms(h, eps) * p["router.scale"] * d ** -0.5
    logits = gate_in @ p["router.proj.weight"].T
    probs = torch.softmax(logits, dim=-1)
    topk = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    psel = probs.gather(1, topk)
    w = psel / psel.sum(-1, keepdim=True) * p["router.per_expert_scale"][topk]
    return logits, probs, topk, w


def forward(p, h, B, T, k, eps, lb_weight):
    N, d = h.shape
    E, twoF, _ = p["experts.gate_up_proj"].shape
    F = twoF // 2
    _, probs, topk, w = route(p, h, k, eps)
    rin = rms(h, eps) * p["pre_feedforward_layernorm_2.weight"]
    total = torch.zeros_like(h)
    for e in range(E):
        tok, slot = (topk == e).nonzero(as_tuple=True)
        if len(tok) == 0:
            continue
        z = rin[tok]
        gu = p["experts.gate_up_proj"][e]
        act = gelu_tanh(z @ gu[:F].T) * (z @ gu[F:].T)
        y = act @ p["experts.down_proj"][e].T
        total = total.index_add(0, tok, w[tok, slot].unsqueeze(1) * y)
    out = rms(total, eps) * p["post_feedforward_layernorm_2.weight"]
    member = torch.nn.functional.one_hot(topk, E).sum(1).to(h.dtype).reshape(B, T, E)
    f = member.mean(1)
    pbar = probs.reshape(B, T, E).mean(1)
    lb = lb_weight * E * E * (f * pbar).mean()
    return out, lb, topk


def objective(p, h, dout, dims, dlb):
    B, T, d, E, k, F, eps, lbw = dims
    out, lb, topk = forward(p, h, B, T, k, eps, lbw)
    return (out * dout).sum() + dlb * lb, out, lb, topk


def init(B, T, d, E, k, F, seed):
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean)

    p = {
        "router.proj.weight": rn(E, d, std=1.5),
        "router.scale": rn(d, std=0.2, mean=1.0),
        "router.per_expert_scale": rn(E, std=0.2, mean=1.0),
        "pre_feedforward_layernorm_2.weight": rn(d, std=0.2, mean=1.0),
        "post_feedforward_layernorm_2.weight": rn(d, std=0.2, mean=1.0),
        "experts.gate_up_proj": rn(E, 2 * F, d, std=0.3),
        "experts.down_proj": rn(E, d, F, std=0.3),
    }
    return p, rn(B * T, d), rn(B * T, d)


def min_gap(p, h, k, eps):
    """Smallest gap between the k-th and (k+1)-th logit of any token: a float32
    implementation picks the same experts when this is far above 1e-6."""
    logits, _, _, _ = route(p, h, k, eps)
    s = torch.sort(logits, dim=-1, descending=True).values
    return float((s[:, k - 1] - s[:, k]).min()) if k < s.shape[1] else math.inf


def cmd_make_fixture(a):
    B, T, d, E, k, F = a.batch, a.seq, a.d, a.experts, a.k, a.ffw
    eps, lbw, dlb = a.eps, a.lb_weight, a.dlb
    p32, h32, dout32 = init(B, T, d, E, k, F, a.seed)
    p = {n: v.double().requires_grad_(True) for n, v in p32.items()}
    h = h32.double().requires_grad_(True)
    gap = min_gap(p, h, k, eps)
    assert gap > 1e-3, "top-k gap %.3g too small for a float32 comparison; pick another seed" % gap
    L, out, lb, topk = objective(p, h, dout32.double(), (B, T, d, E, k, F, eps, lbw), dlb)
    L.backward()
    counts = torch.bincount(topk.reshape(-1), minlength=E)
    t = {n: v.numpy() for n, v in p32.items()}
    t["h"] = h32.numpy()
    t["dout"] = dout32.numpy()
    t["dims"] = np.array([B, T, d, E, k, F], dtype=np.int32)
    t["hparams"] = np.array([eps, lbw, dlb], dtype=np.float32)
    t["expected.out"] = out.detach().float().numpy()
    t["expected.lb_loss"] = np.array([float(lb)], dtype=np.float32)
    t["expected.topk"] = topk.int().numpy()
    t["grad.h"] = h.grad.float().numpy()
    for n in PARAMS:
        t["grad." + n] = p[n].grad.float().numpy()
    made_by = "/usr/bin/python3 tools/ref_moe.py make-fixture " + " ".join(sys.argv[2:])
    save_safetensors(a.out, t, {"made_by": made_by, "lb_loss_f64": repr(float(lb)),
                                "expert_counts": " ".join(str(int(c)) for c in counts)})
    print("wrote %s: lb %.9g, min top-k gap %.3g, tokens per expert %s" % (
        a.out, float(lb), gap, counts.tolist()))


def cmd_check_fixture(a):
    t, meta = load_safetensors(a.path)
    B, T, d, E, k, F = (int(x) for x in t["dims"])
    eps, lbw, dlb = (float(x) for x in t["hparams"])
    p = {n: torch.tensor(t[n]).double().requires_grad_(True) for n in PARAMS}
    h = torch.tensor(t["h"]).double().requires_grad_(True)
    L, out, lb, _ = objective(p, h, torch.tensor(t["dout"]).double(), (B, T, d, E, k, F, eps, lbw), dlb)
    L.backward()
    err = max(float((out.detach().float() - torch.tensor(t["expected.out"])).abs().max()),
              float((h.grad.float() - torch.tensor(t["grad.h"])).abs().max()))
    for n in PARAMS:
        err = max(err, float((p[n].grad.float() - torch.tensor(t["grad." + n])).abs().max()))
    print("%s: regenerated, max difference %.3g (lb %s)" % (a.path, err, meta.get("lb_loss_f64")))
    return 0 if err == 0 else 1


def cmd_selftest(_a):
    ok = True

    # the hand example of tests/test_moe.c: E=4, k=2, one sequence of 3 tokens
    probs = torch.tensor([[.4, .3, .2, .1], [.1, .2, .3, .4], [.5, .1, .1, .3]], dtype=torch.float64)
    topk = torch.tensor([[0, 1], [3, 2], [0, 3]])
    f = torch.nn.functional.one_hot(topk, 4).sum(1).double().mean(0)
    lb = 16 * (f * probs.mean(0)).mean()
    ok &= abs(float(lb) - 32 / 15) < 1e-12
    print("hand lb %.12f (32/15 = %.12f)" % (float(lb), 32 / 15))

    # autograd against central differences, float64, a few entries per tensor
    B, T, d, E, k, F = 2, 3, 6, 5, 2, 4
    dims = (B, T, d, E, k, F, 1e-6, 0.3)
    p32, h32, dout32 = init(B, T, d, E, k, F, 3)
    p = {n: v.double().requires_grad_(True) for n, v in p32.items()}
    h = h32.double().requires_grad_(True)
    dout = dout32.double()
    L, _, _, topk0 = objective(p, h, dout, dims, 0.7)
    L.backward()
    tensors = dict(p)
    tensors["h"] = h
    gen = torch.Generator().manual_seed(0)
    step = 1e-6
    for name, v in tensors.items():
        flat = v.detach().view(-1)
        worst = 0.0
        for i in torch.randint(0, flat.numel(), (6,), generator=gen).tolist():
            save = float(flat[i])
            with torch.no_grad():
                flat[i] = save + step
                lp, _, _, tp = objective(p, h, dout, dims, 0.7)
                flat[i] = save - step
                lm, _, _, tm = objective(p, h, dout, dims, 0.7)
                flat[i] = save
            assert torch.equal(tp, topk0) and torch.equal(tm, topk0), "selection moved"
            fd = (float(lp) - float(lm)) / (2 * step)
            worst = max(worst, abs(fd - float(v.grad.view(-1)[i])) / max(1.0, abs(fd)))
        ok &= worst < 1e-7
        print("fd %-38s %.3g" % (name, worst))
    print("selftest", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-fixture")
    m.add_argument("--batch", type=int, default=2)
    m.add_argument("--seq", type=int, default=5)
    m.add_argument("--d", type=int, default=16)
    m.add_argument("--experts", type=int, default=16)
    m.add_argument("--k", type=int, default=3)
    m.add_argument("--ffw", type=int, default=12)
    m.add_argument("--lb-weight", type=float, default=0.1)
    m.add_argument("--dlb", type=float, default=1.5)
    m.add_argument("--eps", type=float, default=1e-6)
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--out", required=True)
    c = sub.add_parser("check-fixture")
    c.add_argument("path")
    sub.add_parser("selftest")
    a = ap.parse_args()
    torch.set_grad_enabled(True)
    if a.cmd == "make-fixture":
        return cmd_make_fixture(a) or 0
    if a.cmd == "check-fixture":
        return cmd_check_fixture(a)
    return cmd_selftest(a)


if __name__ == "__main__":
    sys.exit(main())
