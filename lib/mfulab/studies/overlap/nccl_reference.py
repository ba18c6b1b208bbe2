"""Published nccl-tests all-reduce figures on GPU systems (``stated.NCCL_TESTS_PUBLISHED``, each
with its source), set beside this machine's gloo benchmark: what the same benchmark reads on
NVLink and InfiniBand, as a share of each fabric's line rate."""

from __future__ import annotations

from mfulab.studies.overlap.analysis import collectives_table
from mfulab.studies.overlap.stated import B9_COMMAND, NCCL_TESTS_PUBLISHED
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
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


def b9_command_claim() -> Claim:
    """Article B's reading of its nccl-tests command, against nccl-tests' own documentation
    (``stated.B9_COMMAND``): refuted when the command's GPU count is not the article's."""
    c = B9_COMMAND
    gpus = c["g"] * c["t"]
    return Claim(
        "B9",
        "`all_reduce_perf ... -g 8 -t 2` runs 8 GPUs for 2 rounds; its busbw is the algorithm bandwidth",
        "the command's flags and nccl-tests' bandwidth definitions (its README and PERFORMANCE.md)",
        verdicts.verdict_from_agreement(gpus == c["article_gpus"]),
        f"-t is threads per process and -g GPUs per thread: one process drives {c['t']} × {c['g']} = "
        f"{gpus} GPUs (a 16-GPU node), not {c['article_gpus']} for {c['article_rounds']} rounds (rounds are "
        "-n and -w); busbw = algbw × 2(n−1)/n for all_reduce, the bus figure, not the algorithm bandwidth",
        basis=verdicts.PUBLISHED,
    )
