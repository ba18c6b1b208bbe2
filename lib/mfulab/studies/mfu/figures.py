"""Figures of the ``mfu`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.studies.mfu.time_split import EXACT, exact_count_ratio, waterfall_losses


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


def plot_waterfall(records, b: dict):
    """Peak → ceiling → achieved model FLOP/s with each loss labelled (claim B2): its FLOP/s
    and its share of the top bar, so that losses too thin to see are still read off (``b``: the
    outcome's ``time_split.breakdown``)."""

    from mfulab.studykit.plots import waterfall

    w = waterfall_losses(records, b)
    slow_share = dict(w["losses"])["slow operators"] / w["start"][1]
    fig, ax = plt.subplots(figsize=(10, 4.4))
    top = "the peak" if b["datasheet_flops_per_s"] else "the ceiling"
    waterfall(
        ax, w["start"], w["losses"], w["end"][0], totals={"slow operators": "achieved (local)"}, share_of=top
    )
    first = (
        f"Slow operators cost {slow_share:.0%} of {top}"
        if slow_share >= 0
        else f"The model computes {-slow_share:.0%} faster than {top} (not a ceiling: too small a sweep)"
    )
    ax.set_title(
        f"{first}; the whole job reaches {b['global_mfu_vs_ceiling']:.0%} of the ceiling "
        + ("timed in this process\n" if b["ceiling_source"] == "in-process" else "measured\n")
        + f"(global MFU, {b['convention']} FLOPs"
        + (
            f"; {b['global_mfu_vs_ceiling'] / exact_count_ratio(records, b['convention']):.0%} by the "
            "exact count)"
            if b["convention"] != EXACT
            else ")"
        )
    )
    return fig


# a stacked bar category thinner than this share of the tallest step is not visible (< 1 pixel)
VISIBLE_SHARE_OF_STEP = 0.005


def plot_step_timeline(records, b: dict):
    """Each step's phases as stacked bars (seconds). The legend names only the phases that are
    drawn; those too thin to see are listed beside it with their largest value (``b``: the
    outcome's ``time_split.breakdown``)."""

    rows = records["train"]["rows"]
    steps = [r["step"] for r in rows]
    colors = sns.color_palette()
    fig, ax = plt.subplots(figsize=(8.5, 3.5))
    tallest_s = max(r["data_s"] + r["compute_s"] + r["other_s"] for r in rows)
    bottom = [0.0] * len(rows)
    hidden = []
    for key, label, color in (
        ("data_s", "data wait", colors[1]),
        ("compute_s", "forward+backward+optimizer", colors[0]),
        ("other_s", "loss read-back (loss.item())", colors[3]),
    ):
        vals = [r[key] for r in rows]
        drawn = max(vals) >= VISIBLE_SHARE_OF_STEP * tallest_s
        ax.bar(steps, vals, bottom=bottom, label=label if drawn else "_nolegend_", color=color)
        if not drawn:
            hidden.append(f"{label}: ≤ {max(vals) * 1e3:.2g} ms per step")
        bottom = [b + v for b, v in zip(bottom, vals)]
    warm = records["train"]["warmup_steps"]
    if warm:
        ax.axvspan(-0.5, warm - 0.5, color="grey", alpha=0.15, label="warm-up (left out of steady state)")
    ax.xaxis.set_major_locator(plt.matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("time (s)")
    ax.set_title(
        f"Forward+backward+optimizer is {b['compute_s'] / b['job_wall_s']:.1%} of the job's wall clock"
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if hidden:
        ax.text(
            1.02,
            0.0,
            "too thin to see:\n" + "\n".join(hidden),
            transform=ax.transAxes,
            fontsize=8,
            va="bottom",
            ha="left",
        )
    return fig


def plot_operator_steps(records):
    """Each profiled step's wall time as a stacked bar of its operator categories (ms); the
    legend lists only categories that are drawn, with their share of the steps."""
    from mfulab.measure import opprofile

    prof = records["op_profile"]
    shares = opprofile.category_shares(prof)
    colors = dict(zip(prof["categories"], sns.color_palette("tab10", len(prof["categories"]))))
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    x = [f"step {s['step']}" for s in prof["steps"]]
    bottom = [0.0] * len(x)
    for c in prof["categories"]:
        vals = [s["categories_s"][c] * 1e3 for s in prof["steps"]]
        if shares[c] == 0:
            continue
        ax.bar(x, vals, bottom=bottom, color=colors[c], label=f"{c} ({shares[c]:.1%})")
        bottom = [b + v for b, v in zip(bottom, vals)]
    top = max(shares, key=shares.get)
    ax.set_ylabel("time (ms)")
    ax.set_xlabel(f"profiled step ({prof['source'].replace(' (', ', ').removesuffix(')')})")
    ax.set_title(
        f"{top.capitalize()} takes {shares[top]:.0%} of a profiled step; the bars sum to its wall time"
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def plot_operator_waterfall(records, b: dict):
    """Peak → ceiling → achieved model FLOP/s, each loss a measured operator category (claim
    B2's losses inside a step), labelled with its FLOP/s and its share of the top bar (``b``:
    the outcome's ``time_split.breakdown``)."""
    from mfulab.studies.mfu.operator_split import largest_losses, operator_waterfall_losses
    from mfulab.studykit.plots import waterfall

    w = operator_waterfall_losses(records, b=b)
    top = "the peak" if b["datasheet_flops_per_s"] else "the ceiling"
    big = largest_losses(records, b)
    (name1, v1), (name2, v2) = big["first"], big["second"]
    share = w["start"][1]
    lead = (
        f"The largest loss is {name1} ({v1 / share:.0%} of {top})"
        if big["clear"]
        else f"The two largest losses, {name1} and {name2}, trade places between profiled steps "
        f"({v1 / share:.0%} and {v2 / share:.0%} of {top})"
    )
    exact = b["global_mfu_vs_ceiling"] / exact_count_ratio(records, b["convention"])
    fig, ax = plt.subplots(figsize=(10, 5.2))
    waterfall(
        ax,
        w["start"],
        w["losses"],
        w["end"][0],
        totals={w["subtotal_after"]: "achieved (steady step)"},
        share_of=top,
    )
    ax.set_title(
        f"{lead}; the job reaches {b['global_mfu_vs_ceiling']:.0%} of the ceiling "
        + ("timed in this process" if b["ceiling_source"] == "in-process" else "measured")
        + "\n(global MFU, "
        f"{b['convention']} FLOPs"
        + (f", {exact:.0%} by the exact count" if b["convention"] != EXACT else "")
        + "; losses from the operator profile)"
    )
    return fig


def plot_framework_departures(framework_df):
    """Each framework's FLOPs per token over the exact count, per preset (log scale: applied to
    a MoE's total parameters, nanoGPT's formula is many times the work)."""
    df = framework_df.assign(ratio=1 + framework_df.vs_exact)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    sns.barplot(data=df, x="preset", y="ratio", hue="framework", ax=ax)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xlabel("model (published configuration)")
    ax.set_ylabel("printed FLOPs per token / exact count (×)")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(ncol=3, fontsize=8)
    worst = df.loc[df.ratio.idxmax()]
    ax.set_title(
        f"The same token, six counts: up to {worst.ratio:.1f}× the exact work "
        f"({worst.framework}, {worst.preset})"
    )
    return fig


def plot_shape_sweep(table, *, d_model: int, seq_len: int):
    """The shape sweep (``shape_sweep.sweep_table``): left, MFU and the weight GEMMs' rate against
    the width at the run's sequence length; right, the attention core's share of the work and of
    the time against the sequence length at the run's width. Both over the ceiling timed in the
    training process, the model's work by the mask-aware exact count."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.0))
    wide = table[table.seq_len == seq_len].sort_values("d_model")
    left.plot(wide.d_model, 100 * wide.mfu_exact, "o-", label="MFU of the step")
    left.plot(wide.d_model, 100 * wide.gemm_share_of_ceiling, "s--", label="weight GEMMs alone")
    left.set_xscale("log", base=2)
    left.set_xticks(list(wide.d_model), [str(v) for v in wide.d_model])
    left.set_xlabel(f"d_model (seq_len {seq_len}, tokens per step fixed)")
    left.set_ylabel("% of the ceiling timed in this process")
    left.set_ylim(0, 110)
    left.legend(loc="lower right")
    long = table[table.d_model == d_model].sort_values("seq_len")
    right.plot(
        long.seq_len, 100 * long.attention_share_of_flops, "o-", label="attention core: share of the work"
    )
    right.plot(
        long.seq_len, 100 * long.attention_share_of_time, "s--", label="attention core: share of the time"
    )
    right.plot(long.seq_len, 100 * long.mfu_exact, "^:", label="MFU of the step")
    right.set_xscale("log", base=2)
    right.set_xticks(list(long.seq_len), [str(v) for v in long.seq_len])
    right.set_xlabel(f"seq_len (d_model {d_model}, tokens per step fixed)")
    right.set_ylabel("%")
    right.set_ylim(0, 110)
    right.legend(loc="upper left", fontsize=9)
    first, last = wide.iloc[0], wide.iloc[-1]
    short, longest = long.iloc[0], long.iloc[-1]
    fig.suptitle(
        f"MFU {100 * first.mfu_exact:.0f}% at d_model {int(first.d_model)} → {100 * last.mfu_exact:.0f}% at "
        f"{int(last.d_model)}; the attention core's share of the time "
        f"{100 * short.attention_share_of_time:.0f}% at seq_len {int(short.seq_len)} → "
        f"{100 * longest.attention_share_of_time:.0f}% at {int(longest.seq_len)}"
    )
    fig.tight_layout()
    return fig
