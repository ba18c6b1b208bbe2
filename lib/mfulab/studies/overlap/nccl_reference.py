"""Published nccl-tests all-reduce figures on GPU systems (``stated.NCCL_TESTS_PUBLISHED``, each
with its source), set beside this machine's gloo benchmark: what the same benchmark reads on
NVLink and InfiniBand, as a share of each fabric's line rate."""

from __future__ import annotations

from mfulab.studies.overlap.analysis import collectives_table
from mfulab.studies.overlap.stated import NCCL_TESTS_PUBLISHED
from mfulab.units import GB


def published_nccl_tests_table(records):
    """The published rows, with the share of each fabric's line rate (``busbw_over_line``) and
    how many times this run's largest all-reduce busbw each one is (``times_this_machine``)."""
    import pandas as pd

    d = collectives_table(records).query("op == 'all_reduce'").sort_values("size_bytes")
    here_gb_per_s = float(d.busbw_bytes_per_s.iloc[-1]) / GB
    rows = [
        {
            **r,
            "busbw_over_line": r["busbw_gb_per_s"] / r["line_gb_per_s"],
            "times_this_machine": r["busbw_gb_per_s"] / here_gb_per_s,
        }
        for r in NCCL_TESTS_PUBLISHED
    ]
    columns = ["system", "fabric", "busbw_gb_per_s", "line_gb_per_s", "busbw_over_line", "times_this_machine"]
    return pd.DataFrame(rows)[[*columns, "source"]]
