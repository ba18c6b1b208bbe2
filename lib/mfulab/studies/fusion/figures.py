"""Figures of the ``fusion`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from mfulab.studies.fusion import norm_fusion
from mfulab.studies.fusion.bytes_model import copy_roof_factor
from mfulab.studies.fusion.stated import A7_LAYER_SPEEDUP, A7_STATED_TIME_REDUCTION
from mfulab.studykit.plots import label
from mfulab.units import MIB


def plot_roofline(records, pts):
    """Each measured kernel (``pts``: the outcome's ``roofline_points`` table) on this device's roofline,
    built from the measured ceilings. The sub-block's filled marks use the passes over memory it really
    makes; a hollow mark joined to each is the same time at the bytes model's minimum bytes (further
    right: fewer bytes). The DRAM roof is a band: the copy bandwidth counts 2 passes per copied element
    but DRAM serves 3 (write-allocate), so a kernel's own roof lies between 1× (a copy) and 1.5× (reads
    only) of it (``bytes_model.copy_roof_factor``)."""
    roof = norm_fusion.roofs(records)  # timed in the sub-block's rounds (the calibration's otherwise)
    peak, bw = roof["ceiling_flops_per_s"], roof["bandwidth_bytes_per_s"]
    xs = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.loglog(xs, np.minimum(peak, xs * bw), color="black", label="roofline: copy bandwidth, matmul ceiling")
    ax.fill_between(
        xs,
        np.minimum(peak, xs * bw),
        np.minimum(peak, xs * bw * copy_roof_factor(reads=1, writes=0)),
        color="grey",
        alpha=0.25,
        linewidth=0,
        label="DRAM roof with write-allocate: copy (1×)\nto a kernel that only reads (1.5×)",
    )
    hollow = False
    for i, row in enumerate(pts.itertuples()):
        colour = f"C{i % 10}"
        marker = "s" if row.cache_resident else "o"
        passes = f", {row.passes_counted:.0f} passes" if row.passes_counted == row.passes_counted else ""
        ax.loglog(
            row.intensity_flops_per_byte,
            row.achieved_flops_per_s,
            marker,
            color=colour,
            label=f"{row.kernel}{passes}",
        )
        if abs(row.intensity_bytes_model / row.intensity_flops_per_byte - 1) > 1e-9:
            ax.plot(
                [row.intensity_flops_per_byte, row.intensity_bytes_model],
                [row.achieved_flops_per_s] * 2,
                color=colour,
                linewidth=0.8,
            )
            ax.loglog(
                row.intensity_bytes_model,
                row.achieved_flops_per_s,
                marker,
                markerfacecolor="none",
                color=colour,
            )
            hollow = True
    if hollow:  # one grey legend entry for every hollow mark
        ax.plot(
            [],
            [],
            "o",
            markerfacecolor="none",
            color="grey",
            label="hollow: same time, bytes model's minimum",
        )
    ax.axvline(peak / bw, color="grey", linestyle=":", linewidth=1)
    label(
        ax,
        x="arithmetic intensity (FLOPs per byte moved)",
        y="achieved FLOP/s",
        title=f"LayerNorm-type kernels sit far left of the ridge ({peak / bw:.0f} FLOP/B): memory-bound",
        legend_fontsize=None,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # clear of the points
    ax.text(
        0.01,
        0.98,
        "circles (tensors in DRAM) can\nreach into the band, to their own\n"
        "roof; squares (within 4× the last-\nlevel cache) may sit above it",
        transform=ax.transAxes,
        ha="left",
        va="top",
        fontsize=8,
        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"},
    )
    return fig


IMPL_COLOURS = {"naive": "C0", "naive compiled": "C1", "sdpa": "C2"}


def plot_ln_bars(records, t: dict):
    """A7 in two panels: the sub-block in DRAM per implementation and p, with dropout's RNG
    apart; one layer's forward with the unfused, fused (``layer_measured.layer_fused_impl``) and
    a free sub-block, against the time the claim's "30% faster" needs (the outcome's
    ``ln_fusion``, ``ln_dropout_rng`` and ``ln_layer_share`` tables in ``t``)."""
    df = t["ln_fusion"]
    df = df[df.impl.isin(["eager", "compiled", "onepass", "triton"])].reset_index(drop=True)
    base = {(r.shape, r.impl): r.ns_per_element for r in df[df.dropout_p == 0].itertuples()}
    fig, (ax, ax2) = plt.subplots(
        1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1.3, 1]}, layout="constrained"
    )
    # one group of bars per (shape, p), a gap between groups, each group named once under its bars
    groups = list(dict.fromkeys(zip(df["shape"], df.dropout_p)))
    group_of = [groups.index((r.shape, r.dropout_p)) for r in df.itertuples()]
    x = np.arange(len(df)) + 0.6 * np.array(group_of)
    ns = df.ns_per_element.to_numpy()
    ln_part = np.array(
        [min(base.get((r.shape, r.impl), r.ns_per_element), r.ns_per_element) for r in df.itertuples()]
    )
    ax.bar(x, ln_part, color="C0", label="LN + residual (the p = 0 time)")
    ax.bar(x, ns - ln_part, bottom=ln_part, color="C3", label="dropout (RNG and its passes)")
    for i, r in enumerate(df.itertuples()):
        passes = (
            ""
            if r.passes_over_memory is None or np.isnan(r.passes_over_memory)
            else f"{r.passes_over_memory:.0f} passes\n"
        )
        ax.text(
            x[i],
            r.ns_per_element,
            f" {passes}{r.kernels} kernel(s)".replace("\n", ", "),
            ha="center",
            va="bottom",
            fontsize=8,
            rotation=90,
        )
    ax.set_xticks(x)
    ax.set_xticklabels(list(df.impl), fontsize=8, rotation=45, ha="right")
    ax.set_ylim(0, ns.max() * 1.75)
    ln = records["ln"]
    cache = norm_fusion.cache_bytes(ln)
    ws = f"{ln['working_set_bytes'] / MIB:.0f} MiB" + (
        f" ({ln['working_set_bytes'] / cache:.1f}× the {cache / MIB:.0f} MiB cache)" if cache else ""
    )
    shape_names = {"dram": "DRAM-sized", "layer": "one layer's\nactivations"}
    for g, (shape, p) in enumerate(groups):
        centre = x[[i for i, gi in enumerate(group_of) if gi == g]].mean()
        ax.annotate(
            f"{shape_names.get(shape, shape)}\np = {p:g}",
            (centre, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -34),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=8,
        )
    rng = t["ln_dropout_rng"].set_index("impl")
    share = rng.loc["eager", "dropout_share_of_sub_block"] if "eager" in rng.index else float("nan")
    label(
        ax,
        x=f"\n\n\n\nimplementation, per shape and p (DRAM-sized: {ws})",
        y="sub-block time per element (ns, median)",
        title=f"Dropout's RNG is {share:.0%} of the eager sub-block at p = {ln['dropout_p']:g}",
    )
    lt = t["ln_layer_share"].iloc[0]
    unfused = lt.layer_forward_s * 1e3
    sub = lt.sub_block_share * unfused
    fused = unfused / lt.layer_speedup
    bars = {
        "unfused\nsub-block": unfused,
        f"{lt.fused_impl}\nsub-block": fused,
        "free\nsub-block": unfused - sub,
    }
    rest = unfused - sub
    ax2.bar(range(3), [rest] * 3, color="C7", label="rest of the layer")
    ax2.bar(range(3), [v - rest for v in bars.values()], bottom=rest, color="C0", label="sub-block ×2")
    need = unfused / A7_LAYER_SPEEDUP
    ax2.axhline(
        need,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"claim: ≤ {need:.3g} ms ({A7_LAYER_SPEEDUP:.2f}×)",
    )
    ax2.set_xticks(range(3))
    ax2.set_xticklabels(list(bars))
    label(
        ax2,
        x="one layer's forward with",
        y="layer forward time (ms, median)",
        title=f"A free sub-block saves {lt.sub_block_share:.0%}; the claim needs about "
        f"{A7_STATED_TIME_REDUCTION:.0%} (≥ {1 - 1 / A7_LAYER_SPEEDUP:.0%})",
    )
    ax2.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # clear of the bars
    return fig


def _seq_axis(ax, seq_lens):
    """Sequence lengths on a log₂ axis, one plain label per measured length."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(seq_lens))
    ax.set_xticklabels([f"{s:,}" for s in sorted(seq_lens)])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_attention(df, slopes: dict):
    """Attention time and bytes kept for backward vs sequence length (claim A8), from the
    outcome's ``attention`` table and its log-log ``slopes``."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for impl, d in df.groupby("impl"):
        colour = IMPL_COLOURS.get(impl)
        axes[0].plot(d.seq_len, d.median_s * 1e3, "o-", color=colour, label=impl)
        d2 = d[d.saved_bytes.notna()]
        if len(d2) >= 2:
            slope = slopes.get(f"{impl}_saved_bytes_slope", float("nan"))
            axes[1].plot(
                d2.seq_len, d2.saved_bytes / MIB, "o-", color=colour, label=f"{impl} (slope {slope:.2f})"
            )
    for ax in axes:
        _seq_axis(ax, df.seq_len.unique())
        ax.set_yscale("log")
    sdpa_time = slopes.get("sdpa_time_slope", float("nan"))
    naive_time = slopes.get("naive_time_slope", float("nan"))
    label(
        axes[0],
        x="sequence length (tokens)",
        y="forward+backward time (ms)",
        title=f"Time: naive ~T$^{{{naive_time:.1f}}}$, SDPA ~T$^{{{sdpa_time:.1f}}}$",
    )
    label(
        axes[1],
        x="sequence length (tokens)",
        y="bytes kept for backward (MiB)",
        title="Saved memory: O(n²) naive, O(n) SDPA",
    )
    return fig
