"""Figures of the ``buckets`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.studies.buckets import model_error
from mfulab.studies.buckets.params import stack_dims
from mfulab.studies.buckets.sensitivity import plausible_caps_text
from mfulab.studies.buckets.stated import A6_MFU_POINTS
from mfulab.studykit.plots import median_iqr_ms
from mfulab.studykit.step_error import SWITCH_MARGIN


def plot_sweep(records, sweep, m: dict | None, at_scale=None):
    """Step time vs bucket_cap_mb per compute mode (the outcome's ``sweep`` table: interleaved
    rounds, default flags) with no_sync and the simulator with and without the fitted
    overheads; a third panel shows the simulator's residual per cap. One legend, below the
    panels (no data point under it); the title quotes A6 measured here (``m``,
    ``analysis.a6_measured``) with its regime, set-up latency over the average tensor's transfer
    (``analysis.a6_regime``), and the modelled slowdown at the article's 13B beside it where
    ``at_scale`` (``cluster_scale.per_tensor_table``) is given: a toy ratio never headlines alone."""
    from mfulab.studies.buckets.analysis import a6_regime

    st = sweep[sweep.variant == "default"]
    modes = list(dict.fromkeys(st.compute))
    fig, axes = plt.subplots(
        1, len(modes) + 1, figsize=(4.4 * (len(modes) + 1), 4.8), layout="constrained", squeeze=False
    )
    axes = axes[0]
    res_ax = axes[-1]
    for i, (ax, label) in enumerate(zip(axes, modes)):
        d = st[st.compute == label].sort_values("bucket_cap_mb")
        color = f"C{i}"
        median_iqr_ms(
            ax, d.bucket_cap_mb, d.step_s, d.step_q1_s, d.step_q3_s, color=color, label=f"DDP step, {label}"
        )
        for column, style, what in (
            ("no_sync_s", ":", "no_sync (no communication)"),
            ("simulated_step_s", "--", "simulator, calibration's α–β"),
            ("simulated_fitted_step_s", "-.", "simulator + fitted overheads"),
        ):
            ax.plot(d.bucket_cap_mb, d[column] * 1e3, style, color="0.35", label=what)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("bucket_cap_mb (MiB)")
        ax.set_ylabel("step time (ms; median, IQR bars)")
        layers, hidden, rows = stack_dims(records["params"], d["mode"].iloc[0])
        ax.set_title(f"{label}: {layers} layers of {hidden}², {rows} rows", fontsize=10)
        for column, marker, fill in (("residual", "o", "none"), ("residual_fitted", "s", color)):
            res_ax.plot(
                d.bucket_cap_mb,
                d[column] * 100,
                marker=marker,
                linestyle="--" if column == "residual" else "-",
                color=color,
                markerfacecolor=fill,
                label=f"residual, {label}: {'α–β alone' if column == 'residual' else '+ fitted overheads'}",
            )
    res_ax.axhline(0, color="0.3", linewidth=0.8)
    res_ax.set_xscale("log")
    res_ax.set_xlabel("bucket_cap_mb (MiB)")
    res_ax.set_ylabel("measured / simulated − 1 (%)")
    res_ax.set_title("simulator's residual per cap")
    legend = {}  # the grey lines once, each panel's DDP step, the residuals
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(text, handle)
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncol=4, fontsize=8)
    fits = model_error.fits(records)
    title = []
    if m:
        regime = a6_regime(records)
        line = (
            f"One bucket per tensor: {m['per_tensor'].ratio:.1f}× the fastest cap's step here (real "
            f"compute), where a call's set-up latency is {regime['ratio']:.0f}× its transfer"
        )
        if at_scale is not None and len(at_scale):
            stated = at_scale[at_scale.accumulation == at_scale.accumulation.iloc[0]]
            line += (
                f";\nat the article's 13B (TP {stated.tp.iloc[0]}, DP {stated.dp.iloc[0]}), modelled: "
                + ", ".join(f"{r.slowdown:.2f}× ({r.algorithm})" for r in stated.itertuples())
            )
        title.append(line)
    if fits:
        title.append(
            "the α–β simulator misses DDP's work per bucket, fitted: "
            + ", ".join(f"{f['per_bucket_overhead_s'] * 1e6:.0f} µs ({mode})" for mode, f in fits.items())
        )
    fig.suptitle(";\n".join(title), fontweight="bold")
    return fig


def scale_title(best) -> str:
    """The heat map's take-away, from the simulated best caps and the spread over the
    plausible caps at the largest card count, over the layouts that fit memory (all, where
    none does), with the step model's error beside the best cap."""
    n = int(best.world_size.max())
    big = best[best.world_size == n]
    if "fits" in big and big.fits.any():
        big = big[big.fits.astype(bool)]
    if "best_caps_mib" in big:  # the caps that tie for the best, as the cells print them
        caps = " / ".join(dict.fromkeys(str(c) for c in big.best_caps_mib)) + " MiB"
    else:
        lo, hi = big.bucket_cap_mb.min(), big.bucket_cap_mb.max()
        caps = f"{lo:g} MiB" if lo == hi else f"{lo:g}–{hi:g} MiB"
    where = (
        f"the simulator's best caps {caps}, outside the article's 20–40 MB in this case"
        if not big.in_20_40_mb.any()
        else f"a best cap in the article's 20–40 MB for {', '.join(big.preset[big.in_20_40_mb])}"
    )
    device = f" {best.device.iloc[0]}" if "device" in best else ""
    return (
        f"At {n}{device} cards (layouts that fit): {where} (a ranking inside the step model's "
        f"±{SWITCH_MARGIN:.0%});\nthe cap moves MFU by "
        f"{big.spread_points.min():.1f}–{big.spread_points.max():.1f} "
        f"points over {plausible_caps_text()} (article: {A6_MFU_POINTS[0]:g}–{A6_MFU_POINTS[1]:g})"
    )


def plot_scale_heatmap(best):
    """Per (model at its stated TP, cards): how far the cap moves MFU over the plausible caps
    (the colour, one sequential scale, max − min in points), the simulated best cap (a range
    where caps tie) and its gain over 25 MiB; ``best`` is the outcome's ``best_caps`` table."""
    best = best.assign(model=[f"{r.preset} (TP {r.tp})" for r in best.itertuples()])
    models = list(dict.fromkeys(best.model))  # smallest model first (scale_table's order)

    def grid(column):
        return best.pivot(index="model", columns="world_size", values=column).loc[models]

    spread, gain, caps = grid("spread_points"), grid("gain_vs_25") * 100, grid("best_caps_mib")
    annot = (
        spread.map(lambda s: f"spread {s:.1f} pt")
        + "\nbest "
        + caps.map(lambda c: f"{c} MiB")
        + "\n"
        + gain.map(lambda g: f"+{g:.1f} pt vs 25 MiB")
    )
    lo, hi = A6_MFU_POINTS
    # a layout whose model states do not fit the card is no bucket tuning case: left blank, labelled
    fits = grid("fits").astype(bool) if "fits" in best else spread.notna()
    memory = grid("memory_gib") if "memory_gib" in best else None
    fig, ax = plt.subplots(figsize=(9, 4.6))
    sns.heatmap(
        spread,
        mask=~fits,
        annot=annot,
        fmt="",
        cmap="Blues",
        vmin=0,
        vmax=max(hi, float(spread.max().max())),  # the scale reaches the article's figure
        annot_kws={"fontsize": 8},
        cbar_kws={"label": f"MFU spread over caps {plausible_caps_text()}\n(points; article: {lo:g}–{hi:g})"},
        ax=ax,
    )
    ax.collections[0].colorbar.ax.axhspan(lo, hi, fill=False, hatch="//", edgecolor="0.3", linewidth=0)
    for i, model in enumerate(models):
        for j, cards in enumerate(spread.columns):
            if not fits.loc[model, cards]:
                gib = f"\n{memory.loc[model, cards]:.0f} GiB/card" if memory is not None else ""
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    f"no fit (DDP){gib}",
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="0.4",
                )
    ax.grid(False)
    ax.set_xlabel(
        "cards (data-parallel ranks = cards ÷ TP); the global batch is fixed, so fewer cards accumulate\n"
        "more micro-batches per step and hide more of the reduction: accumulation drives the trend",
        fontsize=8,
    )
    ax.set_ylabel("model at the articles' TP")
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(scale_title(best), fontsize=10)
    fig.tight_layout()
    return fig
