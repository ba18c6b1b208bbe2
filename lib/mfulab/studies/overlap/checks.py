"""What a correct multi-rank overlap measurement must show (``make check-node``)."""

from __future__ import annotations

import numpy as np

MIN_BAR_SHARE = 0.5  # communication bars at least half the measured communication-only time
COMPUTE_TARGET_RANGE = (0.5, 2.0)  # real compute within 2× of its target compute_s


def node_problems(records: dict) -> list[str]:
    """Zero wrong elements in every collective; every drawn communication bar at least
    ``MIN_BAR_SHARE`` of the measured communication (NCCL's future completes at enqueue, which
    would draw zero-width bars); real compute within ``COMPUTE_TARGET_RANGE`` of its target."""
    problems = []
    wrong = sum(r["wrong"] for r in records["collectives"]["rows"]) + records["overlap"]["wrong"]
    if wrong:
        problems.append(f"{wrong} wrong elements in the collectives")
    for row in records["overlap"]["rows"]:
        key = f"{row['mode']}:{row['k']}"
        bars = sum(c["comm_end_s"] - c["comm_start_s"] for c in records["overlap"]["timelines"].get(key, []))
        if bars < MIN_BAR_SHARE * float(np.median(row["comm_only_times_s"])):
            problems.append(f"{key}: communication bars {bars * 1e3:.2f} ms, under half the measured")
        if row["mode"] == "real":
            ratio = float(np.median(row["compute_only_times_s"])) / records["overlap"]["compute_s"]
            low, high = COMPUTE_TARGET_RANGE
            if not low <= ratio <= high:
                problems.append(f"{key}: real compute {ratio:.2f}× its target compute_s")
    return problems
