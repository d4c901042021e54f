#!/usr/bin/env python3
"""Line charts (SVG, no third-party package) of an ablation's runs.

Reads RUNS/<variant>-s<seed>/metrics.jsonl (jobs/ablation_demo_gpu.sh's
layout) and writes three charts into OUT:
  accuracy.svg         validation accuracy (val-core/*/acc/mean@k) vs step
  entropy.svg          actor/entropy (the trained tokens' mean entropy) vs step
  response_length.svg  gen/response_length/mean (every sampled response of
                       the step, kept or not, so both variants count alike)
Each seed is a thin line, each variant's mean over its seeds a thick one
(at the steps every seed logged). Only the standard library: matplotlib is
not on every GPU node, and SVG diffs and renders on GitHub.

Usage: python3 jobs/plot_ablation.py RUNS [--out DIR] [--variants grpo,dapo]
"""
import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

COLORS = {"grpo": "#1f77b4", "overlong_filter": "#17becf", "clip_higher": "#2ca02c", "soft_overlong": "#ff7f0e",
          "token_loss": "#9467bd", "dapo": "#d62728"}
FALLBACK = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
LABELS = {"grpo": "GRPO", "overlong_filter": "+ overlong filtering", "clip_higher": "+ clip-higher",
          "soft_overlong": "+ soft overlong punishment", "token_loss": "+ token-level loss",
          "dapo": "DAPO"}

CHARTS = [
    ("accuracy.svg", "Validation accuracy (sampled, T = 1, 4 per problem)", "accuracy", "val"),
    ("entropy.svg", "Policy entropy of the trained tokens (actor/entropy)", "nats / token", "actor/entropy"),
    ("response_length.svg", "Mean length of the sampled responses (gen/response_length/mean)", "tokens",
     "gen/response_length/mean"),
]


def load(path, key):
    """{step: value} of one metric in a metrics.jsonl ("val": the validation accuracy)."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            for k, v in r.items():
                hit = (k.startswith("val-core/") and "/acc/mean" in k) if key == "val" else k == key
                if hit and isinstance(v, (int, float)) and math.isfinite(v):
                    out[int(r["step"])] = float(v)
    return out


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    last = math.ceil(hi / step) * step
    ticks = []
    t = first
    while t <= last + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks, step


def fmt(v, step):
    if step >= 1:
        return f"{v:.0f}"
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{digits}f}"


def chart(series, title, ylabel, width=640, height=360):
    """series: [(variant, seed, {step: value})]; returns the SVG text."""
    ml, mr, mt, mb = 62, 16, 34, 46
    pw, ph = width - ml - mr, height - mt - mb
    xs = [s for _, _, d in series for s in d]
    ys = [v for _, _, d in series for v in d.values()]
    if not xs:
        xs, ys = [0, 1], [0, 1]
    xt, xstep = nice_ticks(0, max(xs))
    pad = 0.04 * (max(ys) - min(ys) or 1.0)
    yt, ystep = nice_ticks(min(ys) - pad, max(ys) + pad)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    X = lambda x: ml + (x - x0) / (x1 - x0) * pw
    Y = lambda y: mt + ph - (y - y0) / (y1 - y0) * ph
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>']
    for t in yt:
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{fmt(t, ystep)}</text>')
    for t in xt:
        o.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{mt}" y2="{mt + ph}" stroke="#f0f0f0"/>')
        o.append(f'<text x="{X(t):.1f}" y="{mt + ph + 16}" text-anchor="middle">{fmt(t, xstep)}</text>')
    o.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    o.append(f'<text x="{ml + pw / 2:.0f}" y="{height - 8}" text-anchor="middle">DAPO step</text>')
    o.append(f'<text transform="translate(14 {mt + ph / 2:.0f}) rotate(-90)" text-anchor="middle">'
             f'{escape(ylabel)}</text>')

    def path(d, color, w, opacity):
        pts = " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in sorted(d.items()))
        return (f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{w}" '
                f'stroke-opacity="{opacity}" stroke-linejoin="round"/>')

    variants = list(dict.fromkeys(v for v, _, _ in series))
    color = {v: COLORS.get(v, FALLBACK[i % len(FALLBACK)]) for i, v in enumerate(variants)}
    for v, _, d in series:
        o.append(path(d, color[v], 1, 0.4))
    legend = []
    for v in variants:
        runs = [d for w, _, d in series if w == v]
        common = set.intersection(*(set(d) for d in runs))
        mean = {s: sum(d[s] for d in runs) / len(runs) for s in common}
        if mean:
            o.append(path(mean, color[v], 2.6, 1))
        legend.append((LABELS.get(v, v), color[v], len(runs)))
    # The legend goes into the corner that hides the fewest points.
    lw, lh = 380, 16 * len(legend) + 6
    pts = [(X(s), Y(v)) for _, _, d in series for s, v in d.items()]
    corners = [(ml + 4, mt + 4), (ml + pw - lw - 4, mt + 4), (ml + 4, mt + ph - lh - 4), (ml + pw - lw - 4, mt + ph - lh - 4)]
    bx, by = min(corners, key=lambda c: sum(c[0] <= x <= c[0] + lw and c[1] <= y <= c[1] + lh for x, y in pts))
    o.append(f'<rect x="{bx}" y="{by}" width="{lw}" height="{lh}" fill="white" fill-opacity="0.85"/>')
    lx, ly = bx + 6, by + 11
    for i, (name, c, n) in enumerate(legend):
        y = ly + 16 * i
        o.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{y}" y2="{y}" stroke="{c}" stroke-width="2.6"/>')
        o.append(f'<text x="{lx + 28}" y="{y + 4}">{escape(name)}: mean of {n} seed{"s" if n != 1 else ""} (thin: each seed)</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", help="directory with <variant>-s<seed>/metrics.jsonl")
    ap.add_argument("--out", help="where the SVGs go (default: RUNS)")
    ap.add_argument("--variants", default="grpo,dapo", help="comma-separated, in legend order")
    a = ap.parse_args()
    out = a.out or a.runs
    os.makedirs(out, exist_ok=True)
    runs = []
    for v in a.variants.split(","):
        for name in sorted(os.listdir(a.runs)):
            m = re.fullmatch(re.escape(v) + r"-s(\d+)", name)
            p = os.path.join(a.runs, name, "metrics.jsonl")
            if m and os.path.isfile(p):
                runs.append((v, int(m.group(1)), p))
    if not runs:
        sys.exit(f"plot_ablation.py: no <variant>-s<seed>/metrics.jsonl under {a.runs}")
    for fname, title, ylabel, key in CHARTS:
        series = [(v, s, load(p, key)) for v, s, p in sorted(runs, key=lambda r: (a.variants.split(",").index(r[0]), r[1]))]
        with open(os.path.join(out, fname), "w") as f:
            f.write(chart(series, title, ylabel))
        print(os.path.join(out, fname))


if __name__ == "__main__":
    main()
