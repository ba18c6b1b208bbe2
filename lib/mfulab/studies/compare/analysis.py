"""The comparison table and its figure (see the package docstring for the schema)."""

from __future__ import annotations

from pathlib import Path

MISSING = "missing"


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


def comparison_table(records):
    """One row per declared metric, one column per machine; what a machine lacks is 'missing'."""
    import pandas as pd

    names = records["machines"]
    rows = []
    for study, metric in _compared():
        row = {"study": study.id, "metric": metric.label, "unit": metric.unit, "key": metric.key}
        for machine in names:
            value = records["metrics"].get(study.id, {}).get(machine, {}).get(metric.key)
            row[machine] = MISSING if value is None else value
        rows.append(row)
    return pd.DataFrame(rows, columns=["study", "metric", "unit", "key", *names])


def plot_ceilings(table):
    """Measured matmul ceiling next to the datasheet peak, per machine (TFLOP/s, log scale)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")  # the first study that declares the key
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    width = 0.4
    for i, (key, label) in enumerate(
        (
            ("matmul_ceiling_flops_per_s", "measured matmul ceiling"),
            ("datasheet_peak_flops_per_s", "datasheet peak (dense)"),
        )
    ):
        values = [rows.loc[key, n] for n in names]
        xs = [j + i * width for j, v in enumerate(values) if v != MISSING]
        ys = [v / 1e12 for v in values if v != MISSING]
        if ys:
            ax.bar(xs, ys, width=width, label=label)
        for j, v in enumerate(values):
            if v == MISSING:
                ax.text(
                    j + i * width,
                    0,
                    "none\npublished" if i else "missing",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_xticks([j + width / 2 for j in range(len(names))])
    ax.set_xticklabels(names)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("TFLOP/s (log scale)")
    ax.set_title("Measured matmul ceiling vs datasheet peak per machine")
    ax.legend(fontsize=8)
    return fig
