"""The comparison in a few lines, first thing in chapter 10: each machine's measured ceilings, the
published references' ranges, and the verdict matrix's counts, every figure read from the tables
the chapter shows below."""

from __future__ import annotations

from mfulab.studies.compare.matrix import differing


def _range(values, fmt: str) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "none"
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}–{format(hi, fmt)}"


def machine_line(machine: str, matmul=None, balance=None, gloo=None) -> str:
    """One machine's measured figures, as the chapter's tables hold them: its matmul ceiling and
    share of its peak (``matmul``: its reference-table row), its copy bandwidth and balance
    (``balance``: its machine-balance row), its all-reduce over the copy (``gloo``: its
    reference-table row, named oversubscribed there where it was)."""
    parts = []
    if matmul is not None:
        share = matmul["share_of_peak"]
        parts.append(
            f"matmul ceiling {matmul['value'] * 1e3:,.0f} GFLOP/s"
            + (f" ({share:.0%} of its peak)" if share == share and share is not None else "")
        )
    if balance is not None:
        parts.append(f"copy {balance['memory_TB_per_s'] * 1e3:.1f} GB/s")
        parts.append(f"{balance['best_matmul_flop_per_byte']:.0f} FLOP per byte")
    if gloo is not None:
        crowded = " (oversubscribed)" if gloo["machine"] != machine else ""
        parts.append(
            f"all-reduce busbw {gloo['value']:.2f} GB/s ({gloo['share_of_peak']:.0%} of the copy){crowded}"
        )
    return f"`{machine}`: " + (", ".join(parts) if parts else "no calibration")


def _row(frame, machine: str):
    """The first row of ``frame`` for ``machine`` (its label may carry a note after the name)."""
    hit = frame[(frame.machine == machine) | frame.machine.str.startswith(machine + " (")]
    return hit.iloc[0].to_dict() if len(hit) else None


def summary(refs, balance_table, matrix, records) -> str:
    """Markdown bullets: one per machine, one for the published references, one for the verdicts,
    read from the chapter's reference table (``published.reference_table``), its machine-balance
    table (``balance.machine_balance``) and its verdict matrix (``matrix.verdict_table``)."""
    from mfulab.studies.compare.published import QUANTITIES

    here = refs[refs.basis == "measured here"]
    matmul_here = here[here.quantity == QUANTITIES["matmul_bf16"][0]]
    gloo_here = here[here.quantity == QUANTITIES["all_reduce_busbw"][0]]
    lines = [
        machine_line(m, _row(matmul_here, m), _row(balance_table, m), _row(gloo_here, m))
        for m in records["machines"]
    ]
    pub = refs[refs.basis == "published"]
    matmul = pub[pub.quantity == QUANTITIES["matmul_bf16"][0]].share_of_peak
    busbw = pub[pub.quantity == QUANTITIES["all_reduce_busbw"][0]].share_of_peak.dropna()
    bal = balance_table[balance_table.basis.str.startswith("datasheet")]
    lines.append(
        "published (other machines, not measured here): best bf16 matmul "
        f"{_range(matmul, '.0%')} of the dense peak ({len(matmul)} GPUs); all-reduce busbw "
        f"{_range(busbw, '.0%')} of its link ({len(busbw)} readings); balance at the best matmul "
        f"{_range(bal.best_matmul_flop_per_byte, '.0f')} FLOP per byte"
    )
    bound = matrix[matrix["rests on the machine"]]
    flipped = int((matrix["flipped on"] != "").sum())
    same_code_differ = int(differing(matrix).sum())
    lines.append(
        f"verdicts: {len(matrix)} claims rows, {len(bound)} resting on a measurement taken on the machine; "
        + (
            f"{same_code_differ} differ between machines that ran the same code"
            + (
                f" ({int((matrix['other code'] != '').sum())} more ran at other code, not compared), "
                if "other code" in matrix and (matrix["other code"] != "").any()
                else ", "
            )
            if len(records["machines"]) > 1
            else ""
        )
        + f"{flipped} flipped between fresh runs of one machine"
    )
    return "**In brief.**\n\n" + "\n".join(f"- {line}" for line in lines)
