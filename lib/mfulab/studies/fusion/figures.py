"""Figures of the ``fusion`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ...plots import label
from .analysis import (
    attention_slopes,
    attention_table,
    ln_fusion_speedup_largest_p,
    ln_table,
    roofline_points,
)


def plot_roofline(records):
    """Each measured kernel on this device's roofline, built from the measured ceilings."""

    peak = records["ceiling"]["best_flops_per_s"]
    bw = records["bandwidth"]["plateau_bytes_per_s"]
    pts = roofline_points(records)
    xs = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.loglog(xs, np.minimum(peak, xs * bw), color="black", label="roofline (measured ceilings)")
    for row in pts.itertuples():
        ax.loglog(row.intensity_flops_per_byte, row.achieved_flops_per_s, "o", label=row.kernel)
    ax.axvline(peak / bw, color="grey", linestyle=":", linewidth=1)
    label(
        ax,
        x="arithmetic intensity (FLOPs per byte moved)",
        y="achieved FLOP/s",
        title=f"LayerNorm-type kernels sit far left of the ridge ({peak / bw:.0f} FLOP/B): memory-bound",
        legend_fontsize=7,
    )
    return fig


def plot_ln_bars(records):
    """LN + residual + dropout forward time per implementation and dropout p (claim A7)."""

    df = ln_table(records)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    labels = [f"{r.impl}\np={r.dropout_p:g}" for r in df.itertuples()]
    ax.bar(
        range(len(df)),
        df.median_s * 1e3,
        yerr=[(df.median_s - df.q1_s) * 1e3, (df.q3_s - df.median_s) * 1e3],
        capsize=4,
    )
    for i, r in enumerate(df.itertuples()):
        ax.text(
            i,
            r.median_s * 1e3,
            f"{r.fraction_of_measured_bandwidth:.0%} of BW\n{r.kernels} kernels",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(df)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("forward time (ms, median, IQR bars)")
    best = ln_fusion_speedup_largest_p(records)
    ax.set_title(
        f"Fusion: {best['ratio']:.2f}× measured vs {best['predicted']:.2f}× predicted "
        f"(p={best['dropout_p']:g})"
        if best
        else "LN + residual + dropout"
    )
    return fig


def plot_attention(records):
    """Attention time and bytes kept for backward vs sequence length (claim A8)."""

    df = attention_table(records)
    slopes = attention_slopes(records)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for impl, d in df.groupby("impl"):
        axes[0].loglog(d.seq_len, d.median_s * 1e3, "o-", label=impl)
        d2 = d[d.saved_bytes.notna()]
        if len(d2):
            slope = slopes.get(f"{impl}_saved_bytes_slope", float("nan"))
            axes[1].loglog(d2.seq_len, d2.saved_bytes / 2**20, "o-", label=f"{impl} (slope {slope:.2f})")
    axes[0].set_xlabel("sequence length (tokens)")
    axes[0].set_ylabel("forward+backward time (ms)")
    axes[0].set_title("Attention time")
    axes[1].set_xlabel("sequence length (tokens)")
    axes[1].set_ylabel("bytes kept for backward (MiB)")
    axes[1].set_title("Saved memory: O(n²) naive vs O(n) SDPA")
    for ax in axes:
        ax.legend(fontsize=8)
    return fig
