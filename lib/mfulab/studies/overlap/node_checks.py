"""What a correct multi-rank overlap measurement must show (``make check-node``)."""

from __future__ import annotations

import numpy as np

from mfulab.studies.overlap.bench import union_length_s

# the drawn communication (union of the bars) against the fastest communication-only step, far
# above the near-zero bars of an all-reduce timed to its enqueue (microseconds). On CUDA the bars
# are events on the communication stream: a quarter is loose for run-to-run noise. On gloo the bars
# are one rank's futures: a rank that reaches the all-reduce last (its compute or sleep overran on
# a loaded CPU) finds its peer waiting and its call lasts only the exchange itself, so a correct
# k = 1 step has drawn 17% of the communication-only step under CI load; the floor is lower there.
MIN_BAR_SHARE = {"cuda": 0.25, "cpu": 0.02}
COMPUTE_TARGET_RANGE = (0.5, 2.0)  # real compute within 2× of its target compute_s


def node_problems(records: dict) -> list[str]:
    """Zero wrong elements in every collective; the drawn communication (the union of a step's
    bars) at least ``MIN_BAR_SHARE`` (per device) of the fastest communication-only step (NCCL's future
    completes at enqueue, which would draw zero-width bars); on CUDA, real compute within
    ``COMPUTE_TARGET_RANGE`` of its target (sized from a calibration on the device; on a CPU
    the ranks' matmuls share the cores with each other and with gloo: no such target holds)."""
    problems = []
    wrong = sum(r["wrong"] for r in records["collectives"]["rows"]) + records["overlap"]["wrong"]
    if wrong:
        problems.append(f"{wrong} wrong elements in the collectives")
    for row in records["overlap"]["rows"]:
        key = f"{row['mode']}:{row['k']}"
        spans = [(c["comm_start_s"], c["comm_end_s"]) for c in records["overlap"]["timelines"].get(key, [])]
        bars = union_length_s(spans)
        fastest = float(np.min(row["comm_only_times_s"]))
        if bars < MIN_BAR_SHARE.get(records["device"], MIN_BAR_SHARE["cuda"]) * fastest:
            problems.append(
                f"{key}: communication bars {bars * 1e3:.2f} ms against a fastest communication-only step "
                f"of {fastest * 1e3:.2f} ms"
            )
        if row["mode"] == "real" and records["device"] == "cuda":  # CPU ranks share cores: no target
            ratio = float(np.median(row["compute_only_times_s"])) / records["overlap"]["compute_s"]
            low, high = COMPUTE_TARGET_RANGE
            if not low <= ratio <= high:
                problems.append(f"{key}: real compute {ratio:.2f}× its target compute_s")
    return problems
