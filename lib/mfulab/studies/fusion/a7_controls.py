"""A7's mechanism with its controls: the sub-block's C kernels in DRAM, all timed in the same
interleaved rounds (``norm_fusion_bench``), as passes (one fused pass; eager's two at p = 0, the
add then LayerNorm; the article's three with dropout: dropout, the add, LayerNorm) and stores
(ordinary, whose every write first reads its line, or streaming).

Fusion's own effect is one pass against several **with the same stores and the same random
numbers**; the stores' effect, the same passes with and without streaming stores. The one-pass
kernel against ATen's eager mixes them (and ATen's code against ours), so it cannot say how much
of its speed-up is the fusion. The row of A7's mechanism reads the article's own case
(``FUSION``): dropout, residual add and LayerNorm at the study's p, one pass against three, both
drawing the mask from the same hash in registers (ATen's random numbers cost 96% of its eager
sub-block on this CPU and would drown the passes). The add + LayerNorm pairs at p = 0 are its
other readings.

The DRAM traffic each ratio should have, memory-bound, is the bytes model's
(``bytes_model.dram_traffic_passes``: reads + writes, each ordinary write twice): one pass with
ordinary stores 2 + 2·2 = 6 against three passes' 4 + 3·2 = 10 (1.67×) and two passes' 3 + 2·2 = 7
(7/6 = 1.17×); with streaming stores 4 against 5 (1.25×); streaming stores alone 7/5 = 1.40×
unfused, 6/4 = 1.50× fused.
"""

from __future__ import annotations

from mfulab.measure.timing import RUN_TO_RUN_DRIFT, compare_timings, summarize
from mfulab.studies.fusion import onepass
from mfulab.studies.fusion.bytes_model import dram_traffic_passes

# (reading, baseline, candidate, what the pair isolates, timed at the study's dropout p)
PAIRS = (
    ("dropout + add + LN: one pass over three", "threepass_plain", "onepass_plain", "fusion", True),
    ("add + LN: one pass over two, ordinary stores", "twopass_plain", "onepass_plain", "fusion", False),
    ("add + LN: one pass over two, streaming stores", "twopass_nt", "onepass", "fusion", False),
    ("add + LN: streaming over ordinary stores, two passes", "twopass_plain", "twopass_nt", "stores", False),
    ("add + LN: streaming over ordinary stores, one pass", "onepass_plain", "onepass", "stores", False),
    ("add + LN: our two passes over ATen's eager", "eager", "twopass_plain", "code", False),
)  # fmt: skip
FUSION = PAIRS[0][0]  # the article's three operations fused, with the stores eager uses: the deciding reading


def _traffic(records, impl: str) -> int:
    """DRAM traffic in tensor passes, a write that reads its line first counted twice."""
    reads, writes = onepass.reads_writes(impl) if impl in onepass.VARIANTS else (3, 2)
    return dram_traffic_passes(
        reads=reads, writes=writes, write_allocate=onepass.write_allocate(records, impl)
    )


def controls(records) -> list[dict]:
    """Every pair of :data:`PAIRS` timed in this run (DRAM): the candidate's speed over the
    baseline, a ratio of medians over paired rounds with its interval widened by the controls'
    measured drift between fresh runs (``ln_control_ratio_drift``), beside the ratio the bytes
    model's DRAM traffic predicts. Empty where the controls did not run (no C compiler, a GPU)."""
    p = records["ln"].get("dropout_p", 0.0)
    rows = {(r["impl"], r["dropout_p"]): r for r in records["ln"]["rows"] if r["shape"] == "dram"}
    drift = records.get("params", {}).get("ln_control_ratio_drift", RUN_TO_RUN_DRIFT)
    out = []
    for reading, base, cand, isolates, with_dropout in PAIRS:
        q = p if with_dropout else 0.0
        if (base, q) not in rows or (cand, q) not in rows:
            continue
        c = compare_timings(
            summarize(rows[(base, q)]["times_s"], rows[(base, q)]["label"], paired=True),
            summarize(rows[(cand, q)]["times_s"], rows[(cand, q)]["label"], paired=True),
            run_to_run_drift=drift,
        )
        out.append(
            {
                "reading": reading,
                "isolates": isolates,
                "dropout_p": q,
                "baseline": base,
                "candidate": cand,
                "ratio": c.ratio,
                "ratio_lo": c.ratio_lo,
                "ratio_hi": c.ratio_hi,
                "run_to_run_drift": drift,
                "predicted_by_traffic": _traffic(records, base) / _traffic(records, cand),
            }
        )
    return out


def controls_table(records):
    """:func:`controls` as a table (empty where they did not run)."""
    import pandas as pd

    return pd.DataFrame(controls(records))


def fusion_decision(table) -> tuple[str, str] | None:
    """(verdict, evidence) of "fusing the three operations into one pass takes less time" from
    the controls, decided on :data:`FUSION` (one pass against the article's three, with dropout,
    eager's ordinary stores and the same random numbers): *shown* where its interval lies above 1
    and no fusion pair's lies below 1, *not shown* where any lies below 1, else *inconclusive on
    this machine*; None without the deciding reading. (Until 2026-12-07 the row was decided at
    p = 0 on the add + LN pair, whose 1.12-1.19× sat near its widened interval's edge: it read
    shown in some fresh runs and inconclusive in others.)"""
    if table is None or not len(table):
        return None
    fusion = table[table.isolates == "fusion"].set_index("reading")
    if FUSION not in fusion.index:
        return None
    deciding = fusion.loc[FUSION]
    if (fusion.ratio_hi < 1).any():
        verdict = "not shown"
    elif deciding.ratio_lo > 1:
        verdict = "shown"
    else:
        verdict = "inconclusive on this machine"
    parts = [
        f"{reading}: {r.ratio:.2f}× [{r.ratio_lo:.2f}, {r.ratio_hi:.2f}] (traffic predicts "
        f"{r.predicted_by_traffic:.2f}×)"
        for reading, r in fusion.iterrows()
    ]
    drift = float(fusion.run_to_run_drift.iloc[0])
    evidence = (
        f"the same C code in one pass against its unfused passes, timed in the same rounds, the first "
        f"(p = {deciding.dropout_p:g}) deciding: {'; '.join(parts)}; intervals widened by ±{drift:.0%}, "
        "these ratios' measured drift between fresh runs"
    )
    stores = table[table.isolates == "stores"]
    if len(stores):
        evidence += "; streaming stores alone: " + ", ".join(
            f"{r.ratio:.2f}× {r.reading.split(', ')[1]} (predicted {r.predicted_by_traffic:.2f}×)"
            for r in stores.itertuples()
        )
    return verdict, evidence
