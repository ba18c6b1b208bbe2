"""Figures of the ``buckets`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from ...plots import median_iqr_ms
from .analysis import a6_measured, best_caps, scale_table, sweep_table
from .stated import A6_MFU_POINTS


def plot_sweep(records):
    """Step time vs bucket_cap_mb (interleaved rounds, default flags), no_sync and the simulator."""

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
    m = a6_measured(records)
    if m:
        ax.set_title(
            f"One bucket per tensor: {m['per_tensor'].ratio:.1f}× the step of the best cap "
            f"({m['best']:g} MiB), real compute"
        )
    ax.legend(fontsize=7)
    return fig


def scale_title(best) -> str:
    """The heat map's take-away, from the simulated best caps at the largest rank count."""
    n = int(best.world_size.max())
    big = best[best.world_size == n]
    gains = big.gain_vs_25 * 100
    where = (
        f"best cap {big.bucket_cap_mb.min():g}–{big.bucket_cap_mb.max():g} MiB, not the article's 20–40 MB"
        if not big.in_20_40_mb.any()
        else f"a best cap in the article's 20–40 MB for {', '.join(big.preset[big.in_20_40_mb])}"
    )
    return (
        f"At {n} ranks: {where};\nit beats 25 MiB by {gains.min():.1f}–{gains.max():.1f} MFU points "
        f"(article: {A6_MFU_POINTS[0]:g}–{A6_MFU_POINTS[1]:g})"
    )


def plot_scale_heatmap(records):
    """Simulated best cap per (model, ranks; a range where caps tie) and its MFU gain over
    25 MiB (the colour, one sequential scale)."""

    best = best_caps(scale_table(records))
    models = list(dict.fromkeys(best.preset))  # smallest model first (scale_table's order)
    gain = best.pivot(index="preset", columns="world_size", values="gain_vs_25").loc[models] * 100
    caps = best.pivot(index="preset", columns="world_size", values="best_caps_mib").loc[models]
    annot = caps.map(lambda c: f"{c} MiB") + "\n" + gain.map(lambda g: f"+{g:.1f} pt")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    sns.heatmap(
        gain,
        annot=annot,
        fmt="",
        cmap="Blues",
        vmin=0,
        cbar_kws={"label": "MFU gain of the best cap\nover 25 MiB (points)"},
        ax=ax,
    )
    ax.set_xlabel("data-parallel ranks")
    ax.set_ylabel("model (smallest first)")
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(scale_title(best))
    return fig
