"""Machine-to-machine comparison: the metrics every study writes, side by side.

**Metrics schema.** Each study writes ``results/<machine>/<study>/metrics.json``; the
comparison reads the keys below (units in the names or the third column). Results measured
elsewhere can be dropped into ``results/<machine>/`` and compared as long as their
``metrics.json`` carries these keys; a missing study or key shows as *missing*.

=========  ==========================================  ===========  ==============================================
study      metric                                      unit         key in metrics.json
=========  ==========================================  ===========  ==============================================
mfu        measured matmul ceiling                     FLOP/s       ``matmul_ceiling_flops_per_s``
mfu        datasheet peak (dense)                      FLOP/s       ``peak.datasheet_flops_per_s``
mfu        ceiling / datasheet                         fraction     (derived from the two above)
mfu        MFU of the reference step (vs ceiling)      fraction     ``steady_mfu_vs_ceiling``
mfu        memory bandwidth (copy)                     B/s          ``memory_bandwidth_bytes_per_s``
overlap    all-reduce busbw at the largest message     B/s          ``all_reduce_busbw_largest_bytes_per_s``
overlap    fitted per-step latency α                   s            ``alpha_s``
fusion     LN+residual+dropout fusion speed-up         ×            ``ln_fusion[-1].ratio`` (largest dropout p)
fusion     saved-memory slope, naive / SDPA attention  —            ``attention_slopes.*_saved_bytes_slope``
recompute  full-recompute memory, share of none        fraction     ``policies[full].peak_step_added_bytes`` / none
recompute  full-recompute step time vs none            ×            ``policies[full].step_s`` / none
buckets    best bucket_cap_mb (real compute)           MiB          ``sweep`` rows, ``variant == default``
dataloader loader throughput, memmap / JSON files      ×            ``throughput`` rows (warm, 0 workers)
dataloader data stall, worst loader (real compute)     fraction     ``stall`` rows
=========  ==========================================  ===========  ==============================================
"""

from __future__ import annotations

from pathlib import Path

from .config import ParameterError, check_param_names

STUDY = "compare"
PARAMS = {"results_root": "folder holding results/<machine>/"}
MISSING = "missing"


def _get(metrics: dict, dotted: str):
    value = metrics
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _policy(m, name, key):
    for row in m.get("policies", []):
        if row.get("policy") == name:
            return row.get(key)
    return None


def _ratio(a, b):
    return a / b if a is not None and b else None


def _best_cap(m):
    rows = [r for r in m.get("sweep", []) if r.get("compute") == "real compute" and r.get("variant") == "default"]
    return min(rows, key=lambda r: r["step_s"])["bucket_cap_mb"] if rows else None


def _throughput(m, fmt):
    for r in m.get("throughput", []):
        if r["format"] == fmt and r["num_workers"] == 0 and r["cache"] == "warm":
            return r["samples_per_s"]
    return None


def _worst_stall(m):
    rows = [r for r in m.get("stall", []) if r.get("compute") == "real compute" and r.get("loader") != "in-memory"]
    return max(r["stall_fraction"] for r in rows) if rows else None


# (study, metric, unit, extractor) — the schema of the module docstring
METRICS = [
    ("mfu", "measured matmul ceiling", "FLOP/s", lambda m: m.get("matmul_ceiling_flops_per_s")),
    ("mfu", "datasheet peak (dense)", "FLOP/s", lambda m: _get(m, "peak.datasheet_flops_per_s")),
    ("mfu", "ceiling / datasheet", "fraction",
     lambda m: _ratio(m.get("matmul_ceiling_flops_per_s"), _get(m, "peak.datasheet_flops_per_s"))),
    ("mfu", "MFU of the reference step (vs ceiling)", "fraction", lambda m: m.get("steady_mfu_vs_ceiling")),
    ("mfu", "memory bandwidth (copy)", "B/s", lambda m: m.get("memory_bandwidth_bytes_per_s")),
    ("overlap", "all-reduce busbw at the largest message", "B/s", lambda m: m.get("all_reduce_busbw_largest_bytes_per_s")),
    ("overlap", "fitted per-step latency α", "s", lambda m: m.get("alpha_s")),
    ("fusion", "LN+residual+dropout fusion speed-up", "×",
     lambda m: max(m["ln_fusion"], key=lambda c: c["dropout_p"])["ratio"] if m.get("ln_fusion") else None),
    ("fusion", "saved-memory slope, naive attention", "—", lambda m: _get(m, "attention_slopes.naive_saved_bytes_slope")),
    ("fusion", "saved-memory slope, SDPA", "—", lambda m: _get(m, "attention_slopes.sdpa_saved_bytes_slope")),
    ("recompute", "full-recompute memory, share of none", "fraction",
     lambda m: _ratio(_policy(m, "full", "peak_step_added_bytes"), _policy(m, "none", "peak_step_added_bytes"))),
    ("recompute", "full-recompute step time vs none", "×",
     lambda m: _ratio(_policy(m, "full", "step_s"), _policy(m, "none", "step_s"))),
    ("buckets", "best bucket_cap_mb (real compute)", "MiB", _best_cap),
    ("dataloader", "throughput, memmap / JSON files", "×",
     lambda m: _ratio(_throughput(m, "memmap"), _throughput(m, "json_files"))),
    ("dataloader", "data stall, worst loader (real compute)", "fraction", _worst_stall),
]


def machines(results_root) -> list[str]:
    root = Path(results_root)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "comparison"
                  and any((p / s / "metrics.json").exists() for s in {x[0] for x in METRICS}))


def comparison_table(results_root):
    """One row per metric, one column per machine; a study a machine lacks is 'missing'."""
    import pandas as pd

    from .results import load_all

    found = {study: load_all(results_root, study) for study in dict.fromkeys(s for s, *_ in METRICS)}
    names = machines(results_root)
    rows = []
    for study, metric, unit, extract in METRICS:
        row = {"study": study, "metric": metric, "unit": unit}
        for machine in names:
            m = found[study].get(machine)
            value = extract(m) if m is not None else None
            row[machine] = MISSING if value is None else value
        rows.append(row)
    return pd.DataFrame(rows, columns=["study", "metric", "unit", *names])


def validate(params: dict) -> dict:
    check_param_names(params, PARAMS)
    root = Path(params["results_root"])
    if not root.is_dir():
        raise ParameterError(f"results_root {root} is not a folder")
    if not machines(root):
        raise ParameterError(f"no results/<machine>/<study>/metrics.json under {root}")
    return dict(params)


def measure(params: dict) -> dict:
    """Nothing is measured: the comparison collects every machine's metrics."""
    from .results import load_all

    p = validate(params)
    return {"study": STUDY, "params": p, "machines": machines(p["results_root"]),
            "metrics": {study: load_all(p["results_root"], study) for study in dict.fromkeys(s for s, *_ in METRICS)}}


def plot_ceilings(table):
    import matplotlib.pyplot as plt

    names = [c for c in table.columns if c not in ("study", "metric", "unit")]
    rows = table.set_index("metric")
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, label in enumerate(("measured matmul ceiling", "datasheet peak (dense)")):
        vals = [rows.loc[label, n] if rows.loc[label, n] != MISSING else 0 for n in names]
        ax.bar([j + i * 0.4 for j in range(len(names))], [v / 1e12 for v in vals], width=0.4, label=label)
    ax.set_xticks([j + 0.2 for j in range(len(names))])
    ax.set_xticklabels(names)
    ax.set_yscale("symlog")
    ax.set_ylabel("TFLOP/s (0: none published)")
    ax.set_title("Measured matmul ceiling vs datasheet peak per machine")
    ax.legend(fontsize=8)
    return fig
