"""Analysis of the ``dataloader`` study: the write, sweep and stall tables, the claims
(B11, B2 data part, B12) and the headline metrics.

Every function reads the plain records of ``bench.measure`` (here or from another machine);
claim verdicts are computed from the numbers. Records written before the restructure carry
``mb_per_s`` (which was MiB/s) and ``cpu_count``; they are read as ``mib_per_s`` and
``usable_cpus``.
"""

from __future__ import annotations

from ... import verdicts as claims_mod
from ...results import run_identity
from ...timing import compare_timings, summarize
from ...verdicts import Claim
from .stated import B2_STATED, B11_STATED


def usable_cpus(records) -> int:
    """Cores the measuring process could run on (older records: ``cpu_count``)."""
    return records.get("usable_cpus", records.get("cpu_count"))


def sweep_table(records):
    import pandas as pd

    df = pd.DataFrame(records["sweep"])
    if "mb_per_s" in df and "mib_per_s" not in df:  # older records: the value was MiB/s already
        df = df.rename(columns={"mb_per_s": "mib_per_s"})
    return df


def written_table(records):
    import pandas as pd

    return pd.DataFrame(records["written"].values())


def stall_table(records):
    import pandas as pd

    rows = []
    for run in records["stall"]:
        steps = run["steps"][1:]  # the first step includes the loader start-up
        wait = sum(s["wait_s"] for s in steps)
        total = sum(s["step_s"] for s in steps)
        rows.append(
            {
                "loader": run["format"],
                "compute": run["compute"],
                "num_workers": run["num_workers"],
                "steps": len(steps),
                "stall_fraction": wait / total,
                "median_wait_s": summarize([s["wait_s"] for s in steps]).median_s,
                "median_step_s": summarize([s["step_s"] for s in steps]).median_s,
                "first_step_wait_s": run["steps"][0]["wait_s"],
            }
        )
    return pd.DataFrame(rows)


def throughput(records, fmt: str, workers: int, persistent: bool = False):
    """Per-epoch samples/s (warm) of one setting, as a Timing-like summary of epoch times per sample."""
    rows = [
        r
        for r in records["sweep"]
        if r["format"] == fmt
        and r["num_workers"] == workers
        and r["persistent_workers"] == persistent
        and r["cache"] == "warm"
    ]
    return summarize([r["epoch_s"] / r["samples"] for r in rows], label=f"{fmt}/{workers}")


def _b11(records) -> Claim:
    c = compare_timings(throughput(records, "json_files", 0), throughput(records, "tar", 0))
    workers = records["params"]["num_workers"]
    best_workers = max(workers, key=lambda w: 1 / throughput(records, "tar", w).median_s)
    cpus = usable_cpus(records)
    lo, hi = B11_STATED["workers_enough"]
    return Claim(
        "B11",
        "tar shards (webdataset) instead of many small files give ≥5% throughput; 8–16 workers help",
        f"warm epochs, num_workers=0, {records['corpus']['count']} samples; worker counts "
        f"{workers} on {cpus} usable cores",
        claims_mod.verdict_from_interval(c.ratio_lo, c.ratio_hi, threshold=B11_STATED["min_throughput_gain"]),
        f"tar / json files throughput {c.ratio:.2f}× [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] "
        "(epochs as samples); "
        f"best worker count for tar here: {best_workers} ({lo}–{hi} workers need {lo}–{hi} spare cores; "
        f"this process may use {cpus})",
    )


def _b2(records, compute: str, d, mem_stall: float) -> Claim:
    worst = d.loc[d.stall_fraction.idxmax()]
    shows = worst.stall_fraction > 0.05 and mem_stall < 0.02
    emulated = (
        f"a timed wait of {records['params']['stall_emulated_step_s']} s, "
        if compute.startswith("emulated")
        else ""
    )
    return Claim(
        "B2",
        "data wait shows up as time at the start of each step "
        f"({B2_STATED['case_study_wait_s']} s in the case study)",
        f"per-step wait for the next batch, {compute} ({emulated}"
        f"num_workers={int(worst.num_workers)}), per loader vs in-memory",
        "confirmed" if shows else "inconclusive on this machine",
        f"stall: in-memory {mem_stall:.1%}, worst {worst.loader} {worst.stall_fraction:.1%} of step time "
        f"(median wait {worst.median_wait_s * 1e3:.1f} ms at the start of a "
        f"{worst.median_step_s * 1e3:.0f} ms step); thresholds 5% and 2%",
    )


def _b12(records, mem) -> Claim:
    steps = [s["step_s"] for s in mem["steps"][1:]]
    spikes = [s["step_s"] for s in mem["steps"][1:] if s["checkpoint"]]
    calm = [s["step_s"] for s in mem["steps"][1:] if not s["checkpoint"]]
    ratio = summarize(spikes).median_s / summarize(calm).median_s if spikes and calm else float("nan")
    return Claim(
        "B12",
        "synchronous checkpoint writes cause periodic step-time spikes",
        f"synchronous torch.save + fsync every {records['params']['checkpoint_every']} steps "
        "(in-memory loader)",
        "confirmed" if ratio > 1.2 else "inconclusive on this machine",
        f"steps with a write take {ratio:.2f}× the median of the others ({len(spikes)} of {len(steps)} "
        "steps); threshold 1.2×; a background write would move this off the step",
    )


def claims(records) -> list[Claim]:
    out = []
    fmts = records["params"]["formats"]
    if "tar" in fmts and "json_files" in fmts:
        out.append(_b11(records))
    st = stall_table(records)
    mem_stall = st[st.loader == "in-memory"].stall_fraction.iloc[0]
    for compute, d in st[st.loader != "in-memory"].groupby("compute"):
        out.append(_b2(records, compute, d, mem_stall))
    mem = next(r for r in records["stall"] if r["format"] == "in-memory")
    if any(s["checkpoint"] for s in mem["steps"]):
        out.append(_b12(records, mem))
    return out


def best_warm_setting(records):
    """Per format, the warm samples/s of its best loader setting (the median over epochs of
    each setting — workers, persistent workers — then the best setting)."""
    warm = sweep_table(records).query("cache == 'warm'")
    per_setting = warm.groupby(["format", "num_workers", "persistent_workers"]).samples_per_s.median()
    return per_setting.groupby("format").max()


def throughput_rows(records) -> list[dict]:
    """Median samples/s per format × worker count × persistent workers × cache."""
    return (
        sweep_table(records)
        .groupby(["format", "num_workers", "persistent_workers", "cache"])
        .samples_per_s.median()
        .reset_index()
        .to_dict(orient="records")
    )


def _warm_throughput(rows, fmt: str):
    for r in rows:
        if r["format"] == fmt and r["num_workers"] == 0 and r["cache"] == "warm":
            return r["samples_per_s"]
    return None


def memmap_over_json_files_throughput(rows) -> float | None:
    """Warm samples/s at ``num_workers=0``, memmap / JSON files (None when either is missing)."""
    memmap, json_files = _warm_throughput(rows, "memmap"), _warm_throughput(rows, "json_files")
    return memmap / json_files if memmap is not None and json_files else None


def worst_stall_fraction_real(stall_rows) -> float | None:
    """The largest stall fraction of a loader (not in-memory) under real compute."""
    rows = [r for r in stall_rows if r["compute"] == "real compute" and r["loader"] != "in-memory"]
    return max(r["stall_fraction"] for r in rows) if rows else None


def headline_metrics(records) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    sw = sweep_table(records)
    rows = throughput_rows(records)
    stall = stall_table(records).to_dict(orient="records")
    return {
        **run_identity(records),
        "usable_cpus": usable_cpus(records),
        "corpus": records["corpus"],
        "written": records["written"],
        "all_epochs_intact": bool(sw.intact.all()),
        "throughput": rows,
        "stall": stall,
        "memmap_over_json_files_throughput": memmap_over_json_files_throughput(rows),
        "worst_stall_fraction_real": worst_stall_fraction_real(stall),
        "claims": claims_mod.records(claims(records)),
    }


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    return claims(records), headline_metrics(records)
