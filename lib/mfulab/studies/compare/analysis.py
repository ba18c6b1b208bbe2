"""The comparison table and its figure (see the package docstring for the schema)."""

from __future__ import annotations

import math
from pathlib import Path

from mfulab.studies.compare import drift as drift_mod
from mfulab.studies.compare import hosts
from mfulab.studies.compare import matrix as matrix_mod
from mfulab.studies.compare.drift import MISSING, NOT_APPLICABLE
from mfulab.studies.compare.figures import _values, ceilings_takeaway, measured_ceilings, plot_ceilings  # noqa: F401 (all but _values: the notebook's names)
from mfulab.studies.compare.matrix import machine_bound, other_rows_html, verdict_note, verdict_table  # noqa: F401 (the notebook's names)


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
        "drift": {
            **{study: drift_mod.stability_drift(p.results_root, study, names) for study in studies},
            "calibration": drift_mod.calibration_drift(p.results_root, names),
        },
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
        "stability_sizes": {
            study: drift_mod.stability_sizes(p.results_root, study, names) for study in studies
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

    def studies_of(study, key):  # the studies a row's number comes from, the calibration's own first
        return (["calibration"] if key in drift_mod.CALIBRATION_KEYS else []) + [
            x.strip() for x in study.split(",")
        ]

    def caveat(study, machine, key):
        d = max((drift.get(s, {}).get(machine, {}).get(key, 0.0) for s in studies_of(study, key)), default=0)
        return f" (moves {d:.0%} between fresh runs)" if d > RUN_TO_RUN_DRIFT else ""

    declared = (records or {}).get("declared_drift", {})

    def machine_drift(study, key, machine) -> float:
        """The drift one machine's stability run saw for the number, or its study declares for it
        (``Metric.drift_param``). An MFU divides by the calibration's matmul ceiling, which every
        fresh run of a study reads fixed: the ceiling's own drift (the calibration's stability
        run) counts too."""
        ceiling = drift.get("calibration", {}).get(machine, {}).get("matmul_ceiling_flops_per_s", 0.0)
        return max(
            [
                source.get(s, {}).get(machine, {}).get(key, 0.0)
                for source in (drift, declared)
                for s in studies_of(study, key)
            ]
            + [ceiling if "mfu" in key.split("_") else 0.0]
        )

    def widest_drift(study, key):
        """The widest drift any machine saw for the number (:func:`machine_drift`): a difference
        between machines must pass it."""
        return max((machine_drift(study, key, m) for m in names), default=0.0)

    def spreads(study, key, row, machines=names) -> list[float]:
        """Each machine's max − min between its fresh runs of the number, absolute: its own drift
        (:func:`machine_drift`, at least the assumed one) × its own value (for shares, in points)."""
        return [
            max(machine_drift(study, key, m), RUN_TO_RUN_DRIFT) * abs(float(row[m]))
            for m in machines
            if row[m] not in (MISSING, NOT_APPLICABLE) and not isinstance(row[m], bool | str)
        ]

    def exact(study, key):
        """No fresh run of any machine moved it (a formula, a count): every stability run that has
        the key saw 0 drift, and it is not the calibration's (whose runs do move it)."""
        seen = [
            drift[s][m][key]
            for s in studies_of(study, key)
            for m in names
            if key in drift.get(s, {}).get(m, {})
        ]
        return bool(seen) and max(seen) == 0.0 and key not in drift_mod.CALIBRATION_KEYS

    keys = set(table["key"])
    bounds = {k: (f"{k}_lo", f"{k}_hi") for k in keys if f"{k}_lo" in keys and f"{k}_hi" in keys}
    hidden = {b for pair in bounds.values() for b in pair}
    by_key = table.drop_duplicates("key").set_index("key")

    def interval(key, machines=names):
        if key not in bounds:
            return None
        lo, hi = (by_key.loc[b] for b in bounds[key])
        return [
            (float(lo[m]), float(hi[m]))
            for m in machines
            if lo[m] not in (MISSING, NOT_APPLICABLE) and hi[m] not in (MISSING, NOT_APPLICABLE)
        ]

    def with_interval(text, machine, key, unit):
        if key not in bounds or by_key.loc[bounds[key][0], machine] in (MISSING, NOT_APPLICABLE):
            return text
        lo, hi = (show(by_key.loc[b, machine], b, unit) for b in bounds[key])
        return f"{text} [{lo}, {hi}]"

    kept = table[~table["key"].isin(hidden)].reset_index(drop=True)
    out = kept[["study", "metric"]].copy()
    for machine in names:
        out[machine] = [
            with_interval(show(v, k, u), machine, k, u)
            + ("" if v in (MISSING, NOT_APPLICABLE) else caveat(st, machine, k))
            for v, k, u, st in zip(kept[machine], kept["key"], kept["unit"], kept["study"])
        ]
    if len(names) > 1:
        studies = [[x.strip() for x in st.split(",")] for st in kept["study"]]  # a row's studies
        # an oversubscribed run measures a job that took turns on its cores: its machine is left
        # out of the row's comparison, the others are compared (as the verdict matrix does)
        crowded = [hosts.not_comparable(records, ss) if records is not None else [] for ss in studies]

        def across(row, k, u, st, left_out, ss):
            machines = [m for m in names if m not in left_out]
            if len(machines) < 2:
                return f"not compared ({', '.join(left_out)} oversubscribed)"
            # where the machines ran the study at different code, a difference may be the code's
            code = records is not None and any(matrix_mod.other_code(records, x, machines) for x in ss)
            if code:
                return "not compared (other code)"
            cell = drift_mod.across_cell(
                [row[m] for m in machines],
                u,
                max(widest_drift(st, k), RUN_TO_RUN_DRIFT),
                exact(st, k),
                interval(k, machines),
                spreads(st, k, row, machines) if u == "fraction" else None,
            )
            return cell + (f" ({', '.join(left_out)} left out: oversubscribed)" if left_out else "")

        out["across machines"] = [
            across(row, k, u, st, left_out, ss)
            for (_, row), k, u, st, left_out, ss in zip(
                kept.iterrows(), kept["key"], kept["unit"], kept["study"], crowded, studies
            )
        ]
        out["highest ÷ lowest"] = [
            drift_mod.highest_over_lowest({m: row[m] for m in names}) for _, row in kept.iterrows()
        ]
        out["÷ cores"] = [
            hosts.per_core_scaling({m: row[m] for m in names}, u, records)
            if records
            and not hosts.not_comparable(records, ss)
            and not any(matrix_mod.other_code(records, x, names) for x in ss)
            else ""
            for (_, row), u, ss in zip(kept.iterrows(), kept["unit"], studies)
        ]
        if records is not None:
            # the studies whose machines ran different code (hosts.revisions)
            out["other code"] = [
                "; ".join(f"{x}: {c}" for x in ss if (c := matrix_mod.other_code(records, x, names)))
                for ss in studies
            ]
            # a machine whose run of the study had more ranks than cores
            out["not comparable on"] = [", ".join(c) for c in crowded]
    return out


def measured_gloo(table) -> dict:
    """``{machine: (largest all-reduce busbw, copy bandwidth)}`` in B/s, where a machine has both:
    chapter 02's gloo run and the calibration's memory copy. Gloo on one host runs over TCP on the
    loopback interface (it has no shared-memory transport), which copies every byte through the
    kernel at least once, so the copy bandwidth is an upper bound on it, not its link."""
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    copy = measured_copy(table)
    busbw = _values(rows, "all_reduce_busbw_largest_bytes_per_s", names)
    return {n: (busbw[n], copy[n]) for n in names if n in busbw and n in copy}


def measured_copy(table) -> dict:
    """``{machine: copy bandwidth}`` in B/s (the calibration's large tensor copy, bytes read +
    written), where a machine has one."""
    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = table.drop_duplicates("key").set_index("key")
    return _values(rows, "memory_bandwidth_bytes_per_s", names)
