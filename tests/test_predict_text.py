"""A held-out split with no row priced still reports what its rows priced as noted show."""

import pandas as pd
import pytest

from mfulab.studies.predict import analysis, case_texts


def test_an_unpriced_split_reports_its_as_noted_rows_against_the_null_model():
    noted = pd.DataFrame(
        [
            {
                "split": "holdout-3",
                "rows_priced_as_noted": 17,
                "median_signed_error": -0.232,
                "median_abs_error": 0.232,
                "max_abs_error": 0.38,
                "rows_within_25pct": 0.53,
                "null_median_abs_error": 0.153,
            }
        ]
    )
    empty = pd.DataFrame({"split": []})
    text = analysis.test_text({}, empty, "holdout-3", as_noted=noted)
    assert "17 rows" in text and "23.2%" in text and "worse than the null model" in text
    better = noted.assign(median_abs_error=0.10)
    assert "a median below the null model's" in analysis.test_text({}, empty, "holdout-3", as_noted=better)
    assert analysis.test_text({}, empty, "holdout-3") == "No holdout-3 row is priced."


def test_ranking_text_counts_the_efficiency_order_over_wide_sweeps_only():
    import pandas as pd

    from mfulab.studies.predict import scores

    rank = pd.DataFrame(
        {
            "source": ["a", "b", "c"],
            "sweep": ["s1", "s2", "s3"],
            "rho_throughput": [1.0, 0.9, 0.8],
            "null_rho_throughput": [1.0, 0.9, float("nan")],
            "rho_mfu": [0.9, 0.2, -0.5],
            "predicted_mfu_spread": [0.5, 0.6, 0.1],  # the third inside a ±38% margin: noise
        }
    )
    text = scores.ranking_text(rank, 0.38)
    assert "median `rho_mfu` +0.20, ≥ +0.8 in 1 of 3" in text
    assert "over the 2 sweeps whose predicted MFU spreads more than the ±38% margin, median +0.55" in text
    assert "lowest +0.20 (b, s2)" in text
    assert scores.ranking_text(rank.iloc[:0], 0.38) == ""


def test_tp_overlap_pairs_score_the_switch_alone():
    """A row with async TP on beside its twin with it off (same source, publication, device, model,
    layout and FP8 scaling): the gain off ÷ on, published against predicted; a rowwise row does not
    pair with a tensorwise one, and a refused twin pairs with nothing."""
    import pandas as pd

    from mfulab.studies.predict import ablations

    def run(rid, on, dtype="bf16"):
        layout = {"n_devices": 64, "tp": 8, "dtype": dtype, "tp_comm_overlap": on}
        return {
            "id": rid,
            "source": "s",
            "citation": "repo file @ abc",
            "device": "h100-sxm",
            "model": {"n": 1},
            "layout": layout,
            "split": "test",
        }

    runs = [
        run("a-async", True),
        run("a-vanilla", False),
        run("b-rowwise-async", True, "fp8"),
        run("b-tensorwise-vanilla", False, "fp8"),
    ]
    table = pd.DataFrame(
        {
            "id": ["a-async", "a-vanilla", "b-rowwise-async", "b-tensorwise-vanilla"],
            "refused": ["", "", "", ""],
            "published_step_s": [10.0, 11.0, 5.0, 6.0],
            "predicted_step_s": [8.0, 10.0, 4.0, 5.0],
            "tp_comm_s": [0.0, 3.0, 0.5, 2.0],
        }
    )
    pairs = ablations.tp_overlap_pairs(runs, table)
    assert list(pairs.on_row) == ["a-async"]  # the rowwise row has no rowwise twin
    row = pairs.iloc[0]
    assert row.published_gain == pytest.approx(1.1) and row.predicted_gain == pytest.approx(1.25)
    assert row.gain_error == pytest.approx(1.25 / 1.1 - 1) and row.tp_comm_off_s == 3.0
    text = ablations.tp_overlap_text(pairs)
    assert "1 published pairs" in text and "1 of 1 too large" in text and "33%–33% of the TP time" in text
    table.loc[1, "refused"] = "not modelled"
    assert ablations.tp_overlap_pairs(runs, table).empty
    assert "No published pair" in ablations.tp_overlap_text(ablations.tp_overlap_pairs(runs, table))


def test_a19_case_shows_the_command_as_parsed_and_each_recompute_reading():
    """The command as Megatron parses it recomputes nothing (both kernels); had it set the
    granularity, uniform:12 recomputes every layer and the article's block reading the first 12:
    both slower, and the text's range is the parsed command's alone."""
    from mfulab.studies.predict import worked_examples

    t = worked_examples.a19_case().set_index(["attention", "recompute"])
    assert list(t.index) == [
        ("naive", "none"),
        ("fused", "none"),
        ("naive", "uniform:12"),
        ("naive", "block:12"),
    ]
    none = t.loc[("naive", "none"), "predicted_step_s"]
    assert (
        none
        < t.loc[("naive", "block:12"), "predicted_step_s"]
        < t.loc[("naive", "uniform:12"), "predicted_step_s"]
    )
    text = case_texts.a19_text(t.reset_index())
    assert f"{t.loc[('fused', 'none'), 'predicted_step_s']:.2f}–{none:.2f} s" in text and "(block:12)" in text
    # the stated 2.4 s in both conventions: PaLM's (attention counted) above the article's own 6N
    mfu_palm, mfu_6n = t.stated_mfu_palm.iloc[0], t.stated_mfu_6n.iloc[0]
    assert 1 < mfu_6n < mfu_palm and f"({mfu_6n:.0%} in the article's own 6N convention)" in text
    assert "is 4.98, not the 0.497 it prints" in text


def test_b15_text_says_no_rung_is_decided_inside_the_switch_margin():
    """Every rung of the article's ladder changes its step by less than the course's switch margin,
    so the text sets the predicted gains beside the article's as sizes, never verdicts; the network
    readings' single steps decide nothing either. The baseline's exposed data wait is the data
    rung's own 0.3 s, the trace's 1.5 s a sensitivity row."""
    from mfulab.studies.predict import worked_examples
    from mfulab.studykit.step_error import SWITCH_MARGIN

    ladder, sens = worked_examples.b15_ladder(), worked_examples.b15_sensitivity()
    text = case_texts.b15_text(ladder, sens, 0.2)
    steps = list(ladder.article_step_s)
    assert all(abs(a / b - 1) <= SWITCH_MARGIN for a, b in zip(steps, steps[1:]))
    assert "No rung is decided here" in text and f"×{steps[0] / steps[1]:.3f}" in text
    assert "unlikely" not in text and f"±{SWITCH_MARGIN:.0%}" in text
    assert "a single modelled step decides nothing" in text and "data wait 1.5 s" in set(sens.reading)
    assert worked_examples.B15_CHANGES[0]["data_s"] == 0.3
    # one port per node: ZeRO-2's 32 reductions alone outlast the article's whole step (a bound)
    assert "one 200 Gb/s port per GPU" in text and "cannot hold at micro-batch 1" in text
    assert {"micro-batch 8", "micro-batch 8, network 200 Gb/s per node"} <= set(sens.reading)
    # DDP (the knobs §4 names) reduces once per step: one port per node costs far less DP traffic
    s = sens.set_index("reading")
    ddp = s.loc["DDP + ZeroRedundancyOptimizer, network 200 Gb/s per node"]
    assert ddp.framework == "ddp" and ddp.dp_comm_s < s.loc["network 200 Gb/s per node", "dp_comm_s"] / 4
    assert "which framework ran decides whether one port per node can hold" in text
    # micro-batch 8 with unfused attention overflows the 80 GB card: the text says it is no reading
    assert not s.loc["micro-batch 8", "fits"] and "does not fit the card" in text


def test_the_memory_model_is_checked_one_sided_against_published_peak_reserved_memory():
    """torchtitan prints the allocator's peak reserved GiB: at least what a run allocated, so a
    model above it overstates by at least the ratio, and a model below it says nothing."""
    import pandas as pd

    from mfulab.studies.predict import memory_check

    runs = [
        {"id": "a", "published": {"peak_memory_gib": 80.0}},
        {"id": "b", "published": {"peak_memory_gib": 80.0}},
        {"id": "c", "published": {"tokens_per_s_per_gpu": 1.0}},
        {"id": "d", "published": {"peak_memory_gib": 50.0}},
    ]
    df = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "source": "s",
            "split": "test",
            "device": "h100-sxm",
            "refused": ["", "", "", "beyond the model"],
            "memory_gib": [96.0, 40.0, 70.0, 90.0],
        }
    )
    t = memory_check.memory_table(df, runs)
    # no published figure (c) or refused (d): not checked
    assert list(t.id) == ["a", "b"] and list(t.overstates) == [True, False]
    assert t.modelled_over_published.iloc[0] == pytest.approx(1.2)
    text = memory_check.memory_text(t)
    assert "by at least 20%" in text and "nothing follows" in text
    assert "never states more" in memory_check.memory_text(t[~t.overstates])


def test_switch_pairs_are_sorted_by_type_and_blind_pairs_kept_apart():
    """The pooled switch margin taken apart: a pair's type is the first switch it differs in, and
    the text says when one type carries the pool or when no blind switch pair exists."""
    import pandas as pd

    from mfulab.studies.predict import margin_types as mt

    assert mt.switch_type("framework, pp, tp, zero_stage") == "ZeRO stage or framework"
    assert mt.switch_type("global_batch, recompute") == "recompute policy"
    assert mt.switch_type("tp_comm_overlap") == "TP communication overlap"
    assert mt.switch_type("nothing the files record") == mt.UNRECORDED
    assert mt.switch_type("dtype") == mt.OTHER
    pairs = pd.DataFrame(
        {
            "source": ["n", "n", "n", "t", "x"],
            "kind": ["switch", "switch", "switch", "switch", "layout"],
            "differ_in": ["zero_stage, tp", "framework", "zero_stage", "tp_comm_overlap", "tp"],
            "settings_differing": [2, 1, 1, 1, 1],
            "ratio_error": [0.5, 0.4, 0.6, 0.2, 0.1],
            "null_ratio_error": [2.0, 1.0, 1.5, 0.3, 0.2],
        }
    )
    types = mt.switch_type_margins(pairs)
    assert list(types["switch type"]) == ["ZeRO stage or framework", "TP communication overlap"]
    assert list(types.pairs) == [3, 1] and types.largest_source_share.iloc[0] == 1.0
    no_blind = mt.blind_margins(pairs[pairs.kind == "layout"])
    assert list(no_blind.blind_pairs) == [1, 0]
    text = mt.types_text(types, no_blind)
    assert "3 (75%) are 'ZeRO stage or framework'" in text and "No blind switch pair exists" in text
    assert "2 of 2 types rest on fewer than five pairs" in text


def test_the_worked_baseline_sums_term_by_term_to_the_predicted_step():
    from mfulab.studies.predict import worked_examples

    row = worked_examples.b15_ladder().iloc[0]
    table = worked_examples.terms_table(row)
    assert table.seconds.sum() == pytest.approx(row.predicted_step_s)
    assert (table.seconds > 0).all() and table.share_of_step.sum() == pytest.approx(1.0)
    assert {"matmul", "attention", "dp_comm_exposed", "data"} <= set(table.term)
