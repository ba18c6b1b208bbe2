"""A7's mechanism with its controls: the sub-block's C kernels in DRAM as a 2 × 2 of passes (one
fused pass, or eager's two: the add, then LayerNorm) and stores (ordinary, whose every write first
reads its line, or streaming), all timed in the same interleaved rounds (``norm_fusion_bench``).

Fusion's own effect is one pass against two **with the same stores**; the stores' effect, the
same passes with and without streaming stores. The one-pass kernel against ATen's eager mixes
the two (and ATen's code against ours), so it cannot say how much of its speed-up is the fusion:
the row of A7's mechanism reads the first pair (``FUSION``), with the second as its other reading.

The DRAM traffic each ratio should have, memory-bound, is the bytes model's
(``bytes_model.dram_traffic_passes``: reads + writes, each ordinary write twice): one pass with
ordinary stores 2 + 2·2 = 6 against two passes' 3 + 2·2 = 7 (7/6 = 1.17×); with streaming stores
4 against 5 (1.25×); streaming stores alone 7/5 = 1.40× unfused, 6/4 = 1.50× fused.
"""

from __future__ import annotations

from mfulab.measure.timing import RUN_TO_RUN_DRIFT, compare_timings, summarize
from mfulab.studies.fusion import onepass
from mfulab.studies.fusion.bytes_model import dram_traffic_passes

# (reading, baseline, candidate, what the pair isolates)
PAIRS = (
    ("one pass over two, ordinary stores", "twopass_plain", "onepass_plain", "fusion"),
    ("one pass over two, streaming stores", "twopass_nt", "onepass", "fusion"),
    ("streaming over ordinary stores, two passes", "twopass_plain", "twopass_nt", "stores"),
    ("streaming over ordinary stores, one pass", "onepass_plain", "onepass", "stores"),
    ("our two passes over ATen's eager", "eager", "twopass_plain", "code"),
)
FUSION = PAIRS[0][0]  # fusion's own effect with the stores eager uses: the row's deciding reading


def _traffic(records, impl: str) -> int:
    """DRAM traffic in tensor passes, a write that reads its line first counted twice."""
    reads, writes = onepass.reads_writes(impl) if impl in onepass.VARIANTS else (3, 2)
    return dram_traffic_passes(
        reads=reads, writes=writes, write_allocate=onepass.write_allocate(records, impl)
    )


def controls(records) -> list[dict]:
    """Every pair of :data:`PAIRS` timed in this run (DRAM, p = 0): the candidate's speed over the
    baseline, a ratio of medians over paired rounds with its interval widened by the controls'
    measured drift between fresh runs (``ln_control_ratio_drift``), beside the ratio the bytes
    model's DRAM traffic predicts. Empty where the controls did not run (no C compiler, a GPU)."""
    rows = {(r["impl"]): r for r in records["ln"]["rows"] if r["shape"] == "dram" and r["dropout_p"] == 0}
    drift = records.get("params", {}).get("ln_control_ratio_drift", RUN_TO_RUN_DRIFT)
    out = []
    for reading, base, cand, isolates in PAIRS:
        if base not in rows or cand not in rows:
            continue
        c = compare_timings(
            summarize(rows[base]["times_s"], rows[base]["label"], paired=True),
            summarize(rows[cand]["times_s"], rows[cand]["label"], paired=True),
            run_to_run_drift=drift,
        )
        out.append(
            {
                "reading": reading,
                "isolates": isolates,
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
    """(verdict, evidence) of "fewer passes over DRAM take less time" from the controls, decided on
    :data:`FUSION` (one pass over two with eager's ordinary stores): *shown* where its interval lies
    above 1 and the streaming-store pair's does not lie below 1, *not shown* where either lies
    below 1, else *inconclusive on this machine*; None without both fusion readings. (On
    2026-12-07 a rule that needed both pairs above 1 flipped in one of three fresh runs, the
    streaming pair reading 1.17× [0.998, …]: that pair's ratio spreads more between runs.)"""
    if table is None or not len(table):
        return None
    fusion = table[table.isolates == "fusion"].set_index("reading")
    if len(fusion) < 2 or FUSION not in fusion.index:
        return None
    deciding = fusion.loc[FUSION]
    if (fusion.ratio_hi < 1).any():
        verdict = "not shown"
    elif deciding.ratio_lo > 1:
        verdict = "shown"
    else:
        verdict = "inconclusive on this machine"
    parts = [
        f"{reading.split(', ')[1]}: {r.ratio:.2f}× [{r.ratio_lo:.2f}, {r.ratio_hi:.2f}] "
        f"(traffic predicts {r.predicted_by_traffic:.2f}×)"
        for reading, r in fusion.iterrows()
    ]
    drift = float(fusion.run_to_run_drift.iloc[0])
    evidence = (
        "one pass of the same C code against its two passes (eager's add, then LayerNorm), timed in "
        f"the same rounds, the first deciding: {'; '.join(parts)}; intervals widened by ±{drift:.0%}, "
        "these ratios' measured drift between fresh runs"
    )
    stores = table[table.isolates == "stores"]
    if len(stores):
        evidence += "; streaming stores alone: " + ", ".join(
            f"{r.ratio:.2f}× {r.reading.split(', ')[1]} (predicted {r.predicted_by_traffic:.2f}×)"
            for r in stores.itertuples()
        )
    return verdict, evidence
