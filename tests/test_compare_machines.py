"""How chapter 10 tells machines apart: each kind of number by its own rule (exact, interval, points,
relative spread), the calibration's drift for the calibration's figures, per-core scaling of one
host on two core budgets, and the published all-reduce list with its one NVLS rule."""

import json

import pandas as pd
import pytest

from mfulab.studies.compare import analysis as compare
from mfulab.studies.compare import drift, hosts, published_data, scaling


def _records(machines, **metrics):
    return {
        "study": "compare",
        "params": {"results_root": "results"},
        "machines": machines,
        "metrics": metrics,
    }


def test_shares_are_compared_in_points_with_the_presence_floor():
    # 0.33% against 0.42% is a 24% relative spread, but both sit under the 1-point floor: not told apart
    assert drift.across_points([0.0033, 0.0042], 0.07, 0.01) == "within drift (0.1 pt ≤ 1.0 pt)"
    # MFU 57.4% against 61.8% at 5% drift: 4.4 points against 5% of 61.8 = 3.1 points
    assert drift.across_points([0.574, 0.618], 0.05, 0.01) == "differs (4.4 pt > 3.1 pt)"
    # a signed error: the drift is taken on the larger magnitude
    assert drift.across_points([-0.216, -0.256], 0.09, 0.01) == "differs (4.0 pt > 2.3 pt)"
    assert drift.across_points([0.5, 0.5], 0.05, 0.01) == "the same"
    assert drift.across_points([0.5, "missing"], 0.05, 0.01) == ""


def test_an_effect_with_an_interval_differs_only_where_the_intervals_are_apart():
    assert drift.across_intervals([(0.95, 1.18), (1.04, 1.17)]).startswith("within intervals")
    assert drift.across_intervals([(0.90, 1.00), (1.04, 1.17)]) == "differs (intervals apart: 1 < 1.04)"
    assert drift.across_intervals([(0.9, 1.1)]) == ""


def test_a_number_no_fresh_run_moved_is_compared_exactly():
    assert drift.across_exact([166.4e9, 332.8e9]) == "differs (exact: no drift between fresh runs)"
    assert drift.across_exact([1.5, 1.5]) == "the same"
    # a fitted slope of 2 on three machines, equal but for floating-point round-off
    assert drift.across_exact([2.000000000000002, 2.0000000000000013, 2.0]) == "the same"
    # across_cell picks the rule by what the number is
    assert drift.across_cell([1.0, 2.0], "FLOP/s", 0.05, exact=True).startswith("differs (exact")
    assert drift.across_cell([0.3, 0.31], "fraction", 0.05, exact=False).startswith("within drift (1.0 pt")
    assert drift.across_cell([1.0, 2.0], "×", 0.05, exact=False) == "differs (67% > 5%)"
    assert drift.across_cell([1.0, 2.0], "×", 0.05, False, [(0.9, 1.1), (1.0, 2.2)]).startswith("within")


def test_the_formatted_table_folds_an_interval_into_its_row_and_compares_by_it():
    anatomy = {
        "a": {"ladder_speedup": 1.01, "ladder_speedup_lo": 0.95, "ladder_speedup_hi": 1.18},
        "b": {"ladder_speedup": 1.10, "ladder_speedup_lo": 1.04, "ladder_speedup_hi": 1.17},
    }
    records = _records(["a", "b"], anatomy=anatomy)
    shown = compare.formatted(compare.comparison_table(records), records)
    assert not shown.metric.str.contains(r"interval over the rounds \(low\)").any()  # folded in
    row = shown[shown.metric == "naive → every knob on"].iloc[0]
    assert row["a"] == "1.01× [0.95×, 1.18×]"
    # 1.01 against 1.10 is a 9% spread, past 5%; the intervals overlap: not told apart
    assert row["across machines"].startswith("within intervals")


def test_the_calibrations_figures_take_the_calibrations_drift(tmp_path):
    folder = tmp_path / "m" / "calibration"
    folder.mkdir(parents=True)
    entries = {
        "matmul:fp32 best_flops_per_s": {"drift": 0.05},
        "matmul:bf16 best_flops_per_s": {"drift": 0.11},
        "bandwidth plateau_bytes_per_s": {"drift": 0.04},
    }
    (folder / "stability.json").write_text(json.dumps({"runs": 3, "drift": entries}))
    found = drift.calibration_drift(tmp_path, ["m", "other"])
    # the widest matmul dtype, the copy bandwidth; no α in this run, and no run on "other"
    assert found == {
        "m": {
            "matmul_ceiling_flops_per_s": 0.11,
            "ceiling_over_datasheet": 0.11,
            "memory_bandwidth_bytes_per_s": 0.04,
        }
    }
    # a calibration figure is never read as exact, though each study's own fresh runs see it fixed
    mfu = {"a": {"matmul_ceiling_flops_per_s": 1.6e11}, "b": {"matmul_ceiling_flops_per_s": 1.65e11}}
    records = _records(["a", "b"], mfu=mfu)
    records["drift"] = {
        "mfu": {"a": {"matmul_ceiling_flops_per_s": 0.0}, "b": {"matmul_ceiling_flops_per_s": 0.0}}
    }
    shown = compare.formatted(compare.comparison_table(records), records)
    assert shown.iloc[0]["across machines"].startswith("within drift")


def test_one_host_on_two_core_budgets_is_read_per_core():
    records = {
        "hosts": {
            "a": {"device_name": "cpu x", "cpu_count": 1},
            "b": {"device_name": "cpu x", "cpu_count": 2},
        }
    }
    assert hosts.per_core_scaling({"a": 100.0, "b": 213.0}, "tokens/s", records) == "1.06"  # super-linear
    assert hosts.per_core_scaling({"a": 0.6, "b": 0.325}, "s", records) == "0.92"  # a time: inverted
    assert hosts.per_core_scaling({"a": 1.0, "b": 2.0}, "×", records) == ""  # a ratio has no per core
    # a third machine of another kind of host is left out; the two of one host still scale
    records["hosts"]["c"] = {"device_name": "cpu z", "cpu_count": 2}
    assert hosts.per_core_scaling({"a": 100.0, "b": 213.0, "c": 50.0}, "tokens/s", records) == "1.06"
    records["hosts"]["b"]["device_name"] = "gpu y"
    assert hosts.per_core_scaling({"a": 100.0, "b": 213.0}, "tokens/s", records) == ""  # two kinds
    assert hosts.per_core_scaling({"a": 100.0, "b": 213.0, "c": 50.0}, "tokens/s", records) == ""


def test_the_deviations_note_names_nonlinear_rates_and_reversed_effects():
    shown = pd.DataFrame(
        [
            {"metric": "tokens/s", "a": "3.37 ktokens/s", "b": "7.19 ktokens/s", "÷ cores": "1.07"},
            {"metric": "bandwidth", "a": "13.5 GB/s", "b": "26 GB/s", "÷ cores": "0.96"},
            {
                "metric": "fusion speed-up",
                "a": "0.73×",
                "b": "1.41× (moves 9% between fresh runs)",
                "÷ cores": "",
            },
            {"metric": "recompute", "a": "1.41×", "b": "1.38×", "÷ cores": ""},
        ]
    )
    shown["not comparable on"] = ""
    table = pd.DataFrame(
        [
            {"metric": "tokens/s", "unit": "tokens/s", "a": 3370.0, "b": 7190.0},
            {"metric": "bandwidth", "unit": "B/s", "a": 13.5e9, "b": 26e9},
            {"metric": "fusion speed-up", "unit": "×", "a": 0.73, "b": 1.41},
            {"metric": "recompute", "unit": "×", "a": 1.41, "b": 1.38},
        ]
    )
    note = scaling.deviations_note(table, shown, ["a", "b"], 0.05)
    assert "tokens/s (1.07, super-linear)" in note and "bandwidth" not in note.split("Effects")[0]
    assert "fusion speed-up (0.73× on `a`, 1.41× on `b`)" in note and "recompute" not in note
    shown.loc[0, "not comparable on"] = "a"  # an oversubscribed run says nothing per core
    assert "tokens/s" not in scaling.deviations_note(table, shown, ["a", "b"], 0.05)
    assert scaling.deviations_note(table, shown, ["a"], 0.05) == ""


def test_ranks_count_every_process_a_study_launches_and_merged_rows_need_every_study_crowded(tmp_path):
    for study, params in (("parallelism", {"ranks": 2, "pipeline_ranks": [2, 4]}), ("mfu", {})):
        folder = tmp_path / "m" / study
        folder.mkdir(parents=True)
        (folder / "env.json").write_text(json.dumps({"params": params}))
    assert hosts.ranks_per_study(tmp_path, "m") == {"parallelism": 4}  # the 4-stage pipeline
    records = {"hosts": {"m": {"cpu_count": 2}}, "ranks": {"m": {"parallelism": 4, "anatomy": 2}}}
    assert hosts.not_comparable(records, ["parallelism"]) == ["m"]
    # a key mfu (one process) and parallelism both wrote: mfu's uncrowded run has it
    assert hosts.not_comparable(records, ["mfu", "parallelism"]) == []


def test_the_published_block_collapses_a_split_with_no_priced_row_and_names_the_fourth_holdout():
    table = pd.DataFrame(
        [
            {
                "study": "predict",
                "metric": "third: median",
                "unit": "fraction",
                "key": "h3_median",
                "m": "missing",
            },
            {"study": "predict", "metric": "third rows", "unit": "rows", "key": "h3_rows", "m": 0},
            {
                "study": "predict",
                "metric": "m4",
                "unit": "fraction",
                "key": "holdout4_as_noted_median_abs_error",
                "m": 0.194,
            },
            {
                "study": "predict",
                "metric": "n4",
                "unit": "fraction",
                "key": "holdout4_as_noted_null_median_abs_error",
                "m": 0.356,
            },
            {"study": "predict", "metric": "r4", "unit": "rows", "key": "holdout4_as_noted_rows", "m": 19},
        ]
    )
    block = published_data.published_block(table)
    assert "h3_median" not in set(block.key) and "every row refused" in block.metric.iloc[0]
    text = published_data.excluded_holdout_text(block)
    assert "(19 rows" in text and "19.4% median |error| against the null model's 35.6%" in text


def test_the_published_all_reduce_list_has_one_nvls_rule():
    from mfulab.analytic import nccl_published as n

    for row in n.NCCL_TESTS_PUBLISHED:
        assert row["source"] and row["largest_message"] and row["figure"] in ("measured", "expected")
        share = n.share_of_line(row)
        # an NVLS row passes the line rate and has no share; every ring row stays under it
        assert (share is None) == (row["algorithm"] == n.NVLS)
        assert share is None or share < 1
    assert all(r["algorithm"] != n.NVLS for r in n.ring_rows("node"))
    assert "largest message not shown" in n.label(
        next(r for r in n.NCCL_TESTS_PUBLISHED if "not" in r["largest_message"][:3])
    )
    with pytest.raises(StopIteration):
        next(
            r
            for r in n.NCCL_TESTS_PUBLISHED
            if r["algorithm"] == n.NVLS and r["busbw_gb_per_s"] < r["line_gb_per_s"]
        )


def test_the_ceilings_figure_adds_a_per_core_panel_and_drift_whiskers_for_one_host():
    mfu = {
        m: {"matmul_ceiling_flops_per_s": c, "datasheet_peak_flops_per_s": p}
        for m, c, p in (("a", 1.69e11, 1.664e11), ("b", 3.35e11, 3.328e11))
    }
    records = _records(["a", "b"], mfu=mfu)
    records["hosts"] = {"a": {"device_name": "x", "cpu_count": 1}, "b": {"device_name": "x", "cpu_count": 2}}
    records["drift"] = {"calibration": {"b": {"matmul_ceiling_flops_per_s": 0.1}}}
    fig = compare.plot_ceilings(compare.comparison_table(records), records)
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "GFLOP/s per usable core"
    assert sorted(t.get_text() for t in fig.axes[1].texts) == ["166", "166", "168", "169"]
    # b's ceiling carries a whisker of ± half its 10% drift: 335 ± 16.75 GFLOP/s on the first panel
    tops = [y for line in fig.axes[0].get_lines() for y in line.get_ydata()]
    assert max(tops) == pytest.approx(0.335 * 1.05)


def test_the_mfu_gap_is_not_split_on_an_oversubscribed_job_and_an_mfu_carries_the_ceilings_drift():
    from mfulab.studies.compare import mfu_gap

    mfu = {m: {"steady_mfu_vs_ceiling": v} for m, v in (("a", 0.574), ("b", 0.618))}
    anatomy = {
        m: {"best_mfu": 0.35, "best_wait_share": 0.1, "best_compute_efficiency": 0.39} for m in ("a", "b")
    }
    records = _records(["a", "b"], mfu=mfu, anatomy=anatomy)
    records["hosts"] = {"a": {"cpu_count": 1}, "b": {"cpu_count": 2}}
    records["ranks"] = {"a": {"anatomy": 2}, "b": {"anatomy": 2}}
    note = mfu_gap.mfu_gap_note(compare.comparison_table(records), records)
    assert "`a`" in note and "not split" in note.split("`b`")[0] and "Of the gap" in note.split("`b`")[1]
    # 57.4% vs 61.8%: 4.4 points; at 5% drift it differs (3.1 pt), at the ceiling's 11% it does not
    records = _records(["a", "b"], mfu=mfu)
    shown = compare.formatted(compare.comparison_table(records), records)
    row = shown[shown.metric.str.startswith("MFU of the reference step")].iloc[0]
    assert row["across machines"].startswith("differs")
    records["drift"] = {"calibration": {"b": {"matmul_ceiling_flops_per_s": 0.11}}}
    shown = compare.formatted(compare.comparison_table(records), records)
    row = shown[shown.metric.str.startswith("MFU of the reference step")].iloc[0]
    assert row["across machines"].startswith("within drift")


def test_the_verdict_matrix_carries_each_rows_evidence_cut_at_a_word():
    from mfulab.studies.compare import matrix

    long = "word " * 100
    claims = [{"id": "A1", "claim": "c", "verdict": "shown", "basis": "toy regime", "evidence": long}]
    records = {"machines": ["m"], "metrics": {"s": {"m": {"claims": claims}}}}
    table = matrix.verdict_table(records)
    text = table.evidence.iloc[0]
    assert text.endswith(" …") and len(text) <= matrix.EVIDENCE_CHARS + 2 and "wor …" not in text


def test_a_number_of_a_study_run_at_other_code_names_the_code():
    """The comparison table's `other code` column names, per row, the studies whose machines ran
    other code (each machine with its commit); empty where all ran one revision."""
    mfu = {"a": {"matmul_ceiling_flops_per_s": 1.6e11}, "b": {"matmul_ceiling_flops_per_s": 3.2e11}}
    records = _records(["a", "b"], mfu=mfu)
    records["revisions"] = {
        "a": {"mfu": {"digest": "x", "commit": "1111111"}},
        "b": {"mfu": {"digest": "x", "commit": "2222222"}},
    }
    assert compare.formatted(compare.comparison_table(records), records).iloc[0]["other code"] == ""
    records["revisions"]["b"]["mfu"]["digest"] = "y"
    shown = compare.formatted(compare.comparison_table(records), records)
    assert shown.iloc[0]["other code"] == "mfu: a at 1111111, b at 2222222"
