#!/usr/bin/env python3
"""Draws one step of a gemtrain trace.json (profiler=trace) as an SVG timeline.

    tools/trace_to_svg.py runs/<run>/trace.json out.svg [--step N] [--width PX]

One band per lane (host, then each device and its communication thread),
spans stacked by nesting depth and coloured by category, and under each
device the memory counter as stacked areas by category. The step drawn is
--step (default: the last one traced), from its data loading to its end.
Standard library only (json), so it runs wherever the trace is."""
import argparse
import html
import json
import sys

CAT_COLORS = {
    "step": "#9e9e9e", "data": "#8d6e63", "eval": "#ab47bc", "checkpoint": "#6d4c41",
    "matmul": "#1e88e5", "attention": "#fb8c00", "elementwise": "#43a047", "softmax-xent": "#e53935",
    "optimizer": "#8e24aa", "collective": "#d81b60",
}
PHASE_COLORS = {"forward": "#bbdefb", "output": "#ffcdd2", "recomputing": "#ffe0b2", "backward": "#c8e6c9",
                "per-layer": "#c8e6c9"}
MEM_COLORS = {"params": "#5c6bc0", "grads": "#26a69a", "optimizer": "#ab47bc", "saved_activations": "#ffa726",
              "temporaries": "#ef5350", "logits": "#8d6e63", "gathered_weights": "#29b6f6", "other": "#bdbdbd"}
ROW, LABEL, MEM_H, GAP = 13, 150, 70, 10


def color(e):
    if e.get("cat") == "layer":
        for k, c in PHASE_COLORS.items():
            if k in e["name"]:
                return c
        return "#e0e0e0"
    return CAT_COLORS.get(e.get("cat"), "#757575")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--width", type=int, default=1600)
    a = ap.parse_args()
    doc = json.load(open(a.trace))
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    lanes = {e["tid"]: e["args"]["name"] for e in evs if e.get("ph") == "M" and e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in evs if e.get("ph") == "M" and e["name"] == "thread_sort_index"}
    title = next((e["args"]["name"] for e in evs if e.get("ph") == "M" and e["name"] == "process_name"), "gemtrain")
    steps = sorted((e for e in evs if e.get("ph") == "X" and e.get("cat") == "step" and "step" in e.get("args", {})),
                   key=lambda e: e["ts"])
    if not steps:
        sys.exit("trace_to_svg: no step spans on the host lane of " + a.trace)
    step = steps[-1] if a.step is None else next((s for s in steps if s["args"]["step"] == a.step), None)
    if step is None:
        sys.exit(f"trace_to_svg: step {a.step} is not in the trace (steps {steps[0]['args']['step']}.."
                 f"{steps[-1]['args']['step']})")
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    host_tid = min(lanes, key=lambda t: order.get(t, t))
    for e in evs:  # the step's own data loading and what follows it on the host, up to the next step
        if e.get("ph") == "X" and e["tid"] == host_tid and e.get("cat") != "step":
            if step["ts"] - 0.2 * step["dur"] <= e["ts"] + e["dur"] <= step["ts"] + 1e-3:
                t0 = min(t0, e["ts"])
            nxt = [s["ts"] for s in steps if s["ts"] > step["ts"]]
            if e["ts"] >= step["ts"] + step["dur"] - 1e-3 and (not nxt or e["ts"] < nxt[0]):
                t1 = max(t1, e["ts"] + e["dur"])
    pad = 0.01 * (t1 - t0)
    t0, t1 = t0 - pad, t1 + pad
    W = a.width - LABEL - 20
    x = lambda t: LABEL + (min(max(t, t0), t1) - t0) / (t1 - t0) * W

    out, y = [], 40
    for tid in sorted(lanes, key=lambda t: order.get(t, t)):
        spans = sorted((e for e in evs if e.get("ph") == "X" and e["tid"] == tid
                        and e["ts"] < t1 and e["ts"] + e["dur"] > t0), key=lambda e: (e["ts"], -e["dur"]))
        stack, placed = [], []
        for e in spans:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            placed.append((len(stack), e))
            stack.append(e)
        depth = 1 + max((d for d, _ in placed), default=0)
        out.append(f'<text x="4" y="{y + 11}" font-size="12" font-weight="bold">{html.escape(lanes[tid])}</text>')
        out.append(f'<rect x="{LABEL}" y="{y}" width="{W}" height="{depth * ROW}" fill="#fafafa" stroke="#eee"/>')
        for d, e in placed:
            xa, xb = x(e["ts"]), x(e["ts"] + e["dur"])
            if xb - xa < 0.25:
                continue
            tip = f'{e["name"]} ({e.get("cat", "")}): {e["dur"] / 1000:.3f} ms'
            if "bytes" in e.get("args", {}):
                tip += f', {e["args"]["bytes"]} bytes'
            out.append(f'<rect x="{xa:.2f}" y="{y + d * ROW}" width="{xb - xa:.2f}" height="{ROW - 1}" '
                       f'fill="{color(e)}"><title>{html.escape(tip)}</title></rect>')
            label = e["name"].replace("backward, recomputing", "recompute").replace("backward, layer", "bwd")
            label = label.replace("forward, layer", "fwd").replace("output head (logits and loss)", "head")
            if xb - xa > 6.5 * len(label):
                out.append(f'<text x="{xa + 2:.2f}" y="{y + d * ROW + 10}" font-size="9" '
                           f'pointer-events="none">{html.escape(label)}</text>')
        y += depth * ROW + 4
        # the lane's memory counter, stacked by category
        samples = sorted((e for e in evs if e.get("ph") == "C" and e["tid"] == tid), key=lambda e: e["ts"])
        if samples:
            before = [s for s in samples if s["ts"] <= t0]
            inside = ([before[-1]] if before else []) + [s for s in samples if t0 < s["ts"] < t1]
            keys = list(inside[0]["args"]) if inside else []
            top = max(sum(s["args"].values()) for s in samples) or 1
            base = y + MEM_H
            out.append(f'<text x="4" y="{y + 24}" font-size="10">{html.escape(samples[0]["name"])}</text>')
            out.append(f'<text x="4" y="{y + 36}" font-size="10">peak {top / 1048576:.1f} MiB</text>')
            out.append(f'<rect x="{LABEL}" y="{y}" width="{W}" height="{MEM_H}" fill="none" stroke="#eee"/>')
            lower = [0.0] * len(inside)
            for k in keys:
                pts_top, pts_bot = [], []
                for i, s in enumerate(inside):
                    xa = x(s["ts"])
                    xb = x(inside[i + 1]["ts"]) if i + 1 < len(inside) else x(t1)
                    lo, hi = lower[i], lower[i] + s["args"][k]
                    ya, yb = base - lo / top * MEM_H, base - hi / top * MEM_H
                    pts_top += [(xa, yb), (xb, yb)]
                    pts_bot += [(xa, ya), (xb, ya)]
                    lower[i] = hi
                pts = pts_top + pts_bot[::-1]
                out.append('<polygon points="' + " ".join(f"{p:.1f},{q:.1f}" for p, q in pts) +
                           f'" fill="{MEM_COLORS.get(k, "#999")}" stroke="none"><title>{k}</title></polygon>')
            y += MEM_H + 4
        y += GAP
    # time axis in ms from the step's start
    ticks = []
    span_ms = (t1 - t0) / 1000
    stepms = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000) if span_ms / s <= 12)
    k = 0
    while k * stepms * 1000 + step["ts"] <= t1:
        t = step["ts"] + k * stepms * 1000
        ticks.append(f'<line x1="{x(t):.1f}" y1="30" x2="{x(t):.1f}" y2="{y}" stroke="#ddd" stroke-width="0.5"/>'
                     f'<text x="{x(t):.1f}" y="28" font-size="10" text-anchor="middle">{k * stepms:g} ms</text>')
        k += 1
    legend, lx = [], LABEL
    items = list(CAT_COLORS.items()) + [("layer: " + k, c) for k, c in PHASE_COLORS.items() if k != "per-layer"]
    items += [("memory: " + k, c) for k, c in MEM_COLORS.items()]
    ly = y + 8
    for name, c in items:
        if lx + 8 * len(name) + 20 > a.width:
            lx, ly = LABEL, ly + 16
        legend.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{c}"/>'
                      f'<text x="{lx + 14}" y="{ly + 9}" font-size="10">{html.escape(name)}</text>')
        lx += 6 * len(name) + 30
    H = ly + 24
    head = (f'<text x="4" y="16" font-size="14" font-weight="bold">{html.escape(title)}: step {step["args"]["step"]}, '
            f'{step["dur"] / 1000:.1f} ms (trace.json; open the file in ui.perfetto.dev or chrome://tracing)</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{a.width}" height="{H}" font-family="sans-serif">'
           f'<rect width="100%" height="100%" fill="white"/>' + head + "".join(ticks) + "".join(out) +
           "".join(legend) + "</svg>\n")
    with open(a.out, "w") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
