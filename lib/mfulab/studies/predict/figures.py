"""Figures of the ``predict`` study."""

from __future__ import annotations

from mfulab.analytic import step

TERM_LABELS = {
    "matmul_s": "matmuls",
    "attention_s": "attention",
    "memory_bound_s": "memory-bound ops",
    "recompute_s": "recompute",
    "tp_comm_s": "TP communication",
    "ep_comm_s": "expert all-to-alls",
    "cp_comm_s": "context-parallel ring (exposed)",
    "pp_bubble_s": "pipeline bubble",
    "pp_p2p_s": "pipeline p2p",
    "dp_comm_exposed_s": "DP communication (exposed)",
    "optimizer_s": "optimizer",
    "data_s": "data",
}


def validation(df, goal: float):
    """Predicted against published step time (log–log) by split, with the ±goal band, the rows a
    held-out file marks as beyond the model hollow, priced as their notes say; and each source's
    errors (one dot a row, the null model's median beside it): the held-out sources first, the
    latest collection at the top."""
    import matplotlib.pyplot as plt
    import numpy as np

    priced = df[df.refused == ""]
    noted = df[df.error_as_noted.notna()] if "error_as_noted" in df else df.iloc[:0]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 5.6), gridspec_kw={"width_ratios": [1, 1.3]})
    shown = np.concatenate([priced.published_step_s, noted.published_step_s])
    lo, hi = shown.min() / 1.5, shown.max() * 1.5
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x * (1 - goal), x * (1 + goal), color="0.9", label=f"±{goal:.0%}")
    ax.plot(x, x, color="0.5", lw=1)
    markers = {
        "fit": "o",
        "development": "s",
        "test": "^",
        "holdout": "D",
        "holdout-2": "*",
        "holdout-3": "P",
        "holdout-4": "X",
    }
    for split, marker in markers.items():
        g = priced[priced.split == split]
        if len(g):
            ax.scatter(
                g.published_step_s, g.predicted_step_s, marker=marker, s=18, label=f"{split} ({len(g)})"
            )
    for split, g in noted.groupby("split", sort=False):  # refused rows priced as their notes say
        ax.scatter(
            g.published_step_s,
            g.published_step_s * (1 + g.error_as_noted),
            marker=markers.get(split, "o"),
            s=22,
            facecolors="none",
            edgecolors="0.3",
            label=f"{split}, priced as noted ({len(g)})",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="published step time (s)",
        ylabel="predicted step time (s)",
        title="every priced row (hollow: refused, priced as noted)",
    )
    ax.legend(fontsize=8)
    order = list(
        dict.fromkeys(
            priced.sort_values(
                ["split"], key=lambda s: s.map({k: i for i, k in enumerate(reversed(list(markers)))})
            ).source
        )
    )
    for i, source in enumerate(order):
        g = priced[priced.source == source]
        jitter = (np.arange(len(g)) % 7 - 3) * 0.05
        colour = {"test": "C0", "holdout": "C2", "holdout-2": "C1", "holdout-3": "C4", "holdout-4": "C5"}.get(
            g.split.iloc[0], "C7"
        )
        bx.scatter(g.error * 100, i + jitter, s=12, color=colour)
        bx.scatter([g.null_error.median() * 100], [i], marker="x", color="C3", s=40)
    bx.scatter([], [], marker="x", color="C3", label="null model, median")
    legend = {
        "holdout-4": ("C5", "fourth holdout rows (first evaluated at its freeze)"),
        "holdout-3": ("C4", "third holdout rows (first evaluated at its freeze)"),
        "holdout-2": ("C1", "second holdout rows (first evaluated at its freeze)"),
        "holdout": ("C2", "holdout rows"),
        "test": ("C0", "test rows"),
    }
    for split, (colour, label) in legend.items():  # only the splits with a priced row
        if (priced.split == split).any():
            bx.scatter([], [], s=12, color=colour, label=label)
    bx.scatter([], [], s=12, color="C7", label="fit and development rows")
    bx.set_yticks(range(len(order)), order, fontsize=8)
    bx.axvline(0, color="0.5", lw=1)
    for v in (-goal * 100, goal * 100):
        bx.axvline(v, color="0.5", ls="--", lw=1)
    bx.invert_yaxis()
    bx.set(
        xlabel="error of the predicted step time (%)",
        title="errors by source (priced rows; rows priced as noted: left panel only)",
    )
    bx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def breakdown(df, label_col: str = "id", title: str = "", seconds: bool = False, marks=None):
    """Each row's predicted step, term by term: shares of the step (rows labelled with their
    step time), or seconds (``seconds``: rows of one case, where the fall of the step shows);
    ``marks`` (seconds per row, with ``seconds``) draws a stated step beside each bar (◆)."""
    import matplotlib.pyplot as plt

    terms = df.set_index(label_col)[list(step.TERMS)]
    step_s = terms.sum(axis=1)
    shown = terms if seconds else terms.div(step_s, axis=0)
    shown.index = [f"{label} ({t:.3g} s)" for label, t in zip(shown.index, step_s)]
    fig, ax = plt.subplots(figsize=(10, 0.34 * len(df) + 2.2))
    # one clearly different colour per term (tab20 pairs near-identical shades: optimizer and data)
    colours = [*plt.cm.tab10.colors, *plt.cm.Dark2.colors, *plt.cm.Set1.colors][: shown.shape[1]]
    shown.rename(columns=TERM_LABELS).plot.barh(stacked=True, ax=ax, width=0.8, color=colours)
    ax.set(
        xlabel="predicted step time (s)" if seconds else "share of the predicted step",
        ylabel="",
        title=title,
        xlim=(0, None) if seconds else (0, 1),
    )
    if marks is not None and seconds:
        ax.scatter(
            list(marks), range(len(shown)), marker="D", color="black", s=24, zorder=5, label="article's step"
        )
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    return fig


def calibrated(df):
    """Predicted vs measured seconds per operator class on this machine."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    d = df.set_index("class")[["predicted_s", "predicted_op_rates_s", "measured_s"]] * 1e3
    d.index = [c if len(c) <= 40 else "other" for c in d.index]  # a long residual class label
    d.columns = [
        "predicted from the calibration",
        "predicted with the ops' own rates (timed alone)",
        "measured (profiler split, scaled to the median step)",
    ]
    d.plot.barh(ax=ax)
    ax.legend(fontsize=8)
    ax.set(
        xlabel="time per step (ms)",
        ylabel="",
        title="This machine: predicted vs measured time per operator class",
    )
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    return fig
