"""Figures of the ``recompute`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from ...plots import label
from .analysis import budget_table, full_vs_none, layer_model_vs_measured, policy_summary, saved_table


def plot_saved_by_op(records):
    """Bytes kept for backward by one layer under ``none``, by module and op."""

    df = saved_table(records)
    layer0 = df[(df.policy == "none") & (df.layer == 0)].copy()
    layer0["what"] = layer0.module.str.replace("blocks.0.", "", regex=False) + " · " + layer0.op
    g = layer0.groupby("what").bytes.sum().sort_values()
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(g) + 1.2))
    ax.barh(g.index, g.values / 2**20)
    ax.set_xlabel("bytes kept for backward (MiB)")
    top = g.index[-1]
    ax.set_title(f"One layer keeps {g.sum() / 2**20:.1f} MiB; the largest tensor: {top}")
    return fig


def plot_model_vs_measured(records):
    """Bytes kept per layer: measured, Table 2 (adapted), Table 2 + the named residual terms."""

    lm = layer_model_vs_measured(records)
    per = lm.groupby("policy")[["measured_bytes", "korthikanti_bytes", "explained_bytes"]].mean() / 2**20
    per = per.reindex([q for q in records["policies"] if q in per.index])
    long = per.reset_index().melt(id_vars="policy", var_name="source", value_name="MiB")
    long["source"] = long.source.map(
        {
            "measured_bytes": "measured (saved-tensor hooks)",
            "korthikanti_bytes": "Korthikanti Table 2 (adapted)",
            "explained_bytes": "Table 2 + named residual terms",
        }
    )
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.barplot(data=long, x="policy", y="MiB", hue="source", ax=ax)
    worst = lm.korthikanti_rel_error.abs().max()
    label(
        ax,
        x="recompute policy",
        y="bytes kept per layer (MiB)",
        title=f"Table 2 predicts every policy within {worst:.1%} of the exact count",
    )
    return fig


def plot_pareto(records):
    """Memory a step adds vs its time, one point per policy (median, IQR bars)."""

    s = policy_summary(records)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for row in s.itertuples():
        ax.errorbar(
            row.peak_step_added_bytes / 2**20,
            row.step_s,
            yerr=[[row.step_s - row.step_q1_s], [row.step_q3_s - row.step_s]],
            fmt="o",
            capsize=3,
        )
        ax.annotate(
            row.policy,
            (row.peak_step_added_bytes / 2**20, row.step_s),
            textcoords="offset points",
            xytext=(5, 5),
            fontsize=9,
        )
    ax.set_xlabel(f"memory added by one step, micro-batch {records['base_micro_batch']} (MiB)")
    ax.set_ylabel("forward+backward time (s, median, IQR bars)")
    full = full_vs_none(records)
    title = "Memory vs time per policy"
    if full["memory_share"] is not None:
        title = (
            f"Full recompute: {full['memory_share']:.0%} of the memory for "
            f"{full['step_time_ratio']:.2f}× the time"
        )
    ax.set_title(title)
    return fig


def plot_budget(records):
    """tokens/s, MFU and HFU of each policy at its largest micro-batch within the budget (B7)."""

    bt = budget_table(records)
    bt = bt[bt.fits & bt.tokens_per_s_vs_none.notna()]
    long = bt.melt(
        id_vars=["policy"],
        value_vars=["tokens_per_s_vs_none", "mfu_vs_none", "hfu_vs_none"],
        var_name="metric",
        value_name="ratio",
    )
    long["metric"] = long.metric.map(
        {"tokens_per_s_vs_none": "tokens/s", "mfu_vs_none": "MFU", "hfu_vs_none": "HFU"}
    )
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.barplot(data=long, x="policy", y="ratio", hue="metric", ax=ax)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("relative to 'none' at its own largest batch (×)")
    budget = records["params"]["memory_budget_mib"]
    ax.set_xlabel(f"policy (each at its largest micro-batch within {budget} MiB)")
    ax.set_title("MFU and tokens/s move together; only HFU counts the recomputation")
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, -0.18), ncol=3)
    return fig


def plot_plans(plans):
    """Planner memory per device at the smallest micro-batch, per case and policy, vs the card."""

    fig, ax = plt.subplots(figsize=(7.5, 4))
    if not len(plans):
        ax.text(
            0.5,
            0.5,
            "no planner cases (parameter planner_cases is empty)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return fig
    best = plans.sort_values("micro_batch").groupby(["case", "policy"]).first().reset_index()
    order = list(dict.fromkeys(best.case))
    sns.barplot(data=best, x="case", y="total_gib", hue="policy", order=order, ax=ax)
    for i, case in enumerate(order):
        capacity = best[best.case == case].device_memory_gib.iloc[0]
        ax.hlines(
            capacity,
            i - 0.45,
            i + 0.45,
            colors="black",
            linestyles="--",
            linewidth=1,
            label="device memory" if i == 0 else None,
        )
    ax.legend(fontsize=8)
    ax.set_ylabel("memory per device at the smallest micro-batch (GiB)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=15)
    ax.set_title("Which policies fit: planner memory per device vs the card (dashed)")
    return fig
