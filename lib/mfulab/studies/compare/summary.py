"""The comparison in a few lines, first thing in chapter 10: each machine's measured ceilings, the
published references' ranges, and the verdict matrix's counts, every figure read from the tables
the chapter shows below."""

from __future__ import annotations


def _range(values, fmt: str) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "none"
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}–{format(hi, fmt)}"


def machine_line(machine: str, ceiling, copy, gloo) -> str:
    """One machine's measured figures: its matmul ceiling (and share of its peak), its copy
    bandwidth, its balance, and its all-reduce over the copy where it has them."""
    parts = []
    if ceiling:
        c, peak = ceiling
        parts.append(
            f"matmul ceiling {c / 1e9:,.0f} GFLOP/s" + (f" ({c / peak:.0%} of its peak)" if peak else "")
        )
    if copy:
        parts.append(f"copy {copy / 1e9:.1f} GB/s")
    if ceiling and copy:
        parts.append(f"{ceiling[0] / copy:.0f} FLOP per byte")
    if gloo:
        busbw, copy_bw = gloo
        parts.append(f"all-reduce busbw {busbw / 1e9:.2f} GB/s ({busbw / copy_bw:.0%} of the copy)")
    return f"`{machine}`: " + (", ".join(parts) if parts else "no calibration")


def summary(table, refs, balance_table, matrix, records) -> str:
    """Markdown bullets: one per machine, one for the published references, one for the verdicts."""
    from mfulab.studies.compare.analysis import measured_ceilings, measured_copy, measured_gloo
    from mfulab.studies.compare.published import QUANTITIES

    ceilings, copies, gloo = measured_ceilings(table), measured_copy(table), measured_gloo(table)
    lines = [machine_line(m, ceilings.get(m), copies.get(m), gloo.get(m)) for m in records["machines"]]
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
    lines.append(
        f"verdicts: {len(matrix)} claims rows, {len(bound)} resting on a measurement taken on the machine; "
        + (f"{int(matrix.differs.sum())} differ between machines, " if len(records["machines"]) > 1 else "")
        + f"{flipped} flipped between fresh runs of one machine"
    )
    return "**In brief.**\n\n" + "\n".join(f"- {line}" for line in lines)
