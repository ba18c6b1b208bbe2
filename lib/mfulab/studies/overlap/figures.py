"""Figures of the ``overlap`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from ...plots import median_iqr_ms
from .analysis import collectives_table, fitted_alpha_beta, overlap_table


def plot_busbw(records):
    """busbw vs message size per collective, with the fitted link bandwidth (claim B9)."""

    df = collectives_table(records)
    fit = fitted_alpha_beta(records)
    fig, ax = plt.subplots(figsize=(6.8, 4))
    sns.lineplot(data=df, x="size_bytes", y=df.busbw_bytes_per_s / 1e9, hue="op", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.axhline(
        fit["link_bytes_per_s"] / 1e9,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"fitted link B = {fit['link_bytes_per_s'] / 1e9:.2f} GB/s",
    )
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(
        f"Latency-bound below ~{fit['alpha_s'] * fit['link_bytes_per_s'] * 2 / 1e6:.1f} MB, "
        f"bandwidth-bound above (α = {fit['alpha_s'] * 1e6:.0f} µs)"
    )
    ax.legend(fontsize=8)
    return fig


def plot_timeline(records, mode: str = "emulated"):
    """Gantt chart of compute and communication for k = 1 (serial) and the best k (claim A3)."""

    rows = {r["k"]: r for r in records["overlap"]["rows"] if r["mode"] == mode}
    if not rows:
        return None
    best = min(rows, key=lambda k: rows[k]["overlapped_s"])
    ks = [min(rows), best] if best != min(rows) else [min(rows)]
    colors = sns.color_palette()
    fig, axes = plt.subplots(len(ks), 1, figsize=(8, 1.6 * len(ks) + 1), sharex=True, squeeze=False)
    for ax, k in zip(axes[:, 0], ks):
        events = records["overlap"]["timelines"][f"{mode}:{k}"]
        for e in events:
            ax.barh(
                1,
                (e["compute_end_s"] - e["compute_start_s"]) * 1e3,
                left=e["compute_start_s"] * 1e3,
                color=colors[0],
                edgecolor="white",
            )
            if "comm_end_s" in e:
                ax.barh(
                    0,
                    (e["comm_end_s"] - e["comm_start_s"]) * 1e3,
                    left=e["comm_start_s"] * 1e3,
                    color=colors[1],
                    edgecolor="white",
                )
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["all-reduce", "compute" + (" (emulated)" if mode == "emulated" else "")])
        ax.set_title(f"k = {k}: step {rows[k]['overlapped_s'] * 1e3:.0f} ms", fontsize=9)
    axes[-1, 0].set_xlabel("time since step start (ms), rank 0")
    fig.suptitle(f"Serial vs chunked overlap ({mode} compute)", fontweight="bold")
    fig.tight_layout()
    return fig


def plot_step_vs_k(records):
    """Measured step time vs k next to the model and the serial time (claims A3, A5)."""

    ot = overlap_table(records)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, d) in enumerate(ot.groupby("compute")):
        d = d.sort_values("k")
        median_iqr_ms(
            ax,
            d.k,
            d.overlapped_s,
            d.overlapped_q1_s,
            d.overlapped_q3_s,
            color=f"C{i}",
            label=f"measured, {label}",
        )
        ax.plot(d.k, d.model_step_s * 1e3, "--", color=f"C{i}", label=f"model (fitted α–β), {label}")
        ax.plot(
            d.k, d.serial_s * 1e3, ":", color=f"C{i}", alpha=0.6, label=f"serial (compute + comm), {label}"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunks k")
    ax.set_ylabel("step time (ms, median, IQR bars)")
    ax.set_title("Overlap hides communication until per-call cost takes over")
    ax.legend(fontsize=7)
    return fig
