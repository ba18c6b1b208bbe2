"""One seaborn theme, figure saving, and the standard charts.

Every figure has units on its axes and a title that states the take-away; PNGs are kept
under 300 KB (the DPI is lowered until they fit).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from mfulab.units import si, si_scale

MAX_PNG_BYTES = 300_000


def set_theme() -> None:
    """The notebooks' display settings: one seaborn theme and pandas' number format."""
    import pandas as pd

    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    plt.rcParams.update(
        {"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold", "axes.titlesize": 11}
    )
    pd.set_option("display.float_format", "{:.4g}".format)
    pd.set_option("display.width", 200)


def save_figure(fig, out_dir, name: str, *, dpi: int = 120, max_bytes: int = MAX_PNG_BYTES) -> None:
    """Write ``figures/<name>.png``; the DPI drops until the file is at most ``max_bytes``.
    Returns nothing, so a notebook cell that ends with it prints no path."""
    path = Path(out_dir) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    while True:
        fig.savefig(tmp, dpi=dpi)
        if tmp.stat().st_size <= max_bytes or dpi <= 40:
            break
        dpi = int(dpi * 0.8)
    os.replace(tmp, path)


def label(ax, *, x: str, y: str, title: str, legend_fontsize: int | None = 8):
    """Every chart's finish: axis labels with their units, a title that states the take-away,
    and a legend (``legend_fontsize=None``: none)."""
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    if legend_fontsize:
        ax.legend(fontsize=legend_fontsize)
    return ax


def median_iqr_ms(ax, x, median_s, q1_s, q3_s, **kwargs):
    """Medians in milliseconds with their interquartile range as error bars."""
    return ax.errorbar(
        x,
        median_s * 1e3,
        yerr=[(median_s - q1_s) * 1e3, (q3_s - median_s) * 1e3],
        fmt="o-",
        capsize=3,
        **kwargs,
    )


def scale_for(values) -> tuple[float, str]:
    """A power of 1000 and its prefix that make the largest of ``values`` readable."""
    return si_scale(max(abs(v) for v in values) if values else 1.0)


def _share(x: float) -> str:
    """A share as a percentage with enough digits to be non-zero: 37%, 4.2%, 0.024%, < 0.001%."""
    if abs(x) < 1e-5:
        return "< 0.001%"
    return f"{x:.0%}" if abs(x) >= 0.1 else f"{x * 100:.2g}%"


def waterfall(
    ax,
    start: tuple[str, float],
    losses: list[tuple[str, float]],
    end_label: str,
    *,
    unit: str = "FLOP/s",
    totals: dict | None = None,
    fontsize: int = 10,
    share_of: str = "the top",
):
    """A horizontal waterfall from ``start`` (top) down through ``losses`` to what remains
    (``end_label``, bottom). Every bar is labelled beside its right end, in ``fontsize``: a
    total with its value, a loss with its value and its share of ``start`` (called
    ``share_of``), so a loss too small to see as a bar is still read off; a zero loss says
    "none". The category names are the y tick labels.

    ``totals`` may name intermediate subtotals to draw as full bars after a given loss
    label: ``{"after loss label": "subtotal label"}``.
    """
    totals = totals or {}
    bars = []  # (label, left, width, kind)
    level = start[1]
    bars.append((start[0], 0.0, level, "total"))
    for label, loss in losses:
        bars.append((label, level - loss, loss, "loss"))
        level -= loss
        if label in totals:
            bars.append((totals[label], 0.0, level, "total"))
    bars.append((end_label, 0.0, level, "result"))
    top = max(max(b[1] + b[2], b[1]) for b in bars)
    factor, prefix = scale_for([top])
    palette = sns.color_palette()
    colors = {"total": palette[0], "loss": palette[3], "result": palette[2]}
    for i, (_label, left, width, kind) in enumerate(bars):
        ax.barh(i, width / factor, left=left / factor, color=colors[kind], edgecolor="black", linewidth=0.5)
        if kind == "loss" and width == 0:
            text = "none"
        elif kind == "loss":
            sign = "−" if width > 0 else "+"
            share = _share(abs(width) / start[1])
            text = f"{sign}{si(abs(width), unit)} ({share} of {share_of})"
        else:
            text = si(width, unit)
        ax.text(
            max(left, left + width) / factor + 0.01 * top / factor, i, text, va="center", fontsize=fontsize
        )
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b[0] for b in bars], fontsize=fontsize)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.6 * top / factor)  # room for the labels beside the bars
    ax.set_xlabel(f"{prefix}{unit}")
    return ax
