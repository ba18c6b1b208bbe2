"""The shape sweep of the ``mfu`` study (``bench.shape_sweep``): the reference training step at
other widths and sequence lengths, the tokens per step fixed, each profiled by operator category.
Two mechanisms the one measured configuration cannot show: MFU falls as the GEMMs shrink (the
smaller d_model, the further the model's matmuls from the best square one), and the attention
core's share of the step grows with T, measured here, not only counted (§2's table)."""

from __future__ import annotations

from mfulab.measure import opprofile
from mfulab.studies.mfu.operator_split import category_flops_per_step
from mfulab.studies.mfu.time_split import run_ceiling


def sweep_table(records: dict):
    """One row per swept shape: its step time (median profiled step), the model's work by the
    mask-aware exact count and MFU over the ceiling timed in the training process, the attention
    core's share of that work against its share of the step's time, and the rate the weight GEMMs
    and the attention core reach (share of the same ceiling). None where the records have no
    sweep."""
    import numpy as np
    import pandas as pd

    sweep = records.get("shape_sweep")
    if not sweep:
        return None
    ceiling = run_ceiling(records)["flops_per_s"]
    rows = []
    for point in sweep:
        cfg, prof = point["config"], point["op_profile"]
        tokens = point["micro_batch"] * cfg["seq_len"]
        work = category_flops_per_step({"config": cfg, "train": {"tokens_per_step": tokens}})
        total_flops = sum(work.values())
        step_s = float(np.median([s["wall_s"] for s in prof["steps"]]))
        shares = opprofile.category_shares(prof)
        gemm_s, attention_s = shares["matmul"] * step_s, shares["attention core"] * step_s
        rows.append(
            {
                "d_model": cfg["d_model"],
                "seq_len": cfg["seq_len"],
                "micro_batch": point["micro_batch"],
                "step_s": step_s,
                "exact_flops_per_step": total_flops,
                "mfu_exact": total_flops / step_s / ceiling,
                "attention_share_of_flops": work["attention core"] / total_flops,
                "attention_share_of_time": shares["attention core"],
                "gemm_share_of_ceiling": work["matmul"] / gemm_s / ceiling if gemm_s > 0 else None,
                "attention_share_of_ceiling": (
                    work["attention core"] / attention_s / ceiling if attention_s > 0 else None
                ),
            }
        )
    return pd.DataFrame(rows)
