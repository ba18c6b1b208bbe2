"""Figures of the ``parallelism`` study: units on every axis, a title that states the take-away."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from mfulab.units import MIB

SCHEDULE_COLOURS = {"gpipe": "C0", "1f1b": "C1", "interleaved": "C2"}
# forward / backward spans of a pipelined step, one shade per model chunk of an interleaved rank
CHUNK_COLOURS = {"F": ("tab:blue", "tab:cyan"), "B": ("tab:red", "tab:orange")}
CONFIG_LABELS = {
    "ddp": "DDP",
    "fsdp_grad_op": "FSDP2 no-reshard\n(≈ ZeRO-2)",
    "fsdp_full": "FSDP2 full\n(ZeRO-3)",
}


def plot_bubble(pipe):
    """Measured bubble vs m per schedule and rank count (emulated compute), with the formula
    (p − 1)/(v·m) dashed and the formula with the fitted per-slot overhead dotted."""
    emu = pipe[pipe.compute == "emulated"]
    ranks = sorted(emu.ranks.unique())
    fig, axes = plt.subplots(
        1, len(ranks), figsize=(5.2 * len(ranks), 4.4), layout="constrained", squeeze=False
    )
    legend = {}
    for ax, p in zip(axes[0], ranks):
        d = emu[emu.ranks == p]
        drawn_v = set()  # GPipe and 1F1B share v = 1's formula: drawn once
        for schedule, g in d.groupby("schedule", sort=False):
            g = g.sort_values("m")
            c = SCHEDULE_COLOURS[schedule]
            v = int(g.v.iloc[0])
            ax.plot(g.m, g.bubble_measured, "o-", color=c, label=f"{schedule} (v={v}) measured")
            if v not in drawn_v:
                ax.plot(
                    g.m, g.bubble_formula, "--", color="0.35" if v == 1 else c, label=f"(p−1)/(v·m), v={v}"
                )
                drawn_v.add(v)
            ax.plot(
                g.m, g.bubble_modelled, ":", color=c, alpha=0.9, label=f"{schedule}: + fitted slot overhead"
            )
        ms = sorted(int(m) for m in d.m.unique())
        ax.set_xscale("log")
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.minorticks_off()
        ax.set_xlabel("micro-batches per step m")
        ax.set_ylabel("bubble = step / ideal − 1\n(fraction of compute)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"p = {p} stages (emulated stage compute)")
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("The bubble falls with m like (p − 1)/(v·m), above it by a fixed overhead per slot")
    return fig


def plot_timeline(records, *, compute: str = "emulated"):
    """One step of the deepest emulated pipeline per schedule at its largest m: each rank's
    forward and backward spans (the last timed step), idle gaps are the bubble."""
    job = max((j for j in records["pipeline"] if j["compute"] == compute), key=lambda j: j["ranks"])
    schedules = list(dict.fromkeys(r["schedule"] for r in job["runs"]))
    fig, axes = plt.subplots(
        len(schedules),
        1,
        figsize=(10, 1.1 + 0.55 * job["ranks"] * len(schedules)),
        layout="constrained",
        squeeze=False,
    )
    for ax, schedule in zip(axes[:, 0], schedules):
        run = max((r for r in job["runs"] if r["schedule"] == schedule), key=lambda r: r["m"])
        for rank, spans in run["spans"].items():
            for kind, stage, start, end in spans:
                chunk = stage // job["ranks"]  # an interleaved rank's model chunk (virtual stage)
                colour = CHUNK_COLOURS[kind][chunk % len(CHUNK_COLOURS[kind])]
                ax.barh(int(rank), (end - start) * 1e3, left=start * 1e3, color=colour, alpha=0.7)
        ax.set_yticks(range(job["ranks"]), [f"rank {r}" for r in range(job["ranks"])])
        ax.invert_yaxis()
        ax.set_xlabel("time since the step started (ms)")
        ax.set_title(f"{schedule}, m = {run['m']}, v = {run['v']}", fontsize=10)
    chunks = max(run["v"] for run in job["runs"])
    handles = [
        Patch(
            color=CHUNK_COLOURS[kind][c],
            alpha=0.7,
            label=f"{name}" + (f", chunk {c + 1}" if chunks > 1 else ""),
        )
        for kind, name in (("F", "forward"), ("B", "backward"))
        for c in range(chunks)
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(f"One pipelined step on {job['ranks']} ranks: the white gaps are the bubble")
    return fig


def plot_sharding(sh):
    """Peak bytes per rank (end of forward: parameters, gradients, AdamW states) and collective
    traffic per optimizer step in units of Ψ, DDP vs FSDP2, one micro-batch and with accumulation."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    one = sh[sh.m == sh.m.min()]
    labels = [CONFIG_LABELS.get(c, c) for c in one.config]
    bottom = 0
    for column, colour in (("params_bytes", "C0"), ("grads_bytes", "C1"), ("optimizer_bytes", "C2")):
        left.bar(labels, one[column] / MIB, bottom=bottom, color=colour, label=column.replace("_bytes", ""))
        bottom = bottom + one[column].to_numpy() / MIB
    # the peak adds what a rank holds only at the end of the forward: the unsharded parameters
    # that fsdp_grad_op (ZeRO-2) keeps for the backward and fsdp_full (ZeRO-3) frees
    left.scatter(
        labels, one.peak_bytes / MIB, color="k", marker="_", s=900, zorder=3, label="peak (end of forward)"
    )
    left.set_ylabel("MiB per rank")
    left.set_title("what each rank holds between steps (bars) and at its peak (fp32 AdamW)", fontsize=9)
    left.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, markerscale=0.3)
    for i, (m, g) in enumerate(sh.groupby("m")):
        x = [j + 0.38 * i for j in range(len(g))]
        right.bar(x, g.traffic_over_psi, width=0.36, color=f"C{i + 3}", label=f"m = {m} counted")
        right.scatter(
            x,
            g.traffic_formula_elements / g.traffic_elements * g.traffic_over_psi,
            color="k",
            marker="_",
            s=200,
            label="formula" if i == 0 else None,
        )
    right.set_xticks([j + 0.19 for j in range(len(one))], labels)
    right.set_ylabel("traffic per step (× Ψ)")
    right.set_xlabel("an all-reduce counts 2 buffers (reduce-scatter + all-gather)", fontsize=8)
    right.set_title("what each step communicates")
    right.legend(fontsize=8)
    fig.suptitle("Sharding trades memory for traffic: fully sharded holds 1/n, moves 3Ψ per micro-batch")
    return fig
