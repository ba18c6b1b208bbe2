"""Figures of the ``recompute`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.studies.recompute.analysis import layer_model_summary, ratio_drift
from mfulab.studykit.plots import label
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.units import MIB


def plot_saved_by_op(df):
    """Bytes kept for backward by one layer under ``none``, by module and op (the outcome's
    ``saved_tensors`` table)."""
    layer0 = df[(df.policy == "none") & (df.layer == 0)].copy()
    layer0["what"] = layer0.module.str.replace("blocks.0.", "", regex=False) + " · " + layer0.op
    g = layer0.groupby("what").bytes.sum().sort_values()
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(g) + 1.2))
    ax.barh(g.index, g.values / MIB)
    ax.set_xlabel("bytes kept for backward (MiB)")
    top = g.index[-1]
    ax.set_title(f"One layer keeps {g.sum() / MIB:.1f} MiB; the largest tensor: {top}")
    return fig


def plot_model_vs_measured(lm):
    """Bytes kept per layer: measured, Table 2 (adapted), Table 2 + the named residual terms;
    one group per policy and per-layer form (``every_k``: its recomputed and its other layers),
    from the outcome's ``layer_model_vs_measured`` table."""
    per = layer_model_summary(lm)
    per["group"] = [
        q if q != "every_k" else f"every_k\nlayer{'s' if '-' in layers else ''} {layers}\n({form})"
        for q, form, layers in zip(per.policy, per.layer_policy, per.layers)
    ]
    per = per.set_index("group")[["measured_bytes", "korthikanti_bytes", "explained_bytes"]]
    long = (per / MIB).reset_index().melt(id_vars="group", var_name="source", value_name="MiB")
    long["source"] = long.source.map(
        {
            "measured_bytes": "measured (saved-tensor hooks)",
            "korthikanti_bytes": "Korthikanti Table 2 (adapted)",
            "explained_bytes": "Table 2 + named residual terms",
        }
    )
    fig, ax = plt.subplots(figsize=(9, 4))
    sns.barplot(data=long, x="group", y="MiB", hue="source", ax=ax)
    worst = lm.korthikanti_rel_error.abs().max()
    label(
        ax,
        x="recompute policy",
        y="bytes kept per layer (MiB)",
        title=f"Table 2 predicts every policy within {worst:.1%} of the exact count",
        legend_fontsize=None,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


def plot_pareto(records, s, full: dict):
    """Memory a step adds vs its time, one marker per policy (median, IQR bars; the outcome's
    ``policy_summary`` table ``s``), named in the legend (labels next to close points
    overlapped), titled with ``full`` (``analysis.full_vs_none``)."""
    fig, ax = plt.subplots(figsize=(7.5, 4))
    markers = "osD^vPX*"
    palette = sns.color_palette("colorblind", len(s))
    for i, row in enumerate(s.itertuples()):
        ax.errorbar(
            row.peak_step_added_bytes / MIB,
            row.step_s,
            yerr=[[row.step_s - row.step_q1_s], [row.step_q3_s - row.step_s]],
            fmt=markers[i % len(markers)],
            color=palette[i],
            markersize=8,
            capsize=3,
            label=row.policy,
        )
    ax.legend(title="policy", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_xlabel(f"memory added by one step, micro-batch {records['base_micro_batch']} (MiB)")
    ax.set_ylabel("forward+backward time (s, median, IQR bars)")
    title = "Memory vs time per policy"
    if full["memory_share"] is not None:
        title = (
            f"Full recompute: {full['memory_share']:.0%} of the memory for "
            f"{full['step_time_ratio']:.2f}× the time"
        )
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_budget(records, bt):
    """tokens/s, MFU and HFU of each policy at its largest micro-batch within the budget (B7;
    the outcome's ``budget`` table ``bt``),
    relative to ``none``, with the tokens/s ratio's interval as whiskers (MFU shares it; HFU's
    is it times the hardware-FLOPs ratio) and each policy's timing verdict under its name."""
    import numpy as np

    drift = ratio_drift(records)
    bt = bt[bt.fits & bt.tokens_per_s_vs_none.notna()].reset_index(drop=True)
    metrics = {
        "tokens/s": ("tokens_per_s_vs_none", 1.0),
        "MFU": ("mfu_vs_none", 1.0),
        "HFU": ("hfu_vs_none", bt.hardware_flops_ratio),
    }
    palette = sns.color_palette("colorblind", len(metrics))
    fig, ax = plt.subplots(figsize=(8.8, 4.4))
    x, width = np.arange(len(bt)), 0.26
    for i, (name, (column, scale)) in enumerate(metrics.items()):
        value = bt[column].astype(float)
        lo, hi = bt.ratio_lo.astype(float) * scale, bt.ratio_hi.astype(float) * scale
        ax.bar(x + (i - 1) * width, value, width, color=palette[i], label=name)
        ax.errorbar(
            x + (i - 1) * width,
            value,
            yerr=[value - lo, hi - value],
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=3,
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(
        x,
        [
            f"{r.policy}\nmb {int(r.micro_batch)}\n{'reference' if r.policy == 'none' else r.verdict}"
            for r in bt.itertuples()
        ],
        fontsize=8,
    )
    ax.set_ylabel("relative to 'none' at its own largest batch (×)")
    budget = records["params"]["memory_budget_mib"]
    ax.set_xlabel(f"policy, its largest micro-batch within {budget} MiB, tokens/s verdict vs none")
    ax.set_title("MFU moves exactly with tokens/s; HFU also counts the recomputed matmuls")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="vs none")
    ax.set_ylim(0, 1.2 * max(1.0, float(bt.ratio_hi.max() * bt.hardware_flops_ratio.max())))
    sac = " sac re-runs no matmul, so its HFU equals its MFU here." if "sac" in set(bt.policy) else ""
    fig.text(
        0.01,
        0.01,
        "Whiskers: the tokens/s ratio's interval (paired rounds, widened by the "
        f"{drift:.0%} run-to-run drift, b7_ratio_drift); HFU's is it × the hardware-FLOPs ratio.\n"
        "Hardware FLOPs are FlopCounterMode's count, which counts matmuls only." + sac,
        fontsize=7.5,
        ha="left",
        va="bottom",
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_plans(plans, chosen):
    """The planner's decision per case: for each policy the micro-batch it would run (the most
    tokens/s that fits the card less the fragmentation margin), its memory per device, and
    the case's chosen policy marked; a policy with nothing that fits shows its smallest
    micro-batch, hatched. One panel per case (device memories differ)."""
    import textwrap

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not len(plans):
        fig, ax = plt.subplots(figsize=(7.5, 3))
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
    cases = list(dict.fromkeys(chosen.case))
    palette = sns.color_palette("colorblind")
    colours = {"decision": palette[2], "fits": palette[0], "no": palette[3]}
    bars = [int((chosen.case == case).sum()) for case in cases]
    fig, axes = plt.subplots(
        1,
        len(cases),
        figsize=(0.5 * sum(bars) + 0.5 * len(cases) + 0.8, 4.6),
        squeeze=False,
        gridspec_kw={"width_ratios": bars},
    )
    for ax, case in zip(axes[0], cases):
        g = chosen[chosen.case == case].reset_index(drop=True)
        kinds = ["decision" if d else "fits" if f else "no" for d, f in zip(g.decision, g.fits)]
        ax.bar(
            range(len(g)),
            g.total_gib,
            color=[colours[k] for k in kinds],
            hatch=["//" if k == "no" else "" for k in kinds],
            edgecolor="black",
            linewidth=0.6,
        )
        for i, (row, kind) in enumerate(zip(g.itertuples(), kinds)):
            ax.text(
                i,
                row.total_gib * 0.97,
                f"mb {int(row.micro_batch)}",
                ha="center",
                va="top",
                fontsize=8,
                color="white",
                fontweight="bold",
                bbox={"facecolor": "black", "alpha": 0.35, "pad": 1, "linewidth": 0}
                if kind == "no"
                else None,
            )
            if kind == "decision":
                ax.annotate(
                    "chosen",
                    (i, row.total_gib),
                    textcoords="offset points",
                    xytext=(0, 3),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    fontweight="bold",
                )
        capacity, usable = g.device_memory_gib.iloc[0], g.usable_gib.iloc[0]
        ax.axhline(capacity, color="black", linestyle="--", linewidth=1)
        ax.axhline(usable, color="black", linestyle=":", linewidth=1.2)
        ax.set_ylim(0, 1.22 * max(capacity, g.total_gib.max()))
        ax.set_xticks(range(len(g)), g.policy, rotation=35, ha="right", fontsize=9)
        ax.set_title(textwrap.fill(f"{case} ({g.attention.iloc[0]} attention)", 18), fontsize=9)
        ax.set_ylabel("memory per device (GiB)" if ax is axes[0][0] else "")
    margin = 1 - usable / capacity
    handles = [
        Patch(
            facecolor=colours["decision"], edgecolor="black", label="chosen plan (most tokens/s that fits)"
        ),
        Patch(facecolor=colours["fits"], edgecolor="black", label="policy's best micro-batch, fits"),
        Patch(
            facecolor=colours["no"],
            edgecolor="black",
            hatch="//",
            label="nothing fits (smallest micro-batch)",
        ),
        Line2D([], [], color="black", linestyle="--", label="device memory"),
        Line2D([], [], color="black", linestyle=":", label=f"usable: device memory − {margin:.0%} margin"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    winners = chosen[chosen.decision].policy.value_counts()
    fig.suptitle(
        f"Planner decision (illustrative: leads inside the step model's ±{SWITCH_MARGIN:.0%} can turn): "
        f"{winners.index[0]} wins in {winners.iloc[0]} of {len(cases)} cases\n"
        "(each bar: a policy at its best micro-batch 'mb'; the step model, chapter 09)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.09, 1, 0.96))
    return fig
