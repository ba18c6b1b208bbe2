"""Figures of the ``overlap`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.studies.overlap.analysis import timing
from mfulab.studykit.plots import median_iqr_ms
from mfulab.units import GB, MB


def _chunk_axis(ax, ks, label="chunks k"):
    """A log2 x-axis of chunk counts with the counts themselves as tick labels."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel(label)


def plot_busbw(df, fit: dict, crossover_bytes: float, llc_bytes: int | None = None):
    """busbw vs message size per collective (the outcome's ``collectives`` table), with the
    calibration's link bandwidth ``fit`` (claim B9), the size ``crossover_bytes`` below which
    a call is latency-bound (both ``outcome.values``) and, on a CPU, the host's last-level cache
    ``llc_bytes`` (the records'): left of it a call's buffers stay cache-resident."""
    fig, ax = plt.subplots(figsize=(6.8, 4))
    sns.lineplot(data=df, x="size_bytes", y=df.busbw_bytes_per_s / GB, hue="op", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    if llc_bytes:
        ax.axvline(
            llc_bytes,
            color="grey",
            linestyle=":",
            linewidth=1,
            label="host-reported last-level cache (a VM's share is smaller; beyond the largest message)"
            if llc_bytes > df.size_bytes.max()
            else "host-reported last-level cache (a VM's share is smaller)",
        )
    ax.axhline(
        fit["link_bytes_per_s"] / GB,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"all-reduce B = {fit['link_bytes_per_s'] / GB:.2f} GB/s (calibration)",
    )
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(
        f"All-reduce latency-bound below ~{crossover_bytes / MB:.1f} MB, "
        f"bandwidth-bound above (α = {fit['alpha_s'] * 1e6:.0f} µs)",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def drawn_step_s(records, mode: str, k: int) -> tuple[float, str]:
    """The step time of the one step a timeline panel draws and whose it is: recorded with
    it (the slowest rank's), or, in records from before that, where rank 0's last compute or
    all-reduce ends."""
    key = f"{mode}:{k}"
    recorded = records["overlap"].get("timeline_step_s", {}).get(key)
    if recorded is not None:
        return recorded, "slowest rank"
    events = records["overlap"]["timelines"][key]
    return max(
        (e.get(f, 0.0) for e in events for f in ("compute_end_s", "comm_end_s")), default=0.0
    ), "rank 0"


def plot_timeline(records, mode: str, best: int | None):
    """Gantt chart of compute and communication for k = 1 (serial) and a chunked k (``best``:
    A3's fixed ``stated.A3_K``, or the run's best k where that k was not measured): each panel is
    one example step, labelled
    with its own step time beside the median of the timed rounds; the title's take-away comes
    from the medians."""

    ks_measured = sorted({r["k"] for r in records["overlap"]["rows"] if r["mode"] == mode})
    if not ks_measured:
        return None
    if best is not None and best not in ks_measured:
        best = ks_measured[-1]
    ks = [ks_measured[0]] + ([best] if best is not None and best != ks_measured[0] else [])
    colors = sns.color_palette()
    rounds = records["overlap"]["rounds"]
    fig, axes = plt.subplots(len(ks), 1, figsize=(8, 1.7 * len(ks) + 1.2), sharex=True, squeeze=False)
    for ax, k in zip(axes[:, 0], ks):
        for e in records["overlap"]["timelines"][f"{mode}:{k}"]:
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
        median_ms = timing(records, mode, k, "overlapped").median_s * 1e3
        step_s, whose = drawn_step_s(records, mode, k)
        ax.set_title(
            f"k = {k}: this step {step_s * 1e3:.1f} ms ({whose}); "
            f"median of the {rounds} timed rounds {median_ms:.1f} ms",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("time since step start (ms), rank 0")
    serial_ms = timing(records, mode, ks[0], "overlapped").median_s * 1e3
    if len(ks) > 1:
        chunked_ms = timing(records, mode, ks[-1], "overlapped").median_s * 1e3
        verb = "overlap the all-reduce with compute" if chunked_ms < serial_ms else "do not shorten the step"
        title = (
            f"{ks[-1]} chunks {verb}: median step {serial_ms:.1f} → {chunked_ms:.1f} ms\n"
            f"over {rounds} rounds ({mode} compute); each panel is one example step"
        )
    else:
        title = (
            f"Serial step: compute, then the all-reduce (median {serial_ms:.1f} ms, {mode} compute);\n"
            "the panel is one example step"
        )
    fig.suptitle(title, fontweight="bold", fontsize=11)
    fig.tight_layout()
    return fig


def plot_step_vs_k(ot, a3: dict):
    """Measured step time vs k next to the model and compute + communication (claims A3, A5),
    from the outcome's overlap table and A3 per compute mode (``analysis.a3_outcome``)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
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
        # the model shares nothing between compute and communication: on real compute it is the
        # ideal engine's step, not a prediction of the measured one
        ideal = " (ideal engine)" if label.startswith("real") else ""
        ax.plot(
            d.k, d.model_step_s * 1e3, "--", color=f"C{i}", label=f"model (calibrated α–β){ideal}, {label}"
        )
        ax.plot(
            d.k,
            d.compute_plus_comm_s * 1e3,
            ":",
            color=f"C{i}",
            alpha=0.6,
            label=f"compute only + comm only, {label}",
        )
    _chunk_axis(ax, sorted(set(ot.k)))
    ax.set_ylabel("step time (ms, median, IQR bars)")
    shares = list(a3.items())
    recovered = ", ".join(
        f"{m} {o['recovered_share']:.0%} (k = {o['k']})"
        if o["recovered_share"] == o["recovered_share"]
        else f"{m}: none possible"
        for m, o in shares
        if o
    )
    ax.set_title(
        "Share of the possible saving (serial → max(compute, comm)) recovered at A3's k, "
        "fixed before the run:\n" + recovered
        if recovered
        else "Step time vs chunks: measured and the α–β model",
        fontsize=10,
    )
    ax.legend(fontsize=7)
    return fig


def plot_comm_vs_k(d, g: dict | None, iv: dict | None = None):
    """Communication time per step vs k (the outcome's ``comm_per_step`` table): measured, and
    this run's α–β split into the per-call part k·2(n−1)α and the bandwidth part, titled with
    A5's gap ``g`` (``analysis.a5_gap``) and, where the run has it, what the intervention measured
    (``iv``: ``a5_intervention.a5_intervention``)."""
    first = d[d["mode"] == d["mode"].iloc[0]].sort_values("k")
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.plot(first.k, first.comm_only_pooled_s * 1e3, "o-", color="C0", label="measured: all-reduces alone")
    for i, (mode, dm) in enumerate(d.groupby("mode")):
        if "in_flight_s" in dm:
            dm = dm.sort_values("k")
            ax.plot(
                dm.k,
                dm.in_flight_s * 1e3,
                "s-",
                color=f"C{i + 1}",
                alpha=0.8,
                label=f"measured: in flight, {mode}",
            )
    ax.plot(
        first.k, first.predicted_total_s * 1e3, "k--", label="α–β model: k·2(n−1)α + S·bus/B (calibration)"
    )
    ax.plot(first.k, first.predicted_latency_part_s * 1e3, "k:", label="of which per-call cost k·2(n−1)α")
    ax.axvspan(4, 16, color="0.9", zorder=0)
    _chunk_axis(ax, list(first.k), "chunks k (shaded: the claim's 4 → 16)")
    ax.set_yscale("log")
    ax.set_ylabel("communication time per step (ms, median)")
    if g and g["gap_s"] > 0:
        title = (
            f"{g['k_a']} → {g['k_b']} chunks: +{g['gap_s'] * 1e3:.1f} ms per step; "
            + (
                f"{iv['calls']} one-element calls cost {iv['share']:.0%} of the gap in A5's rounds "
                "(measured), "
                f"2(n−1)α predicts {g['alpha_share']:.0%}"
                if iv
                else f"{g['alpha_share']:.0%} of it the per-call cost 2(n−1)α"
            )
            + ";\nthe lines: the sweep's own rounds (pooled medians, other rounds of the same job)"
        )
    else:
        title = "Communication per step vs chunks: measured and the α–β model"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_a18_sweep(d):
    """A18: the exposed communication share against compute ÷ communication (the outcome's
    ``a18_sweep`` table), serial and chunked, with the article's 10% and 25% lines."""
    from mfulab.studies.overlap.exposed_share import GOOD_SHARE, ROOM_SHARE

    if not len(d):
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for k, g in d.groupby("k"):
        g = g.sort_values("compute_over_comm")
        label = "serial (k = 1)" if k == 1 else f"chunked (k = {k})"
        ax.plot(g.compute_over_comm, 100 * g.exposed_share, marker="o", label=label)
    for share, text in (
        (GOOD_SHARE, "article: good overlap below"),
        (ROOM_SHARE, "article: room left above"),
    ):
        ax.axhline(100 * share, color="grey", linestyle="--", linewidth=1)
        ax.text(d.compute_over_comm.min(), 100 * share + 1, f"{text} {share:.0%}", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ratios = sorted(d.compute_over_comm.unique())
    ax.set_xticks(ratios, [f"{r:g}" for r in ratios])
    ax.minorticks_off()
    ax.set_xlabel("compute ÷ communication (emulated compute, × the one-shot all-reduce)")
    ax.set_ylabel("exposed communication (% of the step)")
    ax.set_ylim(0, 100)
    ax.set_title("A18: one overlap's exposed share across compute ÷ comm ratios", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
