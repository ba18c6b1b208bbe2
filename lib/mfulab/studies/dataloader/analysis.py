"""Analysis of the ``dataloader`` study: the write, sweep, cold, stall and checkpoint tables,
and the headline metrics (the claims: ``claims.outcome``).

Every function reads the plain records of ``bench.measure`` (here or from another machine).
Records written before the restructure carry ``mb_per_s`` (which was MiB/s) and
``cpu_count``; they are read as ``mib_per_s`` and ``usable_cpus``.
"""

from __future__ import annotations

from mfulab.measure.timing import summarize
from mfulab.studies.dataloader.stall import STEP, STEP_WITH_CHECKPOINT
from mfulab.studies.dataloader.throughput import (
    cold_timing,
    format_comparison,
    nonzero_categories,
    step_split,
)


def sweep_table(records):
    import pandas as pd

    df = pd.DataFrame(records["sweep"])
    if "mb_per_s" in df and "mib_per_s" not in df:  # older records: the value was MiB/s already
        df = df.rename(columns={"mb_per_s": "mib_per_s"})
    return df


def written_table(records):
    """Per format: files, bytes on disk, seconds to write, and bytes on disk per sample."""
    import pandas as pd

    df = pd.DataFrame(records["written"].values())
    df["bytes_per_sample"] = df.bytes / records["corpus"]["count"]
    return df


def cold_table(records):
    """Per format, over the cold rounds: median samples/s with its quartiles, µs per sample,
    the files one epoch opened and the largest resident fraction after eviction."""
    import pandas as pd

    sw = sweep_table(records)
    cold = sw[sw.cache == "cold"]
    rows = []
    for fmt in [f for f in records["params"]["formats"] if f in set(cold.format)]:
        d, t = cold[cold.format == fmt], cold_timing(records, fmt)
        rows.append(
            {
                "format": fmt,
                "rounds": len(d),
                "samples_per_s": 1 / t.median_s,
                "samples_per_s_q1": 1 / t.q3_s,
                "samples_per_s_q3": 1 / t.q1_s,
                "us_per_sample": t.median_s * 1e6,
                "files_opened_per_epoch": int(d.files_opened.median()),
                "max_resident_after_evict": d.resident_after_evict.max(),
            }
        )
    return pd.DataFrame(rows)


def stall_table(records):
    """Per stall run: the data stall (wait for the batch / step time) and the split of step
    time into the four categories of B2, with how many of them are non-zero."""
    import pandas as pd

    floor = records["params"].get("nonzero_share", 0.001)
    rows = []
    for run in records["stall"]:
        steps = run["steps"][1:]  # the first step includes the loader start-up
        split = step_split(run)
        total = sum(split.values())
        rows.append(
            {
                "loader": run["format"],
                "compute": run["compute"],
                "num_workers": run["num_workers"],
                "steps": len(steps),
                "stall_fraction": split["data wait"] / total,
                **{f"{k.replace(' ', '_')}_share": split[k] / total for k in split},
                "nonzero_categories": len(nonzero_categories(run, floor)),
                "median_wait_s": summarize([s["wait_s"] for s in steps]).median_s,
                "median_step_s": summarize([s["step_s"] for s in steps]).median_s,
                "first_step_wait_s": run["steps"][0]["wait_s"],
            }
        )
    return pd.DataFrame(rows)


def contention_note(records, stall) -> str:
    """The real-compute runs' median step with loader workers against the one with batches in
    memory (``stall``: :func:`stall_table`): the workers run on the step's own cores here, so the
    step's compute slows and B2's split files it under slow operators; it is host CPU contention,
    not a kernel's inefficiency (round thirty-two's reader of chapter 06). Empty without both."""
    real = stall[stall.compute == "real compute"]
    memory, loaders = (
        real[real.loader == "in-memory"],
        real[(real.loader != "in-memory") & (real.num_workers > 0)],
    )
    if memory.empty or loaders.empty:
        return ""
    base = float(memory.median_step_s.iloc[0])
    lo, hi = float(loaders.median_step_s.min()), float(loaders.median_step_s.max())
    return (
        f"**Host CPU contention.** The median real-compute step takes {base * 1e3:.0f} ms with the batches "
        f"in memory and {lo * 1e3:.0f}–{hi * 1e3:.0f} ms beside {int(loaders.num_workers.max())} loader "
        f"workers ({lo / base:.1f}–{hi / base:.1f}×): the workers share this box's "
        f"{records.get('usable_cpus', '?')} usable CPUs with the step, whose compute slows, and B2's split "
        f"counts that as slow operators ({loaders.slow_operators_share.min():.0%}–"
        f"{loaders.slow_operators_share.max():.0%} of the step with workers, "
        f"{float(memory.slow_operators_share.iloc[0]):.0%} without; the data wait at most "
        f"{loaders.data_wait_share.max():.1%}). It is CPU contention, not a slow kernel: on a GPU node the "
        "workers run on host cores the accelerator's step does not use."
    )


def checkpoint_table(records):
    """B12: the step with and without a synchronous checkpoint, medians and quartiles (ms)."""
    import pandas as pd

    t = records["checkpoint"]["timings"]
    return pd.DataFrame(
        [
            {
                "variant": k,
                "median_ms": t[k]["median_s"] * 1e3,
                "q1_ms": t[k]["q1_s"] * 1e3,
                "q3_ms": t[k]["q3_s"] * 1e3,
                "rounds": t[k]["n"],
            }
            for k in (STEP, STEP_WITH_CHECKPOINT)
        ]
    )


def best_warm_setting(records):
    """Per format, the warm samples/s of its best loader setting: each setting's median over
    its epochs, then the largest of those medians (the setting — workers, persistent workers
    — that read fastest)."""
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


def tar_over_json_files_cold_throughput(records) -> float | None:
    """Cold samples/s, tar shards / JSON files (B11 on the local disk; None without cold rounds)."""
    fmts = set(records["params"]["formats"])
    if not {"tar", "json_files"} <= fmts or not any(r["cache"] == "cold" for r in records["sweep"]):
        return None
    return format_comparison(records).ratio


def warm_summary(sweep):
    """Per warm setting (format, workers, persistent, pinned): the median samples/s, MiB/s and
    time to the first batch over the epochs of :func:`sweep_table`, and how many epochs ran."""
    return (
        sweep[sweep.cache == "warm"]
        .groupby(["format", "num_workers", "persistent_workers", "pin_memory"])
        .agg(
            samples_per_s=("samples_per_s", "median"),
            mib_per_s=("mib_per_s", "median"),
            first_batch_s=("first_batch_s", "median"),
            epochs=("epoch", "count"),
        )
        .reset_index()
    )


def restart_table(sweep):
    """Time to the first batch per warm epoch with workers, by format and persistent_workers:
    what an epoch restart costs."""
    restart = sweep[(sweep.cache == "warm") & (sweep.num_workers > 0)].pivot_table(
        index=["format", "persistent_workers"], columns="epoch", values="first_batch_s"
    )
    return restart.reset_index()
