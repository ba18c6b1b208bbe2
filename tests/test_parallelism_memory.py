"""Activations in flight per pipeline schedule, counted from the layers' forward/backward marks."""

import pandas as pd

from mfulab.studies.parallelism import measured, memory_rows


def _spans(order, L=1):
    """Spans of one rank from an order of ("F"|"B", micro-batch) events, each layer 1 s long."""
    out, t = [], 0.0
    for kind, _ in order:
        for _ in range(L):
            out.append((kind, 0, t, t + 1.0))
            t += 1.0
    return out


def test_peak_counts_forwards_not_yet_backwarded():
    gpipe = [("F", i) for i in range(4)] + [("B", i) for i in range(4)]
    one_f_one_b = [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)]
    assert measured.peak_layers_in_flight(_spans(gpipe, L=2)) == 8  # all m micro-batches
    assert measured.peak_layers_in_flight(_spans(one_f_one_b, L=2)) == 4  # p = 2 of them


def test_memory_row_is_an_exact_count_of_whether_interleaving_holds_more():
    def row(schedule, m, v, peak, model):
        return {
            "ranks": 4,
            "schedule": schedule,
            "m": m,
            "v": v,
            "layers_per_rank": 4,
            "first_rank_peak_layers": peak,
            "peak_layers_by_rank": "",
            "step_model_layers": model,
            "matches_step_model": peak == model,
        }

    good = pd.DataFrame(
        [row("gpipe", 16, 1, 64, 64.0), row("1f1b", 16, 1, 16, 16.0), row("interleaved", 16, 2, 22, 22.0)]
    )
    (claim,) = memory_rows.pipeline_memory_claim(good)
    assert claim.verdict == "shown" and "1.38× 1F1B's" in claim.evidence
    assert claim.basis == "by construction"  # an exact count, as A11's and A12's memory rows
    bad = good.copy()
    bad.loc[1, ["first_rank_peak_layers", "matches_step_model"]] = [20, False]
    assert memory_rows.pipeline_memory_claim(bad)[0].verdict == "shown"  # 22 > 20: the count decides
    fewer = good.copy()
    fewer.loc[2, ["first_rank_peak_layers", "matches_step_model"]] = [16, False]
    assert memory_rows.pipeline_memory_claim(fewer)[0].verdict == "refuted"  # interleaving keeps no more
    assert (
        "it misses 1f1b p = 4, m = 16 (20 held, 16 modelled)"
        in memory_rows.pipeline_memory_claim(bad)[0].evidence
    )
    assert memory_rows.pipeline_memory_claim(good.iloc[:0]) == []
