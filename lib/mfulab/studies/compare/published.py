"""This machine against published measurements of other machines (chapter 10 while ``results/``
holds one machine): ``studies/compare/published_references.yaml``, every row a figure someone
measured and published, with the datasheet figure it is a share of.

What is compared is a *share of the peak*, the one quantity that means the same on a 2-core CPU
and on an 8-GPU node: the best matmul a machine reaches over its dense peak (a GPU's MAMF over its
datasheet bf16 peak; this machine's calibrated fp32 ceiling over its ISA peak, chapter 01), and an
all-reduce's bus bandwidth over the link that carries it. Published rows are labelled
*published* and never mixed with what was measured here.
"""

from __future__ import annotations

from pathlib import Path

from mfulab.paths import repo_root

REFERENCES_FILE = "studies/compare/published_references.yaml"
QUANTITIES = {
    "matmul_bf16": ("best matmul over the dense peak", "TFLOP/s"),
    "all_reduce_busbw": ("all-reduce bus bandwidth over the link", "GB/s"),
}
CROWDED_NOTE = " (oversubscribed: ranks took turns on its cores)"
NOT_A_SHARE = "NVLS: an in-switch reduction's gain over the ring, not a share of the link"


def load(path: str | Path | None = None) -> dict:
    """The references file as plain data, every row checked: a known quantity, a positive
    published value, and a peak: devices.yaml's dense bf16 peak of its ``device`` (one peak per
    device across the course), else a positive ``spec`` of its own."""
    import yaml

    from mfulab.analytic.devices import peak_flops_per_s

    path = Path(path) if path else repo_root() / REFERENCES_FILE
    data = yaml.safe_load(path.read_text())
    for row in data["references"]:
        if row["quantity"] not in QUANTITIES:
            raise ValueError(f"{path}: unknown quantity {row['quantity']!r}; known: {sorted(QUANTITIES)}")
        if row.get("device"):
            row["spec"] = peak_flops_per_s(row["device"], "bf16") / 1e12
        if not row["published"] > 0 or (row.get("spec") is not None and not row["spec"] > 0):
            raise ValueError(f"{path}: {row['machine']}: published and spec must be positive")
        if row["quantity"] not in data["sources"] and not row.get("source"):
            raise ValueError(f"{path}: no source for {row['quantity']!r}")
    return data


def _source(published: dict, row: dict) -> str:
    """A row's own source where it names one, else its quantity's."""
    return row.get("source") or published["sources"][row["quantity"]]


def _busbw_rows() -> list[dict]:
    """The published all-reduce rows (``analytic.nccl_published``, the list chapter 02 reads),
    each a share of its link except an NVLS row (the list's one NVLS rule)."""
    from mfulab.analytic.nccl_published import NCCL_TESTS_PUBLISHED, label, share_of_line

    label_text, unit = QUANTITIES["all_reduce_busbw"]
    rows = []
    for r in NCCL_TESTS_PUBLISHED:
        share = share_of_line(r)
        rows.append(
            {
                "machine": label(r),
                "quantity": label_text,
                "value": r["busbw_gb_per_s"],
                "unit": unit,
                "peak": r["line_gb_per_s"],
                "share_of_peak": share,
                "basis": "published",
                "comparable": share is not None,
                "source": f"{r['source']}; {r['fabric']}, busbw over {r['line_gb_per_s']:g} GB/s per "
                + ("node (its NICs together)" if r["scope"] == "nodes" else "GPU and direction")
                + ("" if share is not None else f"; {NOT_A_SHARE}"),
            }
        )
    return rows


def reference_table(published: dict, ceilings: dict, gloo: dict | None = None, crowded=()):
    """One row per published figure and one per machine measured here (``ceilings``:
    ``analysis.measured_ceilings``, its matmul ceiling over its peak; ``gloo``: ``{machine:
    (largest all-reduce busbw, copy bandwidth)}`` in B/s, chapter 02's gloo run over the memory
    copy, an upper bound on gloo's TCP loopback): machine, quantity, value, unit, peak, share of
    the peak, basis (*published* or *measured here*), whether the share is comparable with a
    GPU's, source. ``crowded``: the machines whose gloo run had more ranks than usable cores (the
    ranks took turns on them), named so on their row."""
    import pandas as pd

    rows = []
    for r in published["references"]:
        label, unit = QUANTITIES[r["quantity"]]
        spec = r.get("spec")
        rows.append(
            {
                "machine": r["machine"],
                "quantity": label,
                "value": r["published"],
                "unit": unit,
                "peak": spec,
                "share_of_peak": r["published"] / spec if spec else None,
                "basis": "published",
                "comparable": True,
                "source": f"{_source(published, r)}; {r.get('note', '')}".rstrip("; "),
            }
        )
    rows += _busbw_rows()
    label, unit = QUANTITIES["matmul_bf16"]
    for machine, (ceiling, peak) in ceilings.items():
        rows.append(
            {
                "machine": machine,
                "quantity": label,
                "value": ceiling / 1e12,
                "unit": unit,
                "peak": peak / 1e12 if peak else None,
                "share_of_peak": ceiling / peak if peak else None,
                "basis": "measured here",
                "comparable": not machine.startswith("cpu-"),  # a CPU's peak is an ISA figure (cpu-<n>c)
                "source": "this machine's calibration (matmul ceiling, fp32, square shapes) over its peak: a "
                "GPU's datasheet; a CPU's ISA peak at its kernel-reported clock (chapter 01), which a boost "
                "clock passes, so a CPU's share is not comparable with a GPU's",
            }
        )
    label, unit = QUANTITIES["all_reduce_busbw"]
    for machine, (busbw, copy) in (gloo or {}).items():
        rows.append(
            {
                "machine": machine + (CROWDED_NOTE if machine in crowded else ""),
                "quantity": label,
                "value": busbw / 1e9,
                "unit": unit,
                "peak": copy / 1e9,
                "share_of_peak": busbw / copy,
                "basis": "measured here",
                "comparable": False,
                "source": "chapter 02's gloo all-reduce of 2 ranks on this host, largest message, over the "
                "calibration's copy bandwidth (bytes read + written). Gloo has no shared-memory transport: "
                "on one host it runs over TCP on the loopback interface, which copies each byte through "
                "the kernel, so the copy bandwidth bounds it from above; not a link, so not comparable "
                "with a GPU's share of its NVLink",
            }
        )
    return pd.DataFrame(rows)


def takeaway(refs) -> str:
    """What the shares say: where this machine's matmul share sits among the published ones."""
    matmul = refs[refs.quantity == QUANTITIES["matmul_bf16"][0]].dropna(subset=["share_of_peak"])
    pub, here = matmul[matmul.basis == "published"], matmul[matmul.basis == "measured here"]
    if pub.empty:
        return "No published matmul reference to read this machine against"
    lo, hi = pub.share_of_peak.min(), pub.share_of_peak.max()
    text = f"Published GPUs reach {lo:.0%}–{hi:.0%} of their dense bf16 peak in their best matmul"
    for r in here.itertuples():
        text += f"; {r.machine} {r.share_of_peak:.0%} of its peak in fp32"
        if r.share_of_peak > 1:
            text += (
                " (above its ISA peak, a failed check of that peak, not an efficiency: one of its inputs "
                "understates the host, the kernel-reported clock (a boost clock), the FMA units per core, "
                "or the SIMD width the guest's flags expose; none of them is measured here (no clock under "
                "the matmul, no threads-per-core check), so the share is not comparable)"
            )
    return text


def _kind(r) -> str:
    """A reference row's bar style: published, measured here, or measured here but not comparable."""
    if r.basis == "published":
        return "published"
    return "measured here" if r.comparable else "measured here, not comparable"


def plot_shares(refs):
    """Share of the peak per row, one panel per quantity stacked, each as tall as its rows; a
    vertical line at 100% (the peak). Published bars light blue; a share measured here that is
    not comparable with a GPU's (a CPU's fp32 ceiling over an ISA peak its boost clock passes; a
    gloo all-reduce over the memory copy) hatched grey; a row with no share (NVLS) is left off
    the bars and named in the panel. A legend says which is which."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    shown = refs.dropna(subset=["share_of_peak"])
    quantities = list(dict.fromkeys(shown.quantity))
    counts = [int((shown.quantity == q).sum()) for q in quantities]
    fig, axes = plt.subplots(
        len(quantities),
        1,
        figsize=(8.0, 1.6 + 0.42 * sum(counts) + 0.6 * len(quantities)),
        squeeze=False,
        sharex=True,
        gridspec_kw={"height_ratios": counts},
    )
    top = max(130.0, float(shown.share_of_peak.max()) * 100 + 15)
    styles = {
        "published": {"facecolor": "#c6dbef", "edgecolor": "C0"},
        "measured here": {"facecolor": "C1", "edgecolor": "C1"},
        "measured here, not comparable": {"facecolor": "0.85", "edgecolor": "0.4", "hatch": "//"},
    }
    for ax, quantity in zip(axes[:, 0], quantities):
        d = shown[shown.quantity == quantity].sort_values("share_of_peak")
        for i, r in enumerate(d.itertuples()):
            ax.barh(i, r.share_of_peak * 100, height=0.6, **styles[_kind(r)])
            ax.text(r.share_of_peak * 100 + 1, i, f"{r.share_of_peak:.0%}", va="center", fontsize=7)
        ax.set_yticks(range(len(d)))
        what = (
            "fp32 ceiling ÷ ISA peak" if quantity == QUANTITIES["matmul_bf16"][0] else "gloo ÷ copy bandwidth"
        )
        names = [m if b == "published" else f"{m}, here: {what}" for m, b in zip(d.machine, d.basis)]
        ax.set_yticklabels([textwrap.fill(str(m), 48) for m in names], fontsize=6.5)
        ax.axvline(100, color="0.4", linewidth=0.8)
        left_off = refs[(refs.quantity == quantity) & refs.share_of_peak.isna()]
        title = quantity + (
            f" ({len(left_off)} NVLS rows left off: no share of a link)" if len(left_off) else ""
        )
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(0, top)
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("share of the peak (%)")
    used = {_kind(r) for r in shown.itertuples()}
    axes[0, 0].legend(
        handles=[Patch(**style, label=name) for name, style in styles.items() if name in used],
        fontsize=7,
        loc="lower right",
    )
    fig.suptitle(
        "Best matmul and all-reduce as a share of the peak: published machines and this one", fontsize=9
    )
    fig.tight_layout()
    return fig


UNPRICED = "not priced (chapter 09's model refuses the run)"
PUBLISHED_RUNS_TABLE = "predict/tables/validation.csv"  # chapter 09's published runs, as priced there


def published_runs(results_root, machines) -> list[dict]:
    """Chapter 09's published training runs (the step time each source states, the model FLOPs per
    step, the GEMMs' precision and the cluster's dense bf16 peak chapter 09 computed for it), from
    the first machine whose results hold that table; [] where none does. The rows are
    publications, not this machine's. A table from before the precision column reads as bf16."""
    import pandas as pd

    for machine in machines:
        path = Path(results_root) / machine / PUBLISHED_RUNS_TABLE
        if path.exists():
            d = pd.read_csv(path)
            if "dtype" not in d:
                d["dtype"] = "bf16"
            # a run chapter 09's model refuses (MoE, FP8 or a layout it does not cover) was priced with
            # no framework: kept as its own group, named, so the pooled ranges do not silently drop it
            d["framework"] = d["framework"].fillna(UNPRICED)
            keep = [
                "id",
                "source",
                "device",
                "framework",
                "dtype",
                "model_flops_per_step",
                "peak_flops_total",
            ]
            return d.dropna(subset=["published_step_s"])[[*keep, "published_step_s"]].to_dict("records")
    return []


def published_mfu_table(runs: list[dict]):
    """MFU of the published runs by device, framework and GEMM precision: model FLOPs per step
    (PaLM's count, as chapter 09 prices them) over the stated step time and the cluster's dense
    peak, twice: against the bf16 peak (``*_mfu``, the convention most reports use) and against
    the dense peak of the precision the GEMMs ran in (``*_mfu_own_peak``: an FP8 run's GEMMs
    can go twice as fast as bf16's, so only this one can be set beside a bf16 matmul's best).
    Runs, sources, the GPU counts (lowest–highest: scale differs within a row), median, lowest
    and highest; and the median over the device's best measured GEMM in the
    run's precision (``median_mfu_over_mamf``: MFU × bf16 peak ÷ MAMF, devices.yaml's
    ``mamf_tflops``; NaN where none is recorded for that precision), the denominator this
    machine's own MFU uses (its measured matmul ceiling).
    Published, not measured here."""
    import pandas as pd

    from mfulab.analytic.devices import device_spec, peak_flops_per_s

    cols = ["device", "framework", "dtype", "runs", "sources", "source_ids", "gpus", "median_mfu", "min_mfu"]
    cols += ["max_mfu"]
    if not runs:
        return pd.DataFrame(
            columns=[*cols, "median_mfu_own_peak", "max_mfu_own_peak", "median_mfu_over_mamf"]
        )
    d = pd.DataFrame(runs)
    if "dtype" not in d:
        d["dtype"] = "bf16"
    d["dtype"] = d["dtype"].fillna("bf16")
    own_over_bf16 = [
        peak_flops_per_s(dev, dt) / peak_flops_per_s(dev, "bf16") for dev, dt in zip(d.device, d.dtype)
    ]
    d["mfu"] = d.model_flops_per_step / (d.published_step_s * d.peak_flops_total)
    d["mfu_own_peak"] = d.mfu / own_over_bf16

    def peak_over_mamf(device: str, dtype: str) -> float:
        """bf16 peak ÷ the best measured GEMM in the run's own precision; a precision with no MAMF
        of its own borrows bf16's only where its dense peak is bf16's (fp16 on these tensor cores),
        else NaN (an FP8 run over a bf16 ceiling would pass 100%)."""
        mamfs = device_spec(device).mamf_flops_per_s or {}
        mamf = mamfs.get(dtype)
        if mamf is None and peak_flops_per_s(device, dtype) == peak_flops_per_s(device, "bf16"):
            mamf = mamfs.get("bf16")
        return peak_flops_per_s(device, "bf16") / mamf if mamf else float("nan")

    d["mfu_over_mamf"] = d.mfu * [peak_over_mamf(dev, dt) for dev, dt in zip(d.device, d.dtype)]
    d["gpus"] = [
        round(total / peak_flops_per_s(dev, "bf16")) for total, dev in zip(d.peak_flops_total, d.device)
    ]
    g = d.groupby(["device", "framework", "dtype"])
    out = pd.DataFrame(
        {
            "runs": g.size(),
            "sources": g.source.nunique(),
            "source_ids": g.source.agg(lambda x: ", ".join(sorted(set(x)))),
            "gpus": [f"{lo}" if lo == hi else f"{lo}–{hi}" for lo, hi in zip(g.gpus.min(), g.gpus.max())],
            "median_mfu": g.mfu.median(),
            "min_mfu": g.mfu.min(),
            "max_mfu": g.mfu.max(),
            "median_mfu_own_peak": g.mfu_own_peak.median(),
            "max_mfu_own_peak": g.mfu_own_peak.max(),
            "median_mfu_over_mamf": g.mfu_over_mamf.median(),
        }
    )
    return out.reset_index().sort_values(["device", "framework", "dtype"]).reset_index(drop=True)


def published_mfu_rows(runs: list[dict]):
    """Every run behind :func:`published_mfu_table`, one row each (its id, source, device,
    framework, precision, GPU count, stated step time and MFU over the dense bf16 peak), so that a
    pooled row can be audited. Published, not measured here."""
    import pandas as pd

    from mfulab.analytic.devices import peak_flops_per_s

    cols = ["id", "source", "device", "framework", "dtype", "gpus", "published_step_s", "mfu"]
    if not runs:
        return pd.DataFrame(columns=cols)
    d = pd.DataFrame(runs)
    d["dtype"] = d["dtype"].fillna("bf16") if "dtype" in d else "bf16"
    d["gpus"] = [round(t / peak_flops_per_s(dev, "bf16")) for t, dev in zip(d.peak_flops_total, d.device)]
    d["mfu"] = d.model_flops_per_step / (d.published_step_s * d.peak_flops_total)
    return d[cols].sort_values(["device", "framework", "source", "gpus"]).reset_index(drop=True)


def article_note(refs) -> str:
    """What the references say about the articles' own cross-machine statements (markdown): the
    spread of the published MAMF shares (article A §6: an MFU's ceiling differs by hardware), and
    the ring shares of NVLink and of InfiniBand ports (article B §3.3: its 60% NVLink rule, its
    two nodes at 21 of 25 GB/s). The verdicts are chapters 01's and 02's; this is the context."""
    pub = refs[refs.basis == "published"].dropna(subset=["share_of_peak"])
    matmul = pub[pub.quantity == QUANTITIES["matmul_bf16"][0]]
    busbw = pub[pub.quantity == QUANTITIES["all_reduce_busbw"][0]]
    nvlink = busbw[busbw.source.str.contains("per GPU and direction") & busbw.source.str.contains("NVLink")]
    ib = busbw[busbw.source.str.contains("per node")]
    if matmul.empty or nvlink.empty or ib.empty:
        return ""
    lo, hi = matmul.loc[matmul.share_of_peak.idxmin()], matmul.loc[matmul.share_of_peak.idxmax()]
    return (
        "**What these references say about the articles** (context; the verdicts are chapters 01 and "
        "02's). Article A (§6) warns that an MFU's ceiling differs by hardware, so only a gain on one "
        f"machine counts: the best matmul alone reaches {lo.share_of_peak:.0%} of the dense peak on "
        f"{lo.machine} and {hi.share_of_peak:.0%} on {hi.machine}, so an MFU over the datasheet peak "
        "differs by that much between machines before any training overhead, which is why chapter 01 "
        "also divides by the measured ceiling (no Ascend 910B MAMF is published among these rows, so "
        "its own comparison with the H series stays unchecked here). Article B (§3.3) flags a node whose "
        "busbw is under 60% of its NVLink: the published ring readings of healthy NVLink systems here "
        f"span {nvlink.share_of_peak.min():.0%}–{nvlink.share_of_peak.max():.0%}, some within a few "
        "points of that line at the message sizes they were read at (chapter 02 decides the rule). "
        "Its two nodes after the fix, 21 of 25 GB/s (84%, the article's figures), sit below the "
        f"published InfiniBand paths here, {ib.share_of_peak.min():.0%}–{ib.share_of_peak.max():.0%} "
        "of their ports."
    )
