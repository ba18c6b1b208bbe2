"""Figures of the ``dataloader`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from .analysis import best_warm_setting, sweep_table


def plot_throughput(records):
    """Samples/s per format and loader setting, warm and cold (log scale)."""

    sw = sweep_table(records)
    sw = sw.assign(
        setting=[
            f"{'cold' if c == 'cold' else w} {'(persistent)' if pers else ''}".strip()
            for c, w, pers in zip(sw.cache, sw.num_workers, sw.persistent_workers)
        ]
    )
    fig, ax = plt.subplots(figsize=(8, 4))
    sns.barplot(data=sw, x="format", y="samples_per_s", hue="setting", errorbar=("pi", 50), ax=ax)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (median of epochs, bars: IQR)")
    ax.set_xlabel("")
    best = best_warm_setting(records)
    ax.set_title(
        f"{best.idxmax()} reads {best.max() / best.min():.1f}× faster than {best.idxmin()} "
        "(warm, best setting of each)"
    )
    ax.legend(fontsize=7, title="num_workers / cache")
    return fig


def plot_stall(records):
    """Per-step timeline (wait, compute, checkpoint) per loader; real and emulated compute
    in separate panels (their time scales differ by orders of magnitude)."""

    groups = {}
    for run in records["stall"]:
        groups.setdefault(run["compute"], []).append(run)
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 0.4 * len(records["stall"]) + 2), squeeze=False)
    for ax, (compute, runs) in zip(axes[:, 0], groups.items()):
        for i, run in enumerate(runs):
            steps = run["steps"]
            starts = np.cumsum([0] + [s["step_s"] for s in steps[:-1]])
            for t0, s in zip(starts, steps):
                ax.barh(i, s["wait_s"] * 1e3, left=t0 * 1e3, color="C3")
                ax.barh(i, s["compute_s"] * 1e3, left=(t0 + s["wait_s"]) * 1e3, color="C0")
                if s["checkpoint_s"]:
                    ax.barh(
                        i, s["checkpoint_s"] * 1e3, left=(t0 + s["wait_s"] + s["compute_s"]) * 1e3, color="C2"
                    )
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels([f"{r['format']} ({r['num_workers']} workers)" for r in runs], fontsize=8)
        ax.set_title(compute, fontsize=9)
    axes[-1, 0].set_xlabel("time (ms): red = waiting for data, blue = compute, green = checkpoint write")
    fig.suptitle("When data arrives relative to each training step", fontweight="bold")
    fig.tight_layout()
    return fig
