"""Figures of the ``anatomy`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.studies.anatomy.analysis import COMPUTE, PROFILER_SPLIT, SPLIT


def _colors():
    palette = sns.color_palette("colorblind", len(SPLIT))
    return {**dict(zip(SPLIT, palette)), COMPUTE: palette[0]}


def _stacked(ax, labels, table, colors):
    """Stacked bars in ms; useful compute hatched and labelled as computed (model FLOPs at the
    measured ceiling, the same on every rung and rank), not timed."""
    bottom = [0.0] * len(labels)
    for c in table:
        vals = [v * 1e3 for v in table[c]]
        computed = c == SPLIT[0]
        label = f"{c} (computed: model FLOPs at the ceiling)" if computed else c
        ax.bar(labels, vals, bottom=bottom, color=colors[c], label=label, hatch="//" if computed else None)
        bottom = [b + v for b, v in zip(bottom, vals)]
    return bottom


def _change_text(c: dict) -> str:
    if c["change"] == "inconclusive":
        return "no gain beyond the assumed drift"
    return f"{'faster' if c['change'] == 'faster' else 'slower'} beyond the noise"


def plot_ladder(ladder, total: dict, article: dict | None = None, checkpoint: dict | None = None):
    """The B15 ladder (the outcome's ``b15_ladder`` table): each rung as a stacked bar of its
    useful compute and four losses (means over ranks and steps, summing to ``mean_step_s``),
    with the slowest rank's median step, the quantity every ratio is taken on, marked on it, and
    the speed-up over the rung before above it; ``total``: ``b15_gain_shares`` (naive → last
    rung with its interval) for the title; ``article``: the article's §5.2 knobs alone, the
    title's lead; ``checkpoint``: §5.3's background checkpoint at this run's period and at a
    published one (``credit.checkpoint_knob_at_period``)."""
    table = ladder.dropna(subset=["step_s"])
    fig, ax = plt.subplots(figsize=(10, 4.4))
    labels = [r.replace(" + ", " +\n").replace(" ", "\n", 1) if len(r) > 12 else r for r in table.rung]
    tops = _stacked(ax, labels, {c: list(table[f"{c}_s"]) for c in SPLIT}, _colors())
    medians = [v * 1e3 for v in table.step_s]
    ax.scatter(
        range(len(labels)),
        medians,
        marker="_",
        s=900,
        color="black",
        zorder=3,
        label="slowest rank's median step\n(the ratios' basis)",
    )
    for x, (top, r) in enumerate(zip(tops, table.itertuples())):
        text = "naive" if r.Index == 0 else f"×{r.speedup:.2f}\n[{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]"
        ax.text(x, max(top, medians[x]) * 1.02, text, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(tops + medians) * 1.3)
    ax.set_ylabel("time per step (ms)")
    ax.set_xlabel(
        "rung of the ladder (each adds one knob to the one before)\nbars: mean over ranks; above each: the "
        "ratio over the rung before, in brackets its bootstrap interval over whole rounds\n(95%, "
        "widened by the assumed run-to-run drift)",
        fontsize=9,
    )
    first = (
        f"The article's §5.2 knobs (naive → {article['last']}): ×{article['speedup']:.2f} "
        f"[{article['speedup_lo']:.2f}, {article['speedup_hi']:.2f}], {_change_text(article)}"
        if article
        else f"Every knob: ×{total['speedup']:.2f} [{total['speedup_lo']:.2f}, {total['speedup_hi']:.2f}], "
        f"{_change_text(total)}"
    )
    second = (
        f"§5.3's background checkpoint: {checkpoint['gain_s'] * 1e3:.1f} ms per step at this run's one write "
        f"per {checkpoint['run_period_steps']} steps, {checkpoint['gain_at_period_s'] * 1e3:.2f} ms "
        f"(×{checkpoint['speedup_at_period']:.3f}) at one per {checkpoint['period_steps']}"
        if checkpoint
        else ""
    )
    ax.set_title(f"{first}\n{second}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def plot_rank_split(df):
    """The naive rung: each rank's step as compute and three losses, from the explicit timestamps
    and from the profiler (the same profiled steps), side by side (the outcome's
    ``profiler_vs_timestamps`` table)."""
    means = df.groupby(["rank", "category"])[["profiler_s", "timestamps_s"]].mean()
    labels, table = [], {c: [] for c in PROFILER_SPLIT}
    for rank in sorted(df["rank"].unique()):
        for source, col in (("timestamps", "timestamps_s"), ("profiler", "profiler_s")):
            labels.append(f"rank {rank}\n{source}")
            for c in PROFILER_SPLIT:
                table[c].append(means.loc[(rank, c), col])
    fig, ax = plt.subplots(figsize=(9, 4))
    _stacked(ax, labels, table, _colors())
    boundary = df[df.category.isin([COMPUTE, "communication wait"])].share_difference.abs().max()
    ax.set_ylabel("time per profiled step (ms)")
    ax.set_xlabel("rank and how the step was split (naive rung)")
    ax.set_title(
        "Each loss, mean per profiled step (naive rung, checkpoint steps included)\n"
        "Data and checkpoint are the same spans in both; at the compute ↔ communication boundary the two "
        f"differ by up to {boundary:.1%}\nof the step (the profiler books autograd's gaps as communication)",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def plot_straggler(records, per_rank):
    """B13: every rank's step in the straggler's blocks, with it off and on, as useful compute
    and four losses (the outcome's ``b13_per_rank`` table): the healthy ranks' step rises too, as
    communication wait."""
    t = per_rank.copy()
    t["label"] = [f"rank {r.rank}\nstraggler {r.straggler}" for r in t.itertuples()]
    fig, ax = plt.subplots(figsize=(9, 4))
    _stacked(ax, list(t.label), {c: list(t[c]) for c in SPLIT}, _colors())
    s = records["job"]["straggler"]
    ax.set_ylabel("time per step (ms, mean)")
    ax.set_xlabel(
        f"rank (rank {s['rank']} spins {s['delay_s'] * 1e3:.1f} ms before its forward on the steps with the "
        "straggler on)"
    )
    ax.set_title("The slowest rank sets the step: the healthy ranks wait for it in the all-reduce")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def plot_steps(records):
    """Each rank's step time through the job, one panel per rung (and the straggler's blocks), in
    the order run; steps that wrote a checkpoint are marked."""
    import pandas as pd

    rows = [r for rank in records["job"]["ranks"] for r in rank["rows"]]
    df = pd.DataFrame(rows).sort_values("start_s")
    df = df[~df.record.isin(["warmup", "profiled"])]
    df["step_ms"] = df.step_s * 1e3
    # the ladder's rungs, then the leave-one-out runs in the knobs' order, then the rest (straggler)
    loo = [f"all but {k}" for k in records["ladder"][1:] if f"all but {k}" in set(df.record)]
    labels = list(dict.fromkeys([*records["ladder"], *loo, *df.record]))
    cols = 4
    nrows = -(-len(labels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 2.6 * nrows), sharey=True, squeeze=False)
    for ax, label in zip(axes.flat, labels):
        sub = df[df.record == label].copy()
        sub["order"] = sub.groupby("rank").cumcount()
        for rank, g in sub.groupby("rank"):
            plain, ckpt = g[~g.checkpoint], g[g.checkpoint]
            ax.plot(plain.order, plain.step_ms, ".", ms=4, label=f"rank {rank}")
            ax.plot(
                ckpt.order,
                ckpt.step_ms,
                "x",
                ms=7,
                color="black",
                label="checkpoint step" if rank == 0 else None,
            )
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step of this rung, in the order run", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("step time (ms)")
    for ax in list(axes.flat)[len(labels) :]:
        ax.axis("off")
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(
        "Every rank's steps, rung by rung (the rungs interleaved through the rounds); × wrote a checkpoint\n"
        "(a background write's cost lands in the steps after its ×)"
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    return fig
