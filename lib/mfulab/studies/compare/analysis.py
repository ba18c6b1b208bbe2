"""The comparison table and its figure (see the package docstring for the schema)."""

from __future__ import annotations

import math
from pathlib import Path

MISSING = "missing"  # the machine has no results of this study
NOT_APPLICABLE = "n/a"  # the study ran and wrote null (e.g. a CPU has no datasheet peak)


def _compared():
    """(study, metric) pairs of every registered study except the comparison itself."""
    from .. import REGISTRY

    return [(s, m) for s in REGISTRY.values() if not s.reads_results for m in s.metrics]


def machines(results_root) -> list[str]:
    """Machines with at least one study's metrics under ``results_root``."""
    from .. import REGISTRY

    root = Path(results_root)
    studies = {s.id for s in REGISTRY.values() if not s.reads_results}
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and p.name != "comparison" and any((p / s / "metrics.json").exists() for s in studies)
    )


def collect(p) -> dict:
    """Nothing is measured: every machine's metrics, as records."""
    from ...results import load_all

    studies = dict.fromkeys(s.id for s, _ in _compared())
    return {
        "study": "compare",
        "params": p.to_dict(),
        "machines": machines(p.results_root),
        "metrics": {study: load_all(p.results_root, study) for study in studies},
    }


def _agree(a, b) -> bool:
    """Two studies' values of one key on one machine tell the same (a study that did not run
    contradicts nothing)."""
    if MISSING in (a, b) or a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _merge_same_key(rows: list[dict], names: list[str]) -> list[dict]:
    """One row per property: studies that write the same key (the calibration's figures,
    read by several studies) share a row when they agree on every machine; where they
    disagree, both rows stay and the second says so (two numbers for one property)."""
    out, first = [], {}
    for row in rows:
        kept = first.get(row["key"])
        if kept is None:
            first[row["key"]] = row
            out.append(row)
        elif all(_agree(kept[m], row[m]) for m in names):
            kept["study"] += f", {row['study']}"
            for m in names:
                if kept[m] == MISSING:
                    kept[m] = row[m]
        else:
            row["metric"] += f" (differs from {kept['study']}'s)"
            out.append(row)
    return out


def comparison_table(records):
    """One row per declared metric, one column per machine (raw values). A machine without
    the study shows ``missing``; a metric the study wrote as null (no datasheet peak for a
    CPU) shows ``n/a``. A key that several studies write (the calibration's ceiling and
    bandwidth) is one row when they agree (``_merge_same_key``)."""
    import pandas as pd

    names = records["machines"]
    rows = []
    for study, metric in _compared():
        row = {"study": study.id, "metric": metric.label, "unit": metric.unit, "key": metric.key}
        for machine in names:
            found = records["metrics"].get(study.id, {}).get(machine) or {}
            if metric.key not in found:
                row[machine] = MISSING
            elif found[metric.key] is None:
                row[machine] = NOT_APPLICABLE
            else:
                row[machine] = found[metric.key]
        rows.append(row)
    return pd.DataFrame(_merge_same_key(rows, names), columns=["study", "metric", "unit", "key", *names])


def disagreements(table) -> list[str]:
    """Metrics that two studies report differently for the same machine (see ``_merge_same_key``)."""
    return [m for m in table.metric if m.endswith("'s)") and "(differs from " in m]


def scope_note(records) -> str:
    """What this comparison can say: with one machine under the results folder it compares
    nothing across machines, and says so."""
    names = records["machines"]
    root = records["params"].get("results_root", "results")
    if len(names) == 1:
        return (
            f"**Only one machine in `{root}/`: `{names[0]}`. This notebook therefore compares nothing "
            "across machines**: the table lists that machine's headline numbers and the figure shows its "
            "ceiling alone. Results of another machine (a GPU, a cluster) placed beside it turn both into "
            "a comparison."
        )
    return f"{len(names)} machines in `{root}/`: " + ", ".join(f"`{n}`" for n in names) + "."


def _seconds(value: float) -> str:
    """A time with the prefix that makes it readable (s, ms, µs)."""
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def formatted(table):
    """The table as a reader sees it: each value with its metric's format and an SI prefix
    for the units that have one (FLOP/s, B/s, s); ``missing`` and ``n/a`` as they are."""
    from ...plots import si
    from .. import REGISTRY

    fmt = {m.key: m.fmt for s in REGISTRY.values() for m in s.metrics}
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]

    def show(value, key, unit):
        if value in (MISSING, NOT_APPLICABLE) or isinstance(value, bool | str):
            return str(value)
        if unit == "s":
            return _seconds(float(value))
        if unit in ("FLOP/s", "B/s", "tokens/s"):
            return si(float(value), unit)
        return fmt.get(key, "{:.3g}").format(value)

    out = table[["study", "metric"]].copy()
    for machine in names:
        out[machine] = [show(v, k, u) for v, k, u in zip(table[machine], table["key"], table["unit"])]
    return out


def _values(rows, key, names) -> dict:
    """{machine: float} of one key, machines without a number left out."""
    if key not in rows.index:
        return {}
    return {n: float(rows.loc[key, n]) for n in names if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)}


def ceilings_takeaway(table) -> str:
    """The figure's title: what the measured ceilings say, machine against machine (or, with
    one machine, against its datasheet)."""
    from ...plots import si

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    measured = _values(rows, "matmul_ceiling_flops_per_s", names)
    peaks = _values(rows, "datasheet_peak_flops_per_s", names)
    shares = {n: measured[n] / peaks[n] for n in measured if peaks.get(n)}
    of_peak = (
        f"; {min(shares.values()):.0%}–{max(shares.values()):.0%} of the datasheet peak"
        if len(shares) > 1
        else "".join(f"; {n} reaches {v:.0%} of its datasheet peak" for n, v in shares.items())
    )
    if not measured:
        return "No machine has a measured matmul ceiling yet"
    if len(measured) == 1:
        ((name, value),) = measured.items()
        no_peak = "" if shares else " (no datasheet peak to compare with)"
        return (
            f"One machine only, nothing to compare:\n{name} measures {si(value, 'FLOP/s')}{no_peak}{of_peak}"
        )
    fast, slow = max(measured, key=measured.get), min(measured, key=measured.get)
    ratio = measured[fast] / measured[slow]
    shown = f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.3g}"
    return f"{fast}'s matmul ceiling is {shown}× {slow}'s{of_peak}"


def plot_ceilings(table):
    """Measured matmul ceiling next to the datasheet peak, per machine (TFLOP/s, log scale);
    a machine without a datasheet peak (a CPU) says so under its bar."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")  # the first study that declares the key
    series = (
        ("matmul_ceiling_flops_per_s", "measured matmul ceiling", "C0"),
        ("datasheet_peak_flops_per_s", "datasheet peak (dense)", "C1"),
    )
    width = 0.35
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(names) + 2.5), 3.8))
    numeric = [
        float(rows.loc[key, n]) / 1e12
        for key, _, _ in series
        for n in names
        if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)
    ]
    floor = 10 ** math.floor(math.log10(min(numeric) / 2)) if numeric else 0.01  # a labelled decade
    for i, (key, label, colour) in enumerate(series):
        drawn = False
        for j, machine in enumerate(names):
            value = rows.loc[key, machine]
            x = j + (i - 0.5) * width
            if value in (MISSING, NOT_APPLICABLE):
                why = "no datasheet\npeak" if value == NOT_APPLICABLE else "not run"
                ax.text(x, floor * 1.15, why, ha="center", va="bottom", fontsize=7, color="0.35")
                continue
            y = float(value) / 1e12
            ax.bar(x, y, width=width, color=colour, label=None if drawn else label)
            ax.text(x, y * 1.05, f"{y:.3g}", ha="center", va="bottom", fontsize=7)
            drawn = True
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_xlim(-0.7, len(names) - 0.3)
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.grid(axis="x", visible=False)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("TFLOP/s (log scale)")
    ax.set_title(ceilings_takeaway(table), fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left")
    return fig
