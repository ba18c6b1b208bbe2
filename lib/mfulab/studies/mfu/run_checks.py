"""The measured run of the ``mfu`` study checked against itself: the matmul ceiling timed in the
training process (``bench.ceiling_probe``, the headline's denominator) against a fresh
process's and the cached calibration's, carried into the headline's range, and the waits demo
(the steps again behind a sleeping loader), which pulls global MFU from local. Both read the
plain records of ``bench.measure``."""

from __future__ import annotations

from mfulab.studies.mfu.time_split import breakdown


def ceiling_drift(records: dict, b: dict | None = None) -> dict | None:
    """The matmul ceiling as the training process met it (``bench.ceiling_probe``, the
    calibration's best size timed before the job, between its steps and after it), beside a fresh
    process's reading taken just before the job (``bench.fresh_process_probe``) and the cached
    calibration's figure; and the steady-state MFU's range over the in-process ceiling once both
    the steps' spread (their middle half) and the probes' spread (lowest to highest) are carried
    into it. The cached calibration is not part of that range: it was not timed in this run.
    None for records measured before the probes existed."""
    from mfulab.studies.mfu.time_split import run_ceiling

    run = run_ceiling(records)
    if run["source"] != "in-process":
        return None
    b = breakdown(records) if b is None else b
    probes = records["train"]["ceiling_probes"]
    fresh = records.get("fresh_process_probe")
    fast_flops_per_s = b["flops_per_step"] / b["steady_step_q1_s"]  # a step at the first quartile
    slow_flops_per_s = b["flops_per_step"] / b["steady_step_q3_s"]
    return {
        "size": probes[0]["size"],
        "probes": len(probes),
        "calibrated_flops_per_s": run["calibrated_flops_per_s"],
        "calibrated_at": records["ceiling"].get("measured_at"),
        "fresh_process_flops_per_s": fresh["flops_per_s"] if fresh else None,
        "in_process_flops_per_s": run["flops_per_s"],
        "in_process_lo_flops_per_s": run["lo_flops_per_s"],
        "in_process_hi_flops_per_s": run["hi_flops_per_s"],
        "drift_over_run": probes[-1]["flops_per_s"] / probes[0]["flops_per_s"] - 1,
        "in_process_over_calibrated": run["flops_per_s"] / run["calibrated_flops_per_s"],
        "fresh_over_calibrated": fresh["flops_per_s"] / run["calibrated_flops_per_s"] if fresh else None,
        "steady_mfu_vs_calibration": b["steady_flops_per_s"] / run["calibrated_flops_per_s"],
        "steady_mfu_lo": slow_flops_per_s / run["hi_flops_per_s"],
        "steady_mfu_hi": fast_flops_per_s / run["lo_flops_per_s"],
    }


def waits_table(records: dict):
    """The waits demo (``bench``: the same steps without and with a sleeping loader): each run's
    data share of the wall clock and its global, local and steady-state MFU against the measured
    ceiling (headline convention), as ``breakdown`` computes them for the main run. Local MFU
    leaves the wait out by its definition, global takes it in: the gap is the wait. None where
    the records have no demo."""
    import pandas as pd

    runs = records.get("waits")
    if not runs:
        return None
    from mfulab.studies.mfu.time_split import run_ceiling

    ceiling = run_ceiling(records)  # the main run's: the demo's runs are not probed
    rows = []
    for run in runs:
        b = breakdown({**records, "train": run}, ceiling=ceiling)
        rows.append(
            {
                "loader_sleep_ms": run["data_delay_s"] * 1e3,
                "steady_step_ms": b["steady_step_s"] * 1e3,
                "data_share_of_wall": b["data_s"] / b["job_wall_s"],
                "global_mfu": b["global_mfu_vs_ceiling"],
                "local_mfu": b["local_mfu_vs_ceiling"],
                "steady_mfu": b["steady_mfu_vs_ceiling"],
                "global_over_local": b["global_mfu_vs_ceiling"] / b["local_mfu_vs_ceiling"],
            }
        )
    return pd.DataFrame(rows)
