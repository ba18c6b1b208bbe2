"""The comparison table and its figure (see the package docstring for the schema)."""

from __future__ import annotations

import math
from pathlib import Path

from mfulab.studies.compare import drift as drift_mod
from mfulab.studies.compare import hosts
from mfulab.studies.compare.drift import MISSING, NOT_APPLICABLE
from mfulab.studies.compare.matrix import verdict_note, verdict_table  # noqa: F401 (the notebook's names)


def _compared():
    """(study, metric) pairs of every registered study except the comparison itself."""
    from mfulab.studykit.registry import REGISTRY

    return [(s, m) for s in REGISTRY.values() if not s.reads_results for m in s.metrics]


def machines(results_root) -> list[str]:
    """Machines with at least one study's metrics under ``results_root``."""
    from mfulab.studykit.registry import REGISTRY

    root = Path(results_root)
    studies = {s.id for s in REGISTRY.values() if not s.reads_results}
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and p.name != "comparison" and any((p / s / "metrics.json").exists() for s in studies)
    )


def collect(p) -> dict:
    """Nothing is measured: every machine's metrics and the published references, as records."""
    from mfulab.results import load_all
    from mfulab.studies.compare import published

    studies = dict.fromkeys(s.id for s, _ in _compared())
    names = machines(p.results_root)
    return {
        "study": "compare",
        "params": p.to_dict(),
        "machines": names,
        "metrics": {study: load_all(p.results_root, study) for study in studies},
        "drift": {study: drift_mod.stability_drift(p.results_root, study, names) for study in studies},
        "declared_drift": {
            s.id: drift_mod.declared_drift(
                p.results_root, s.id, names, {m.key: m.drift_param for m in s.metrics if m.drift_param}
            )
            for s in {s.id: s for s, _ in _compared()}.values()
        },
        "flips": {study: drift_mod.stability_flips(p.results_root, study, names) for study in studies},
        "stability_runs": {
            study: drift_mod.stability_runs(p.results_root, study, names) for study in studies
        },
        "hosts": {n: hosts.host(p.results_root, n) for n in names},
        "ranks": {n: hosts.ranks_per_study(p.results_root, n) for n in names},
        "revisions": {n: hosts.revisions(p.results_root, n) for n in names},
        "published": published.load(),
        "published_runs": published.published_runs(p.results_root, names),
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
        label = metric.label + _convention_note(records, study.id, metric.key)
        row = {"study": study.id, "metric": label, "unit": metric.unit, "key": metric.key}
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


def _convention_note(records, study: str, key: str) -> str:
    """An MFU depends on the FLOPs counted per token: the convention each machine's study
    wrote (``flops_convention``), named beside the label of every MFU metric."""
    if "mfu" not in key.split("_"):
        return ""
    found = records["metrics"].get(study, {})
    used = {
        m: found[m]["flops_convention"] for m in records["machines"] if "flops_convention" in found.get(m, {})
    }
    if not used:
        return ", FLOPs convention not recorded"
    if len(set(used.values())) == 1:
        return f", {next(iter(used.values()))} FLOPs convention"
    return ", FLOPs convention " + ", ".join(f"{c} ({m})" for m, c in used.items())


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
            "across machines measured here**: the table lists that machine's headline numbers, and the "
            "section on published measurements reads its matmul ceiling against what other machines "
            "reach (each row labelled *published*, with its source). Results of another machine (a GPU, "
            "a cluster) placed beside it turn the table into a comparison."
        )
    notes = [hosts.same_host_note(records), hosts.oversubscribed_note(records), hosts.revision_note(records)]
    return (
        f"{len(names)} machines in `{root}/`: "
        + ", ".join(f"`{n}`" for n in names)
        + "."
        + "".join(f" {n}" for n in notes if n)
    )


def _seconds(value: float) -> str:
    """A time with the prefix that makes it readable (s, ms, µs)."""
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


SHARE_FORMAT = "{:.1%}"  # every share the same way, whatever format its study declared


def _is_share(key: str, unit: str) -> bool:
    return unit == "fraction" or key.endswith(("_share", "_fraction"))


def formatted(table, records=None):
    """The table as a reader sees it: each value with its metric's format and an SI prefix
    for the units that have one (FLOP/s, B/s, s), every share as a percentage, every ratio
    with its ×; ``missing`` and ``n/a`` as they are. With ``records``, a value whose drift
    between fresh runs (the study's ``stability.json``) exceeds the run-to-run drift the
    comparisons assume (``timing.RUN_TO_RUN_DRIFT``) says so beside it."""
    from mfulab.measure.timing import RUN_TO_RUN_DRIFT
    from mfulab.studykit.registry import REGISTRY
    from mfulab.units import si

    fmt = {m.key: m.fmt for s in REGISTRY.values() for m in s.metrics}
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    drift = (records or {}).get("drift", {})

    def show(value, key, unit):
        if value in (MISSING, NOT_APPLICABLE) or isinstance(value, bool | str):
            return str(value)
        if unit == "s":
            return _seconds(float(value))
        if unit in ("FLOP/s", "B/s", "tokens/s"):
            return si(float(value), unit)
        if _is_share(key, unit):
            return SHARE_FORMAT.format(value)
        text = fmt.get(key, "{:.3g}").format(value)
        return text if unit != "×" or text.endswith("×") else text + "×"

    def caveat(study, machine, key):
        d = max(
            (drift.get(s.strip(), {}).get(machine, {}).get(key, 0.0) for s in study.split(",")), default=0
        )
        return f" (moves {d:.0%} between fresh runs)" if d > RUN_TO_RUN_DRIFT else ""

    declared = (records or {}).get("declared_drift", {})

    def widest_drift(study, key):
        """The widest drift any machine's stability run saw for the number, or its study declares
        for it (``Metric.drift_param``): a difference between machines must pass both."""
        return max(
            (
                source.get(s.strip(), {}).get(m, {}).get(key, 0.0)
                for source in (drift, declared)
                for s in study.split(",")
                for m in names
            ),
            default=0.0,
        )

    out = table[["study", "metric"]].copy()
    for machine in names:
        out[machine] = [
            show(v, k, u) + ("" if v in (MISSING, NOT_APPLICABLE) else caveat(st, machine, k))
            for v, k, u, st in zip(table[machine], table["key"], table["unit"], table["study"])
        ]
    if len(names) > 1:
        out["across machines"] = [
            drift_mod.across_drift([row[m] for m in names], max(widest_drift(st, k), RUN_TO_RUN_DRIFT))
            for (_, row), k, st in zip(table.iterrows(), table["key"], table["study"])
        ]
        out["highest ÷ lowest"] = [
            drift_mod.highest_over_lowest({m: row[m] for m in names}) for _, row in table.iterrows()
        ]
        if records is not None:  # a machine whose run of the study had more ranks than cores
            out["not comparable on"] = [
                ", ".join(
                    sorted({m for s in st.split(",") for m in hosts.oversubscribed(records, s.strip())})
                )
                for st in table["study"]
            ]
            # an oversubscribed run measures a job that took turns on its cores: its difference
            # from another machine says nothing, as the verdict matrix leaves it out of `differs`
            out["across machines"] = [
                f"not compared ({where} oversubscribed)" if where and verdict else verdict
                for where, verdict in zip(out["not comparable on"], out["across machines"])
            ]
    return out


def _values(rows, key, names) -> dict:
    """{machine: float} of one key, machines without a number left out."""
    if key not in rows.index:
        return {}
    return {n: float(rows.loc[key, n]) for n in names if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)}


def measured_ceilings(table) -> dict:
    """``{machine: (matmul ceiling, peak or None)}`` in FLOP/s, from the table's
    ``matmul_ceiling_flops_per_s`` and ``datasheet_peak_flops_per_s`` (a GPU's datasheet, a CPU's
    ISA peak); a machine without a ceiling is left out."""
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    peaks = _values(rows, "datasheet_peak_flops_per_s", names)
    return {n: (c, peaks.get(n)) for n, c in _values(rows, "matmul_ceiling_flops_per_s", names).items()}


def ceilings_takeaway(table) -> str:
    """The figure's title: what the measured ceilings say, machine against machine (or, with
    one machine, against its peak: a GPU's datasheet, a CPU's ISA peak)."""
    from mfulab.units import si

    ceilings = measured_ceilings(table)
    measured = {n: c for n, (c, _) in ceilings.items()}
    shares = {n: c / peak for n, (c, peak) in ceilings.items() if peak}
    of_peak = (
        f"; {min(shares.values()):.0%}–{max(shares.values()):.0%} of the peak (datasheet or ISA)"
        if len(shares) > 1
        else "".join(f"; {n} reaches {v:.0%} of its peak (datasheet or ISA)" for n, v in shares.items())
    )
    if not measured:
        return "No machine has a measured matmul ceiling yet"
    if len(measured) == 1:
        ((name, value),) = measured.items()
        no_peak = "" if shares else " (no peak to compare with)"
        return (
            f"One machine only, nothing to compare:\n{name} measures {si(value, 'FLOP/s')}{no_peak}{of_peak}"
        )
    fast, slow = max(measured, key=measured.get), min(measured, key=measured.get)
    ratio = measured[fast] / measured[slow]
    shown = f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.3g}"
    return f"{fast}'s matmul ceiling is {shown}× {slow}'s{of_peak}"


def plot_ceilings(table):
    """Measured matmul ceiling next to the peak, per machine (TFLOP/s, log scale): a GPU's
    dense datasheet peak, a CPU's fp32 peak from its ISA (mfu's ``cpu_isa_peak``), as point
    markers: on a log axis a bar's length depends on where the axis starts, a marker's height
    does not. A machine without a peak says so."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")  # the first study that declares the key
    series = (
        ("matmul_ceiling_flops_per_s", "measured matmul ceiling", "C0", "o"),
        ("datasheet_peak_flops_per_s", "peak: datasheet (GPU) or ISA (CPU)", "C1", "D"),
    )
    offset = 0.15
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(names) + 2.5), 3.8))
    numeric = [
        float(rows.loc[key, n]) / 1e12
        for key, *_ in series
        for n in names
        if rows.loc[key, n] not in (MISSING, NOT_APPLICABLE)
    ]
    low = 10 ** math.floor(math.log10(min(numeric) / 2)) if numeric else 0.01  # a labelled decade
    high = 10 ** math.ceil(math.log10(max(numeric) * 2)) if numeric else 1.0
    for i, (key, label, colour, marker) in enumerate(series):
        drawn = False
        for j, machine in enumerate(names):
            value = rows.loc[key, machine]
            x = j + (i - 0.5) * 2 * offset
            if value in (MISSING, NOT_APPLICABLE):
                why = "no peak" if value == NOT_APPLICABLE else "not run"
                ax.text(x, low * 1.15, why, ha="center", va="bottom", fontsize=7, color="0.35")
                continue
            y = float(value) / 1e12
            ax.plot(x, y, marker, color=colour, markersize=8, label=None if drawn else label)
            ax.annotate(
                f"{y:.3g}", (x, y), xytext=(7, 0), textcoords="offset points", va="center", fontsize=7
            )
            drawn = True
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_xlim(-0.7, len(names) - 0.3)
    ax.grid(axis="x", visible=False)
    if numeric and max(numeric) / min(numeric) < 20:  # one kind of machine: a linear axis from 0 reads best
        ax.set_ylim(0, max(numeric) * 1.25)
        ax.set_ylabel("TFLOP/s")
    else:  # a CPU beside a GPU spans decades
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("TFLOP/s (log scale)")
    ax.set_title(ceilings_takeaway(table), fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left")
    return fig
