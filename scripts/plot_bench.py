#!/usr/bin/env python3
"""Renders `weave bench --json` files into PNGs, one or more per file, named <json stem>_<what>.png.

  gemm   weave time / cuBLASLt time per shape and mode (< 1: weave faster)      <stem>_ratio.png
  comm   busbw against size per collective: best weave arm, best NCCL arm and    <stem>_busbw.png
         the measured NVLink peer-copy ceiling; below, the speed-up over best NCCL
  copy   achieved bandwidth as % of the recorded ceiling per size and path      <stem>_ceiling.png
  fused  (GEMM + collective) per-phase time split, from rows' extra.phases_us   <stem>_phases.png

Usage: scripts/plot.sh [FILE.json ...]   (makes a venv with matplotlib from PyPI), or directly
       python3 scripts/plot_bench.py FILE.json [FILE.json ...] [--out DIR]   (default: next to each file)
A file of another suite is named and skipped; a file without the rows a plot needs is an error.
"""
import argparse
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 100


def machine_line(meta):
    m = meta.get("machine", {})
    gpus = m.get("gpus", [])
    name = gpus[0]["name"] if gpus else "no GPU"
    nccl = m.get("nccl")
    nccl_s = f", NCCL {nccl // 10000}.{nccl % 10000 // 100}.{nccl % 100}" if isinstance(nccl, int) else ""
    return f"{len(gpus)} x {name}{nccl_s}"


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path} ({os.path.getsize(path) // 1024} KB)")


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---- gemm ----

def plot_gemm(doc, stem):
    rows = [r for r in doc["rows"] if r["mode"].startswith("weave") and number(r.get("ratio"))]
    if not rows:
        raise ValueError("no weave rows with a cuBLASLt ratio")
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    series = list(dict.fromkeys((r["quant"], r["mode"]) for r in rows))
    value = {(r["shape"], r["quant"], r["mode"]): r for r in rows}
    baseline = {(r["quant"], r["mode"]): r.get("baseline") or "cublaslt" for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(shapes) + 3), 4.8))
    width = 0.8 / len(series)
    cmap = plt.get_cmap("tab10")
    for i, (quant, mode) in enumerate(series):
        xs, ys = [], []
        for j, shape in enumerate(shapes):
            r = value.get((shape, quant, mode))
            if r is not None:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(r["ratio"])
        label = quant if mode == "weave" else f"{quant} ({mode})"
        if baseline[(quant, mode)] != "cublaslt":
            label += f" vs {baseline[(quant, mode)]}"
        ax.bar(xs, ys, width, label=label, color=cmap(i % 10))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("shape (M x N x K)")
    ax.set_ylabel("weave time / cuBLASLt time")
    ax.set_title(f"weave::Gemm vs cuBLASLt, same run (below 1: weave faster) - {machine_line(doc['meta'])}",
                 fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    save(fig, stem + "_ratio.png")


# ---- comm ----

def size_bytes(shape):
    m = re.fullmatch(r"(\d+)(B|KB|MB|GB)", shape)
    if not m:
        raise ValueError(f"size '{shape}' is not <n>B/KB/MB/GB")
    return int(m.group(1)) * {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[m.group(2)]


def size_label(b):
    for unit, s in (("GB", 30), ("MB", 20), ("KB", 10)):
        if b >= 1 << s:
            return f"{b >> s}{unit}"
    return f"{b}B"


def plot_comm(doc, stem):
    rows = [r for r in doc["rows"] if number(r.get("busbw_gbps"))]
    if not rows:
        raise ValueError("no rows with busbw")
    ops = list(dict.fromkeys(r["quant"] for r in rows))
    ceiling_rows = [r for r in rows if r["mode"] == "peer-copy"]
    ceiling = max((r["busbw_gbps"] for r in ceiling_rows), default=None)
    fig, axes = plt.subplots(2, len(ops), figsize=(5.2 * len(ops), 6.6), sharex="col", sharey="row", squeeze=False,
                             gridspec_kw={"height_ratios": [2.2, 1]})
    for col, op in enumerate(ops):
        ax, sp = axes[0][col], axes[1][col]
        mine = [r for r in rows if r["quant"] == op]
        sizes = sorted({size_bytes(r["shape"]) for r in mine})
        best = {"weave": {}, "NCCL": {}}
        for r in mine:
            if r["mode"] == "peer-copy":
                continue
            side = "NCCL" if r["mode"].startswith("nccl") else "weave"
            s = size_bytes(r["shape"])
            if r["busbw_gbps"] > best[side].get(s, (0, ""))[0]:
                best[side][s] = (r["busbw_gbps"], r["mode"])
        for side, style in (("weave", dict(color="tab:blue", marker="o")),
                            ("NCCL", dict(color="tab:orange", marker="s"))):
            xs = [s for s in sizes if s in best[side]]
            ax.plot(xs, [best[side][s][0] for s in xs], label=f"best {side} arm", markersize=3.5, **style)
        peer = sorted((size_bytes(r["shape"]), r["busbw_gbps"]) for r in mine if r["mode"] == "peer-copy")
        if peer:
            ax.plot([p[0] for p in peer], [p[1] for p in peer], color="gray", linestyle="--", linewidth=1,
                    label="peer copy (cudaMemcpyAsync)")
        if ceiling:
            ax.axhline(ceiling, color="black", linestyle=":", linewidth=1,
                       label=f"link ceiling, measured: {ceiling:.0f} GB/s")
        ax.set_yscale("log")
        ax.set_title(op, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        # Same busbw convention on both sides, so the busbw ratio is the speed-up.
        both = [s for s in sizes if s in best["weave"] and s in best["NCCL"]]
        ratio = [best["weave"][s][0] / best["NCCL"][s][0] for s in both]
        sp.bar(both, ratio, width=[0.5 * s for s in both], color=["tab:blue" if x >= 1 else "tab:red" for x in ratio])
        sp.axhline(1.0, color="black", linewidth=0.8)
        sp.set_xscale("log", base=2)
        ticks = sizes[::2] if len(sizes) > 10 else sizes
        sp.set_xticks(ticks)
        sp.set_xticklabels([size_label(s) for s in ticks], rotation=45, fontsize=8)
        sp.set_xlabel("size (nccl-tests convention)")
        sp.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("busbw (GB/s, log)")
    axes[1][0].set_ylabel("speed-up over\nbest NCCL")
    axes[0][0].legend(fontsize=8)
    world = doc["meta"].get("world")
    fig.suptitle(f"collectives: busbw against size{f', {world} ranks' if world else ''} - "
                 f"{machine_line(doc['meta'])}", fontsize=10)
    save(fig, stem + "_busbw.png")


# ---- copy ----

def plot_copy(doc, stem):
    rows = [r for r in doc["rows"] if number(r.get("extra", {}).get("pct_of_ceiling"))]
    if not rows:
        raise ValueError("no rows with pct_of_ceiling")
    sizes = list(dict.fromkeys(r["shape"] for r in rows))
    paths = list(dict.fromkeys(r["mode"] for r in rows))
    value = {(r["shape"], r["mode"]): r["extra"]["pct_of_ceiling"] for r in rows}
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(paths)
    for i, path in enumerate(paths):
        xs = [j - 0.4 + (i + 0.5) * width for j, s in enumerate(sizes) if (s, path) in value]
        ys = [value[(s, path)] for s in sizes if (s, path) in value]
        ax.bar(xs, ys, width, label=path)
    ax.axhline(100, color="black", linewidth=0.8)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes)
    ax.set_ylabel("% of the recorded ceiling")
    ax.set_title(f"weave bench copy - {machine_line(doc['meta'])}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, stem + "_ceiling.png")


# ---- fused operators: the phase split ----

def plot_phases(doc, stem):
    rows = [r for r in doc["rows"] if isinstance(r.get("extra", {}).get("phases_us"), dict)]
    if not rows:
        raise ValueError("no rows with extra.phases_us")
    labels = [f"{r['shape']} {r['mode']}" for r in rows]
    phases = list(dict.fromkeys(p for r in rows for p in r["extra"]["phases_us"]))
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5))
    left = [0.0] * len(rows)
    for p in phases:
        widths = [float(r["extra"]["phases_us"].get(p, 0)) for r in rows]
        ax.barh(range(len(rows)), widths, left=left, label=p)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("time (us)")
    ax.set_title(f"{doc.get('suite', 'fused')}: time per phase - {machine_line(doc['meta'])}", fontsize=10)
    ax.legend(fontsize=8)
    save(fig, stem + "_phases.png")


PLOTS = {"gemm": plot_gemm, "comm": plot_comm, "copy": plot_copy}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="weave bench --json output")
    ap.add_argument("--out", help="folder for the PNGs (default: next to each JSON file)")
    args = ap.parse_args()
    failed = 0
    for path in args.files:
        try:
            with open(path) as f:
                doc = json.load(f)
            suite = doc.get("suite")
            stem = os.path.splitext(os.path.basename(path))[0]
            stem = os.path.join(args.out or os.path.dirname(path) or ".", stem)
            if suite in PLOTS:
                PLOTS[suite](doc, stem)
            elif any(isinstance(r.get("extra", {}).get("phases_us"), dict) for r in doc.get("rows", [])):
                plot_phases(doc, stem)
            else:
                print(f"{path}: suite '{suite}' has no plot yet; skipped")
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{path}: cannot plot: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
