"""Figures of the ``buckets`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from ...plots import median_iqr_ms
from .analysis import best_caps, scale_table, sweep_table


def plot_sweep(records):
    """Step time vs bucket_cap_mb (real sweep, default flags), no_sync and the simulator."""

    st = sweep_table(records)
    st = st[st.variant == "default"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, d) in enumerate(st.groupby("compute")):
        d = d.sort_values("bucket_cap_mb")
        median_iqr_ms(
            ax, d.bucket_cap_mb, d.step_s, d.step_q1_s, d.step_q3_s, color=f"C{i}", label=f"DDP step, {label}"
        )
        for column, style, what in (
            ("no_sync_s", ":", "no_sync (no communication)"),
            ("simulated_step_s", "--", "simulator"),
        ):
            ax.plot(d.bucket_cap_mb, d[column] * 1e3, style, color=f"C{i}", label=f"{what}, {label}")
    ax.set_xscale("log")
    ax.set_xlabel("bucket_cap_mb (MiB)")
    ax.set_ylabel("step time (ms, median, IQR bars)")
    ax.set_title("Tiny buckets pay a latency per call; one big bucket starts late")
    ax.legend(fontsize=7)
    return fig


def plot_scale_heatmap(records):
    """Simulated best cap per (model, ranks), annotated with the MFU points the cap moves."""

    best = best_caps(scale_table(records))
    grid = best.pivot(index="preset", columns="world_size", values="bucket_cap_mb")
    spread = best.pivot(index="preset", columns="world_size", values="mfu_spread") * 100
    annot = grid.map(lambda v: f"{v:g}") + "\n±" + spread.map(lambda v: f"{v:.1f}pt")
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.heatmap(
        np.log2(grid), annot=annot, fmt="", cmap="viridis", cbar_kws={"label": "log2 best cap (MiB)"}, ax=ax
    )
    ax.set_xlabel("data-parallel ranks")
    ax.set_ylabel("")
    ax.set_title("Simulated best bucket_cap_mb (and the MFU it moves), stated interconnect")
    return fig
