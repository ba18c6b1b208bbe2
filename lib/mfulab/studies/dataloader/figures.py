"""Figures of the ``dataloader`` study: units on every axis, a title that states the take-away,
legend entries only for what is drawn."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from mfulab.studies.dataloader.analysis import step_split
from mfulab.studies.dataloader.stated import B11_STATED
from mfulab.studies.dataloader.throughput import SHARDS, SMALL_FILES
from mfulab.studykit import verdicts


def plot_throughput(records, sw, best):
    """Samples/s per format and loader setting (the outcome's ``loader_sweep`` table ``sw``),
    warm and cold (log scale): points are the median over epochs (rounds), whiskers their range
    (min–max; with the few epochs a run has, a quartile range would be an interpolation between
    two or three values); titled with ``best`` (``analysis.best_warm_setting``)."""
    sw = sw.assign(
        setting=[
            f"{w} {'(cold)' if c == 'cold' else '(persistent)' if pers else ''}".strip()
            for c, w, pers in zip(sw.cache, sw.num_workers, sw.persistent_workers)
        ]
    )
    warm = sw[sw.cache == "warm"].sort_values(["num_workers", "persistent_workers"]).setting.unique()
    order = [f for f in records["params"]["formats"] if f in set(sw.format)]
    fig, ax = plt.subplots(figsize=(8, 4))
    # points with whiskers on the log axis (a bar's length from an arbitrary floor means nothing there)
    sns.pointplot(
        data=sw,
        x="format",
        y="samples_per_s",
        hue="setting",
        order=order,
        hue_order=[*warm, *sw[sw.cache == "cold"].setting.unique()],
        estimator=np.median,
        errorbar=("pi", 100),
        dodge=0.6,
        linestyle="none",
        markers="o",
        capsize=0.05,
        ax=ax,
    )
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("samples/s (median of epochs, log)")
    ax.set_xlabel("")
    ax.set_title(_throughput_title(sw, best))
    ax.legend(
        fontsize=8,
        title=f"num_workers / cache\n(whiskers: range of\n{_rounds_text(sw)})",
        title_fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    fig.tight_layout()
    return fig


def _rounds_text(sw) -> str:
    """How many epochs each bar's whisker spans: the warm rounds and the cold rounds."""
    parts = []
    for cache, what in (("warm", "warm epochs"), ("cold", "cold rounds")):
        n = sw[sw.cache == cache].groupby(["format", "setting"]).size()
        if len(n):
            parts.append(f"{n.min()}{'' if n.min() == n.max() else f'–{n.max()}'} {what}")
    return ", ".join(parts)


def plot_latency(table):
    """B11: tar / small-file throughput over the assumed per-file latency, with its interval
    and the claim's 1.05× threshold (the outcome's ``b11_latency_sensitivity`` table)."""
    x = table.per_file_latency_ms.to_numpy()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    if table.empty:
        ax.text(
            0.5, 0.5, "no cold rounds of tar and JSON files in this run", ha="center", transform=ax.transAxes
        )
        ax.set_axis_off()
        return fig
    ax.plot(x, table.tar_over_json_files, color="C0", label="tar / JSON files (median)")
    measured = x == 0
    ax.scatter(x[measured], table.tar_over_json_files[measured], color="C0", zorder=3, label="measured")
    ax.scatter(
        x[~measured],
        table.tar_over_json_files[~measured],
        facecolors="white",
        edgecolors="C0",
        zorder=3,
        label="emulated (+ files × latency)",
    )
    ax.fill_between(x, table.ratio_lo, table.ratio_hi, color="C0", alpha=0.2, label="interval (widened)")
    ax.axhline(
        B11_STATED["min_throughput_gain"],
        color="C3",
        ls="--",
        label="the claim's 1.05× (of training throughput:\na loader's samples/s is not it)",
    )
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(0, x.max() * 1.15 if len(x) else 1)
    ax.xaxis.set_major_locator(FixedLocator(x))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("assumed latency per file opened (ms, symlog axis; 0 = this local disk, cold)")
    ax.set_ylabel("throughput ratio, tar / JSON files (×, log)")
    ax.set_title(
        "The loader alone, inline, cold: each costly file open favours tar\n(warm, the page cache serves "
        "both formats: §2's table)",
        fontweight="bold",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_hiding(table):
    """B11's network model checked here: per worker count, the model's steady-state wait per
    step beside the measured one (median over rounds, whiskers min–max), with the emulated
    step and the batch's injected opens for scale (the outcome's ``b11_latency_hiding``)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    if table.empty:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    x = np.arange(len(table))
    ax.bar(x - 0.2, table.predicted_wait_ms, width=0.4, color="C7", label="model: max(0, B·L / W − step)")
    err = [table.measured_wait_ms - table.measured_lo_ms, table.measured_hi_ms - table.measured_wait_ms]
    ax.bar(
        x + 0.2,
        table.measured_wait_ms,
        width=0.4,
        color="C3",
        yerr=err,
        capsize=3,
        label="measured (median, min–max)",
    )
    step = table.step_ms.iloc[0]
    ax.axhline(step, color="C0", ls=":", label=f"emulated step ({step:g} ms)")
    ax.set_xticks(x, [f"{int(w)} (inline)" if w == 0 else str(int(w)) for w in table.workers])
    ax.set_xlabel("DataLoader workers")
    ax.set_ylabel("wait for the batch per step (ms)")
    ax.set_title(
        f"Workers hide {table.opens_per_batch_ms.iloc[0]:g} ms of opens per batch once B·L / W < step",
        fontweight="bold",
    )
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


_USEFUL = verdicts.B2_USEFUL
_COLOURS = {
    "data wait": "C3",
    _USEFUL: "C0",
    "slow operators": "C9",
    "scheduling waste": "C2",
    "communication wait": "C1",
}
# as a step runs: the wait comes first
_ORDER = ("data wait", _USEFUL, "slow operators", "scheduling waste", "communication wait")


def plot_stall(records):
    """Per loader, the mean step split into the time waiting for the batch (first, as in the
    step), useful compute, slow operators and the rest (checkpoint writes, the loop); real and
    emulated compute in separate panels (their time scales differ by orders of magnitude). The
    title states the real measurement's take-away; the emulated panel says it is true by
    construction. A loss is drawn where it is non-zero in B2's sense (above ``nonzero_share`` of
    the run's time), and each panel's legend lists only the categories drawn there."""
    floor = records["params"].get("nonzero_share", 0.001)

    groups = {}
    for run in records["stall"]:
        groups.setdefault(run["compute"], []).append(run)
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 0.38 * len(records["stall"]) + 2.2), squeeze=False)
    for ax, (compute, runs) in zip(axes[:, 0], groups.items()):
        drawn = set()
        for i, run in enumerate(runs):
            split = step_split(run)
            total = sum(split.values())
            n_steps = len(run["steps"]) - 1
            left = 0.0
            for k in _ORDER:
                width_ms = split[k] / n_steps * 1e3
                if split[k] > floor * total or (k == _USEFUL and split[k] > 0):
                    ax.barh(i, width_ms, left=left, color=_COLOURS[k], height=0.6)
                    drawn.add(k)
                left += width_ms
            share = split["data wait"] / sum(split.values())
            ax.text(left, i, f"  wait {share:.1%}", va="center", fontsize=7)
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels(
            [
                f"{r['format']} ({r['num_workers']} worker{'' if r['num_workers'] == 1 else 's'})"
                for r in runs
            ],
            fontsize=8,
        )
        ax.invert_yaxis()
        ax.set_xlabel("mean time per step (ms)")
        ax.set_xlim(0, ax.get_xlim()[1] * 1.15)
        emulated = compute.startswith("emulated")
        step_ms = records["params"].get("stall_emulated_step_s", 0) * 1e3
        ax.set_title(
            f"emulated compute, true by construction: a {step_ms:g} ms timed wait per step,\n"
            "batches loaded inline, so every step starts with the load"
            if emulated
            else "real compute (measured): a training step of the reference model",
            fontsize=9,
        )
        labels = {
            **{k: k for k in _ORDER},
            _USEFUL: "compute (a timed wait)" if emulated else "useful compute (model FLOPs at the ceiling)",
        }
        handles = [Patch(color=_COLOURS[k], label=labels[k]) for k in _ORDER if k in drawn]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(_stall_title(records), fontweight="bold", fontsize=11)
    fig.tight_layout()
    return fig


def _throughput_title(sw, best) -> str:
    """B11's comparison, tar against the JSON files, warm (each format's best setting) and cold
    (the median cold epoch); the fastest format against the slowest where either is missing."""
    if not {SHARDS, SMALL_FILES} <= set(best.index):
        return (
            f"{best.idxmax()} reads {best.max() / best.min():.1f}× faster than {best.idxmin()} "
            "(warm, each format's best setting)"
        )
    cold = sw[sw.cache == "cold"].groupby("format").samples_per_s.median()
    cold_text = (
        f",\n{cold[SHARDS] / cold[SMALL_FILES]:.2f}× cold (0 workers, pages evicted)"
        if {SHARDS, SMALL_FILES} <= set(cold.index)
        else ""
    )
    return (
        f"tar reads {best[SHARDS] / best[SMALL_FILES]:.2f}× the JSON files' samples/s warm "
        f"(each format's best setting){cold_text}"
    )


def _stall_title(records) -> str:
    """The take-away of the real measurement: the range of the data wait's share of step time
    over the loaders (batches pre-loaded in memory left out) and the median step."""
    real = [r for r in records["stall"] if r["compute"] == "real compute" and r["format"] != "in-memory"]
    if not real:
        return "The mean training step per loader"
    shares = [step_split(r)["data wait"] / sum(step_split(r).values()) for r in real]
    step_ms = float(np.median([s["step_s"] for r in real for s in r["steps"][1:]])) * 1e3
    workers = sorted({r["num_workers"] for r in real})
    plural = "" if workers == [1] else "s"
    memory = [r for r in records["stall"] if r["compute"] == "real compute" and r["format"] == "in-memory"]
    split = step_split(memory[0]) if memory else None
    in_memory = f" (batches in memory: {split['data wait'] / sum(split.values()):.1%})" if split else ""
    return (
        f"Loader-fed training steps wait {min(shares):.1%}–{max(shares):.1%} of their time for the batch"
        f"{in_memory}\n(measured: median step {step_ms:.0f} ms, {'/'.join(map(str, workers))} loader "
        f"worker{plural}; the emulated panel is true by construction)"
    )
