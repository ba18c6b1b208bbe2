"""Figures of the ``mfu`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from .timesplit import breakdown, waterfall_losses


def plot_attention_share(conventions_df):
    """Attention share of model FLOPs vs sequence length, one line per preset (palm)."""

    df = conventions_df[conventions_df.convention == "palm"]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    sns.lineplot(data=df, x="seq_len", y="attention_share", hue="preset", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.yaxis.set_major_formatter(plt.matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("attention matmuls / model FLOPs (palm)")
    ax.set_title("6N misses more of the work as T grows, most for narrow models")
    return fig


def plot_waterfall(records):
    """Peak → ceiling → achieved model FLOP/s with each loss labelled (claim B2)."""

    from ...plots import waterfall

    w = waterfall_losses(records)
    b = breakdown(records)
    slow_share = dict(w["losses"])["slow operators"] / w["start"][1]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    top = "the peak" if b["datasheet_flops_per_s"] else "the ceiling"
    waterfall(
        ax, w["start"], w["losses"], w["end"][0], totals={"slow operators": "achieved (local)"}, share_of=top
    )
    ax.set_title(
        f"Slow operators cost {slow_share:.0%} of {top}; the job reaches {b['global_mfu_vs_ceiling']:.0%} "
        f"of the measured ceiling (global MFU, {b['convention']} FLOPs)"
    )
    return fig


def plot_step_timeline(records):
    """Each step's phases as stacked bars (seconds)."""

    rows = records["train"]["rows"]
    steps = [r["step"] for r in rows]
    colors = sns.color_palette()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bottom = [0.0] * len(rows)
    for key, label, color in (
        ("data_s", "data wait", colors[1]),
        ("compute_s", "forward+backward+optimizer", colors[0]),
        ("other_s", "other (loss read-back, bookkeeping)", colors[3]),
    ):
        vals = [r[key] for r in rows]
        ax.bar(steps, vals, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    warm = records["train"]["warmup_steps"]
    if warm:
        ax.axvspan(-0.5, warm - 0.5, color="grey", alpha=0.15, label="warm-up")
    b = breakdown(records)
    ax.set_xlabel("step")
    ax.set_ylabel("time (s)")
    ax.set_title(
        f"Forward+backward+optimizer is {b['compute_s'] / b['job_wall_s']:.0%} of the job's wall clock"
    )
    ax.legend(fontsize=8, loc="lower right")
    return fig
