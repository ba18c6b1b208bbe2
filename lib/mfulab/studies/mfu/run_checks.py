"""The measured run of the ``mfu`` study checked against itself: the matmul ceiling timed in the
training process (``bench.ceiling_probe``) against the calibration's, carried into the
headline's range, and the waits demo (the steps again behind a sleeping loader), which pulls
global MFU from local. Both read the plain records of ``bench.measure``."""

from __future__ import annotations

from mfulab.studies.mfu.time_split import breakdown


def ceiling_drift(records: dict, b: dict | None = None) -> dict | None:
    """The matmul ceiling as the training process met it (``bench.ceiling_probe``, the
    calibration's best size timed just before the job and just after it) against the calibration's
    figure, and the steady-state MFU's range once both the steps' spread (their middle half) and
    the ceiling's spread (the lowest to the highest of the three readings) are carried into it.
    None for records measured before the probe existed."""
    probe = records["train"].get("ceiling_probe")
    if not probe:
        return None
    b = breakdown(records) if b is None else b
    calibrated = records["ceiling"]["best_flops_per_s"]
    before, after = probe["before"]["flops_per_s"], probe["after"]["flops_per_s"]
    ceilings = (calibrated, before, after)
    fast_flops_per_s = b["flops_per_step"] / b["steady_step_q1_s"]  # a step at the first quartile
    slow_flops_per_s = b["flops_per_step"] / b["steady_step_q3_s"]
    return {
        "size": probe["before"]["size"],
        "calibrated_flops_per_s": calibrated,
        "before_flops_per_s": before,
        "after_flops_per_s": after,
        "drift_over_run": after / before - 1,
        "in_process_over_calibrated": (before + after) / 2 / calibrated,
        "steady_mfu_vs_in_process": b["steady_flops_per_s"] / ((before + after) / 2),
        "steady_mfu_lo": slow_flops_per_s / max(ceilings),
        "steady_mfu_hi": fast_flops_per_s / min(ceilings),
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
    rows = []
    for run in runs:
        b = breakdown({**records, "train": run})
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
