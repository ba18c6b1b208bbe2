"""The machine comparison's own logic: one row per property, the note when one machine is all
there is, the figure's take-away title, readable units (no timing, nothing measured)."""

import pytest

from mfulab.studies.compare import analysis as compare
from mfulab.studies.compare import mfu_gap


def _records(machines, mfu=None, fusion=None, overlap=None, anatomy=None):
    """Records as ``compare.collect`` returns them, with the given metrics per study and machine."""
    return {
        "study": "compare",
        "params": {"results_root": "results"},
        "machines": machines,
        "metrics": {
            "mfu": mfu or {},
            "fusion": fusion or {},
            "overlap": overlap or {},
            "anatomy": anatomy or {},
        },
    }


def _shown(table, records, row):
    """The formatted row of the table's row ``row`` (a boolean mask), found by its metric label:
    the formatted table folds interval bounds into their row, so its rows are not the table's."""
    shown = compare.formatted(table, records)
    return shown[shown.metric == table[row].metric.iloc[0]].iloc[0]


def test_a_property_several_studies_write_is_one_row_unless_they_disagree():
    same = {"a": {"matmul_ceiling_flops_per_s": 3e11}, "b": {"matmul_ceiling_flops_per_s": 7e14}}
    table = compare.comparison_table(_records(["a", "b"], mfu=same, fusion={"a": same["a"]}))
    rows = table[table.key == "matmul_ceiling_flops_per_s"]
    assert len(rows) == 1 and rows.iloc[0].study.startswith("mfu, fusion") and rows.iloc[0].b == 7e14
    assert not compare.disagreements(table)
    other = {"a": {"matmul_ceiling_flops_per_s": 2e11}}
    table = compare.comparison_table(_records(["a", "b"], mfu=same, fusion=other))
    rows = table[table.key == "matmul_ceiling_flops_per_s"]
    assert len(rows) == 2 and compare.disagreements(table) == [rows.iloc[1].metric]
    assert "differs from mfu" in rows.iloc[1].metric


def test_one_machine_is_said_to_compare_nothing():
    one = _records(["cpu-2c"], mfu={"cpu-2c": {"matmul_ceiling_flops_per_s": 3.5e11}})
    assert "compares nothing" in compare.scope_note(one)
    two = _records(["cpu-2c", "h100"])
    assert "compares nothing" not in compare.scope_note(two) and "2 machines" in compare.scope_note(two)
    title = compare.ceilings_takeaway(compare.comparison_table(one))
    assert "One machine only" in title and "350 GFLOP/s" in title


def test_the_figure_title_states_the_comparison():
    mfu = {
        "cpu": {"matmul_ceiling_flops_per_s": 3.5e11, "datasheet_peak_flops_per_s": None},
        "gpu": {"matmul_ceiling_flops_per_s": 7.0e14, "datasheet_peak_flops_per_s": 9.894e14},
    }
    table = compare.comparison_table(_records(["cpu", "gpu"], mfu=mfu))
    title = compare.ceilings_takeaway(table)
    assert "gpu's matmul ceiling is 2,000× cpu's" in title and "71% of its peak (datasheet or ISA)" in title


def test_the_calibrations_alpha_and_b_are_the_machines_and_busbw_a_check():
    overlap = {
        "m": {"alpha_s": 1.41e-4, "link_bytes_per_s": 1.23e9, "all_reduce_busbw_largest_bytes_per_s": 1.15e9}
    }
    shown = compare.formatted(compare.comparison_table(_records(["m"], overlap=overlap))).set_index("metric")
    alpha = [m for m in shown.index if "latency α" in m]
    bandwidth = [m for m in shown.index if "bandwidth B" in m]
    busbw = [m for m in shown.index if "busbw" in m]
    assert shown.loc[alpha[0], "m"] == "141 µs" and "calibration" in alpha[0]
    assert shown.loc[bandwidth[0], "m"] == "1.23 GB/s" and "calibration" in bandwidth[0]
    assert len(busbw) == 1 and busbw[0].startswith("check:")


def test_mfu_names_its_flops_convention_shares_are_percent_and_ratios_keep_their_unit():
    mfu = {"m": {"steady_mfu_vs_ceiling": 0.593, "flops_convention": "palm"}}
    fusion = {"m": {"ln_layer_share": 0.1357, "ln_fusion_speedup_largest_p": 1.418}}
    records = _records(["m"], mfu=mfu, fusion=fusion)
    shown = compare.formatted(compare.comparison_table(records), records).set_index("metric")
    # other studies have MFUs too; chapter 01 has one per ceiling (this process's, the calibration's)
    mfu_row = [m for m in shown.index if "MFU of the reference step (vs the ceiling timed" in m]
    assert len(mfu_row) == 1 and "palm FLOPs convention" in mfu_row[0]
    assert shown.loc[mfu_row[0], "m"] == "59.3%"
    share = [m for m in shown.index if "share of one layer" in m]
    assert shown.loc[share[0], "m"] == "13.6%"
    speedup = [m for m in shown.index if "fusion speed-up" in m]
    assert shown.loc[speedup[0], "m"] == "1.42×"
    recorded = compare.comparison_table(_records(["m"], mfu={"m": {"steady_mfu_vs_ceiling": 0.5}}))
    assert any("FLOPs convention not recorded" in m for m in recorded.metric)


def test_a_value_that_drifts_more_than_assumed_between_runs_says_so():
    from mfulab.measure.timing import RUN_TO_RUN_DRIFT

    fusion = {"m": {"ln_fusion_speedup_largest_p": 1.418, "ln_layer_share": 0.13}}
    records = _records(["m"], fusion=fusion)
    drift = 2 * RUN_TO_RUN_DRIFT
    records["drift"] = {"fusion": {"m": {"ln_fusion_speedup_largest_p": drift, "ln_layer_share": 0.01}}}
    shown = compare.formatted(compare.comparison_table(records), records).set_index("metric")
    speedup = [m for m in shown.index if "fusion speed-up" in m][0]
    share = [m for m in shown.index if "share of one layer" in m][0]
    assert shown.loc[speedup, "m"] == f"1.42× (moves {drift:.0%} between fresh runs)"
    assert "between fresh runs" not in shown.loc[share, "m"]  # under the assumed drift


def test_ceilings_are_point_markers_not_bars_on_the_log_axis():
    mfu = {
        "cpu": {"matmul_ceiling_flops_per_s": 3.5e11, "datasheet_peak_flops_per_s": None},
        "gpu": {"matmul_ceiling_flops_per_s": 7.0e14, "datasheet_peak_flops_per_s": 9.894e14},
    }
    fig = compare.plot_ceilings(compare.comparison_table(_records(["cpu", "gpu"], mfu=mfu)))
    ax = fig.axes[0]
    assert not ax.patches  # no bars
    points = sorted(y for line in ax.get_lines() for y in line.get_ydata())
    assert points == [0.35, 700.0, 989.4]
    assert ax.get_yscale() == "log"  # a CPU beside a GPU spans decades
    cpus = {
        m: {"matmul_ceiling_flops_per_s": c, "datasheet_peak_flops_per_s": 2 * c}
        for m, c in (("a", 1.5e11), ("b", 3e11))
    }
    ax = compare.plot_ceilings(compare.comparison_table(_records(["a", "b"], mfu=cpus))).axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim() == (0, pytest.approx(0.75))  # no empty decades


def test_the_verdict_matrix_lines_up_claims_rows_and_marks_differences_and_flips():
    """One row per claims row (a second row of the same id is "A5 (2)", as the stability run
    names it), one column per machine; a machine without the study says missing; a row that
    differs between machines is marked, and so is one that flipped between fresh runs."""

    def claims(*verdicts):
        return [{"id": i, "claim": f"claim {i}", "verdict": v, "basis": "measured here"} for i, v in verdicts]

    records = _records(
        ["cpu", "gpu"],
        mfu={
            "cpu": {"claims": claims(("A5", "shown"), ("A5", "refuted"), ("B1", "confirmed"))},
            "gpu": {"claims": claims(("A5", "confirmed"), ("A5", "refuted"), ("B1", "confirmed"))},
        },
        overlap={"cpu": {"claims": claims(("A3", "shown"))}},
    )
    records["flips"] = {"mfu": {"cpu": ["A5 (2)"]}}
    table = compare.verdict_table(records).set_index(["study", "claim_id"])
    assert list(table.index) == [("mfu", "A5"), ("mfu", "A5 (2)"), ("mfu", "B1"), ("overlap", "A3")]
    assert table.loc[("mfu", "A5"), "differs"] and not table.loc[("mfu", "B1"), "differs"]
    assert table.loc[("overlap", "A3"), "gpu"] == compare.MISSING
    assert not table.loc[("overlap", "A3"), "differs"]  # missing is not a different verdict
    assert table.loc[("mfu", "A5 (2)"), "flipped on"] == "cpu"
    note = compare.verdict_note(compare.verdict_table(records), records["machines"])
    assert "4 claims rows over 2 machines" in note and "1 with a different verdict" in note
    assert "mfu A5 (2) (on cpu)" in note
    # every row here rests on a measurement: a GPU could change it; an analysis row could not
    assert table["rests on the machine"].all() and "4 of them resting on a measurement" in note
    # a documented behaviour sized by a timing here (by construction) can be left open on another box
    records["metrics"]["mfu"]["cpu"]["claims"][2]["basis"] = "by construction"
    assert (
        compare.verdict_table(records)
        .set_index(["study", "claim_id"])
        .loc[("mfu", "B1"), "rests on the machine"]
    )
    for machine in ("cpu", "gpu"):  # a row rests on the machine where any machine measured it
        records["metrics"]["mfu"][machine]["claims"][2]["basis"] = "analysis at the article's configuration"
    assert (
        not compare.verdict_table(records)
        .set_index(["study", "claim_id"])
        .loc[("mfu", "B1"), "rests on the machine"]
    )


def test_verdict_matrix_names_unknown_flip_status_and_leaves_oversubscribed_runs_out_of_differs():
    """A machine without a stability run of a study cannot say whether its verdicts flip; a
    machine whose multi-rank run had more ranks than usable cores is not compared on the rows that
    rest on its measurements, but still is on analysis rows."""
    records = _records(
        ["cpu-1c", "cpu-2c"],
        anatomy={
            "cpu-1c": {
                "claims": [
                    {
                        "id": "B13",
                        "claim": "c",
                        "verdict": "inconclusive on this machine",
                        "basis": "toy regime",
                    },
                    {"id": "B2", "claim": "d", "verdict": "shown", "basis": "the article's own arithmetic"},
                ]
            },
            "cpu-2c": {
                "claims": [
                    {"id": "B13", "claim": "c", "verdict": "shown", "basis": "toy regime"},
                    {"id": "B2", "claim": "d", "verdict": "refuted", "basis": "the article's own arithmetic"},
                ]
            },
        },
    )
    table = compare.verdict_table(records).set_index("claim_id")
    assert table.loc["B13", "differs"] and table.loc["B13", "no stability run on"] == ""  # not recorded
    records["stability_runs"] = {"anatomy": ["cpu-2c"]}
    records["hosts"] = {"cpu-1c": {"cpu_count": 1}, "cpu-2c": {"cpu_count": 2}}
    records["ranks"] = {"cpu-1c": {"anatomy": 2}, "cpu-2c": {"anatomy": 2}}
    table = compare.verdict_table(records).set_index("claim_id")
    assert table.loc["B13", "no stability run on"] == "cpu-1c"
    assert table.loc["B13", "not comparable on"] == "cpu-1c" and not table.loc["B13", "differs"]
    assert table.loc["B2", "not comparable on"] == "" and table.loc["B2", "differs"]  # not a measurement
    note = compare.verdict_note(compare.verdict_table(records), records["machines"])
    assert "unknown on cpu-1c" in note and "1 row measured on a machine whose run had more ranks" in note


def test_two_machines_numbers_read_as_highest_over_lowest():
    from mfulab.studies.compare import drift

    assert drift.highest_over_lowest({"a": 1.0, "b": 1.98}) == "1.98× (b)"
    assert drift.highest_over_lowest({"a": 2.0, "b": compare.MISSING}) == ""
    assert drift.highest_over_lowest({"a": 0.0, "b": 1.0}) == ""  # no ratio with a zero
    assert drift.highest_over_lowest({"a": 1.5, "b": 1.5}) == ""  # equal: no machine is the highest
    mfu = {"a": {"matmul_ceiling_flops_per_s": 1e11}, "b": {"matmul_ceiling_flops_per_s": 2e11}}
    shown = compare.formatted(compare.comparison_table(_records(["a", "b"], mfu=mfu))).set_index("metric")
    assert "2.00× (b)" in shown["highest ÷ lowest"].tolist()


def test_published_references_are_read_as_shares_of_their_peak_beside_this_machine():
    """While results/ holds one machine, chapter 10 reads it against published measurements:
    every row labelled published or measured here, the share of the peak computed from the two
    figures the row states, the MAMF rows equal to devices.yaml's where both name the device."""
    from mfulab.analytic import devices
    from mfulab.studies.compare import published

    data = published.load()
    mfu = {"cpu-2c": {"matmul_ceiling_flops_per_s": 1.81e11, "datasheet_peak_flops_per_s": 1.57e11}}
    ceilings = compare.measured_ceilings(compare.comparison_table(_records(["cpu-2c"], mfu=mfu)))
    assert ceilings == {"cpu-2c": (1.81e11, 1.57e11)}
    refs = published.reference_table(data, ceilings, gloo={"cpu-2c": (1.16e9, 25.4e9)})
    assert set(refs.basis) == {"published", "measured here"}
    here = refs[refs.basis == "measured here"].iloc[0]
    assert here.machine == "cpu-2c" and abs(here.share_of_peak - 1.81 / 1.57) < 1e-9
    h100 = refs[refs.machine == "NVIDIA H100 SXM"].iloc[0]
    # one peak per device across the course: devices.yaml's 989.4, not the source table's rounded 989
    assert abs(h100.share_of_peak - 794.5 / 989.4) < 1e-9 and "Maximum Achievable Matmul" in h100.source
    # the all-reduce rows are chapter 02's list; this machine's gloo run over its copy bandwidth is
    # measured here but not comparable (a memory copy is no link)
    gloo = refs[(refs.basis == "measured here") & refs.quantity.str.startswith("all-reduce")].iloc[0]
    assert gloo.share_of_peak == pytest.approx(1.16 / 25.4) and not gloo.comparable
    from mfulab.analytic import nccl_published

    busbw = refs[(refs.basis == "published") & refs.quantity.str.startswith("all-reduce")]
    assert len(busbw) == len(nccl_published.NCCL_TESTS_PUBLISHED)
    mamf = {k: devices.device_spec(k).mamf_flops_per_s["bf16"] / 1e12 for k in ("h100-sxm", "a100")}
    assert mamf["h100-sxm"] == h100.value  # one figure in two files: kept equal
    assert mamf["a100"] == refs[refs.machine == "NVIDIA A100 SXM"].value.iloc[0]
    sharp = refs[refs.machine.str.contains("SHARP on|NVLS")]
    assert len(sharp) == 3 and sharp.share_of_peak.isna().all()  # an in-switch reduction: no share of a link
    assert not here.comparable and refs[refs.basis == "published"].share_of_peak.isna().sum() == 3
    assert (
        "of their dense bf16 peak" in published.takeaway(refs)
        and "cpu-2c 115% of its peak in fp32 (above its ISA peak, a failed check of that peak"
        in published.takeaway(refs)
    )


def test_machine_balance_sets_each_machine_against_its_memory(monkeypatch):
    """FLOP per byte of memory traffic: a published device's datasheet peak and MAMF over its
    datasheet bandwidth (A100 SXM: 312 / 2.039 TB/s = 153), this machine's ceiling over its
    measured copy; an oversubscribed gloo run is named on its reference row."""
    from mfulab.studies.compare import balance, published

    data = published.load()
    table = balance.machine_balance(data, {"cpu-2c": (3.3e11, 3.3e11)}, {"cpu-2c": 25.4e9})
    a100 = table[table.machine == "NVIDIA A100 SXM"].iloc[0]
    assert a100.peak_flop_per_byte == pytest.approx(312 / 2.039, rel=1e-3)
    assert a100.best_matmul_flop_per_byte == pytest.approx(271.2 / 2.039, rel=1e-3)
    here = table[table.machine == "cpu-2c"].iloc[0]
    assert here.best_matmul_flop_per_byte == pytest.approx(3.3e11 / 25.4e9) and here["dtype"] == "fp32"
    note = balance.balance_note(table)
    assert "cpu-2c 13 at its ceiling" in note and "memory-bound" in note
    # no copy bandwidth measured: the machine has no balance row
    assert "cpu-2c" not in set(balance.machine_balance(data, {"cpu-2c": (1.0, 1.0)}, {}).machine)
    refs = published.reference_table(data, {}, gloo={"cpu-1c": (1e9, 1e10)}, crowded=["cpu-1c"])
    assert refs[refs.basis == "measured here"].machine.iloc[0].startswith("cpu-1c (oversubscribed")


def test_the_matrix_shows_the_machine_bound_rows_and_folds_the_rest():
    import pandas as pd

    from mfulab.studies.compare import matrix

    table = pd.DataFrame(
        {
            "study": ["a", "b"],
            "claim_id": ["A1", "B1"],
            "claim": ["x", "y"],
            "basis": ["toy regime", "the article's own arithmetic"],
            "cpu-2c": ["shown", "refuted"],
            "differs": [False, False],
            "flipped on": ["", ""],
            "no stability run on": ["", ""],
            "not comparable on": ["", ""],
            "differs only where not comparable": [False, False],
            "rests on the machine": [True, False],
            "evidence": ["e", "f"],
        }
    )
    bound = matrix.machine_bound(table)
    assert list(bound.claim_id) == ["A1"] and "evidence" not in bound.columns
    html = matrix.other_rows_html(table)
    assert html.startswith("<details>") and "The other 1 rows" in html and ">B1<" in html
    assert matrix.other_rows_html(table[table["rests on the machine"]]) == ""


def test_a_published_reference_without_a_source_or_with_a_bad_value_is_refused(tmp_path):
    from mfulab.studies.compare import published

    bad = tmp_path / "refs.yaml"
    bad.write_text(
        "references:\n  - {machine: x, quantity: matmul_bf16, published: -1, spec: 2}\n"
        "sources: {matmul_bf16: s}\n"
    )
    with pytest.raises(ValueError, match="positive"):
        published.load(bad)
    bad.write_text("references:\n  - {machine: x, quantity: flops, published: 1, spec: 2}\nsources: {}\n")
    with pytest.raises(ValueError, match="unknown quantity"):
        published.load(bad)


def test_the_two_mfus_of_one_machine_are_explained():
    mfu = {"cpu-2c": {"steady_mfu_vs_ceiling": 0.634}}
    anatomy = {"cpu-2c": {"best_mfu": 0.455}}
    note = mfu_gap.mfu_gap_note(compare.comparison_table(_records(["cpu-2c"], mfu=mfu, anatomy=anatomy)))
    assert "63.4% for one process" in note and "45.5%" in note and "0.72×" in note
    assert "gap" not in note.split(".")[1]  # without chapter 07's split: no attribution
    assert mfu_gap.mfu_gap_note(compare.comparison_table(_records(["cpu-2c"], mfu=mfu))) == ""
    # the ceiling both MFUs divide by, re-timed after chapter 07's job: its move is said
    anatomy["cpu-2c"] |= {"matmul_ceiling_flops_per_s": 200e9, "ceiling_now_flops_per_s": 140e9}
    note = mfu_gap.mfu_gap_note(compare.comparison_table(_records(["cpu-2c"], mfu=mfu, anatomy=anatomy)))
    assert "re-timed right after chapter 07's job reads -30% from the calibration's" in note


def test_the_mfu_gap_splits_into_parts_that_sum_to_it():
    parts = mfu_gap.mfu_gap_parts(0.72, 0.554, wait_share=0.086, compute_efficiency=0.616)
    # the Shapley split: the waits' points are the mean of charging them first (0.72 × 0.086) and
    # last (0.616 × 0.086); the three parts sum to the gap
    assert parts["waits"] == pytest.approx((0.72 + 0.616) / 2 * 0.086)
    assert (parts["waits_last"], parts["waits_first"]) == pytest.approx((0.616 * 0.086, 0.72 * 0.086))
    assert parts["slower compute"] == pytest.approx(0.72 - 0.616 * 0.914 - parts["waits"])
    three = ("waits", "slower compute", "residual")
    assert sum(parts[k] for k in three) == pytest.approx(parts["gap"])
    anatomy = {"cpu-2c": {"best_mfu": 0.554, "best_wait_share": 0.086, "best_compute_efficiency": 0.616}}
    table = compare.comparison_table(
        _records(["cpu-2c"], mfu={"cpu-2c": {"steady_mfu_vs_ceiling": 0.72}}, anatomy=anatomy)
    )
    note = mfu_gap.mfu_gap_note(table)
    # waits take 5.7 of the 16.6 points (5.3–6.2 by the order): 35%; compute below chapter 01's rate 10.0
    assert (
        "Of the gap, 16.6 points," in note
        and "take 5.7 points, 35% of it (5.3–6.2 points by the order" in note
        and "takes 10.0 points" in note
    )


def test_published_runs_mfu_by_device_framework_and_precision(tmp_path):
    """Chapter 09's published runs, read from a machine's results, as MFU by device, framework and
    GEMM precision (model FLOPs per step over the stated step and the cluster's peak); an FP8 run
    is also read against its own precision's peak; no table, no rows."""
    import pandas as pd

    from mfulab.analytic.devices import device_spec, peak_flops_per_s
    from mfulab.studies.compare import published

    assert published.published_runs(tmp_path, ["m"]) == [] and published.published_mfu_table([]).empty
    path = tmp_path / "m" / published.PUBLISHED_RUNS_TABLE
    path.parent.mkdir(parents=True)
    rows = [
        ("a", "s", "a100", "megatron", "bf16", 1.0e16, 1.0e16, 2.0),  # 50%
        ("b", "s", "a100", "megatron", "bf16", 1.0e16, 1.0e16, 4.0),  # 25%
        ("c", "s", "h100-sxm", "fsdp", "bf16", 3.0e16, 1.0e17, 1.0),  # 30%
        ("d", "s", "h100-sxm", "fsdp", "bf16", 3.0e16, 1.0e17, None),  # no stated step: left out
        ("e", "s", "h100-sxm", "fsdp", "fp8", 9.0e16, 1.0e17, 1.0),  # 90% of bf16's peak
    ]
    cols = ["id", "source", "device", "framework", "dtype", "model_flops_per_step", "peak_flops_total"]
    pd.DataFrame(rows, columns=[*cols, "published_step_s"]).to_csv(path, index=False)
    t = published.published_mfu_table(published.published_runs(tmp_path, ["other", "m"]))
    t = t.set_index(["device", "dtype"])
    assert t.loc[("a100", "bf16"), "runs"] == 2 and t.loc[("a100", "bf16"), "median_mfu"] == pytest.approx(
        0.375
    )
    assert t.loc[("h100-sxm", "bf16"), "runs"] == 1 and t.loc[
        ("h100-sxm", "bf16"), "max_mfu"
    ] == pytest.approx(0.3)
    assert t.loc[("h100-sxm", "bf16"), "max_mfu_own_peak"] == pytest.approx(0.3)
    fp8_over_bf16 = peak_flops_per_s("h100-sxm", "fp8") / peak_flops_per_s("h100-sxm", "bf16")
    assert fp8_over_bf16 > 1.9
    assert t.loc[("h100-sxm", "fp8"), "max_mfu"] == pytest.approx(0.9)
    assert t.loc[("h100-sxm", "fp8"), "max_mfu_own_peak"] == pytest.approx(0.9 / fp8_over_bf16)
    # every run behind the pooled rows, one row each, to audit them
    each = published.published_mfu_rows(published.published_runs(tmp_path, ["m"])).set_index("id")
    assert sorted(each.index) == ["a", "b", "c", "e"] and each.loc["a", "mfu"] == pytest.approx(0.5)
    assert published.published_mfu_rows([]).empty
    # over the device's best measured bf16 GEMM (MAMF), the denominator this machine's own MFU uses
    a100 = device_spec("a100")
    over_mamf = 0.375 * peak_flops_per_s("a100", "bf16") / a100.mamf_flops_per_s["bf16"]
    assert t.loc[("a100", "bf16"), "median_mfu_over_mamf"] == pytest.approx(over_mamf)
    # an FP8 run over the FP8 MAMF (stas00's float8_e4m3fn table), never over the bf16 ceiling
    h100 = device_spec("h100-sxm")
    over_fp8 = 0.9 * peak_flops_per_s("h100-sxm", "bf16") / h100.mamf_flops_per_s["fp8"]
    assert t.loc[("h100-sxm", "fp8"), "median_mfu_over_mamf"] == pytest.approx(over_fp8)
    # a table from before the precision column reads as bf16
    pd.DataFrame(
        [r[:4] + r[5:] for r in rows[:1]], columns=[c for c in cols if c != "dtype"] + ["published_step_s"]
    ).to_csv(path, index=False)
    assert published.published_mfu_table(published.published_runs(tmp_path, ["m"])).dtype.tolist() == ["bf16"]


def test_two_result_folders_of_one_host_on_other_cores_are_named_as_such(tmp_path):
    from mfulab import results
    from mfulab.studies.compare import hosts

    for name, cores in (("cpu-1c", 1), ("cpu-2c", 2), ("h100", None)):
        d = tmp_path / name / "mfu"
        d.mkdir(parents=True)
        fingerprint = (
            {"device_name": "AMD EPYC", "cpu_count": cores, "cpu_count_node": 2}
            if cores
            else {"device_name": "NVIDIA H100 80GB HBM3", "cpu_count": 16, "cpu_count_node": 16}
        )
        results.write_json(d / results.ENV, {"fingerprint": fingerprint})
    records = {"hosts": {n: hosts.host(tmp_path, n) for n in ("cpu-1c", "cpu-2c", "h100")}}
    note = hosts.same_host_note(records)
    assert "`cpu-1c` and `cpu-2c` ran on the same kind of host (AMD EPYC, 2 cores a node)" in note
    assert "with 1 and 2 usable cores" in note and "h100" not in note
    records["hosts"]["cpu-1c"]["cpu_count"] = 2  # the same cores: nothing to say
    assert hosts.same_host_note(records) == ""


def test_a_multi_rank_study_on_fewer_cores_than_ranks_is_flagged_oversubscribed(tmp_path):
    from mfulab import results
    from mfulab.studies.compare import hosts

    for name, cores in (("cpu-1c", 1), ("cpu-2c", 2)):
        for study, params in (("anatomy", {"nproc": 2}), ("parallelism", {"ranks": 2}), ("mfu", {})):
            d = tmp_path / name / study
            d.mkdir(parents=True)
            fingerprint = {"device_name": "AMD EPYC", "cpu_count": cores, "cpu_count_node": 2}
            results.write_json(d / results.ENV, {"fingerprint": fingerprint, "params": params})
    names = ("cpu-1c", "cpu-2c")
    records = {
        "hosts": {n: hosts.host(tmp_path, n) for n in names},
        "ranks": {n: hosts.ranks_per_study(tmp_path, n) for n in names},
    }
    assert records["ranks"]["cpu-1c"] == {"anatomy": 2, "parallelism": 2}  # mfu runs one process
    note = hosts.oversubscribed_note(records)
    assert "`cpu-1c` ran anatomy (2 ranks), parallelism (2 ranks) on 1 usable core" in note
    assert "cpu-2c" not in note  # two ranks on two cores
    records["ranks"]["cpu-1c"] = {}
    assert hosts.oversubscribed_note(records) == ""


def test_machines_differ_only_beyond_the_drift_between_fresh_runs():
    from mfulab.studies.compare import drift

    assert drift.across_drift([1.0, 1.04], 0.05).startswith("within drift (4%")
    assert drift.across_drift([1.0, 2.0], 0.09) == "differs (67% > 9%)"
    assert drift.across_drift([1.0, 1.052], 0.05) == "differs (5.1% > 5.0%)"  # not "5% > 5%"
    assert drift.across_drift([1.0, "missing"], 0.05) == ""  # one number: nothing to compare
    assert drift.across_drift([True, True], 0.05) == ""
    assert drift.across_drift([0.0, 0.0], 0.05) == "the same"  # not "differs (inf%)"
    assert drift.across_drift([-1.0, 0.0, 1.0], 0.05).startswith("differs (around 0")


def test_results_of_different_code_on_two_machines_are_named(tmp_path):
    from mfulab import results
    from mfulab.studies.compare import hosts

    for name, commit in (("cpu-1c", "aaaaaaa111"), ("cpu-2c", "bbbbbbb222")):
        for study in ("dataloader", "mfu"):
            d = tmp_path / name / study
            d.mkdir(parents=True)
            # mfu's code is the same at both commits (same digest); dataloader's changed
            code = "same-mfu-code" if study == "mfu" else f"dataloader-{name}"
            env = {"git": {"commit": commit, "dirty": False}, "inputs": {"library_sha256": code}}
            results.write_json(d / results.ENV, env)
    records = {"revisions": {n: hosts.revisions(tmp_path, n) for n in ("cpu-1c", "cpu-2c")}}
    note = hosts.revision_note(records)
    assert "dataloader (`cpu-1c` at aaaaaaa, `cpu-2c` at bbbbbbb)" in note and "mfu" not in note
    records["revisions"]["cpu-1c"]["dataloader"] = records["revisions"]["cpu-2c"]["dataloader"]
    assert hosts.revision_note(records) == ""


def test_a_difference_between_machines_must_pass_the_drift_its_study_declares(tmp_path):
    """A study that widens a ratio for run-to-run drift (``Metric.drift_param``) holds the
    comparison to it: read from each machine's env.json, the widest wins over the 5% floor."""
    import json

    from mfulab.studies.compare import drift

    for machine, value in (("a", 0.4), ("b", 0.25)):
        folder = tmp_path / machine / "dataloader"
        folder.mkdir(parents=True)
        (folder / "env.json").write_text(json.dumps({"params": {"format_ratio_drift": value}}))
    params = {"tar_over_json_files_cold_throughput": "format_ratio_drift"}
    found = drift.declared_drift(tmp_path, "dataloader", ["a", "b", "c"], params)
    assert found == {
        "a": {"tar_over_json_files_cold_throughput": 0.4},
        "b": {"tar_over_json_files_cold_throughput": 0.25},
    }
    records = _records(["a", "b"])
    records["metrics"]["dataloader"] = {
        "a": {"tar_over_json_files_cold_throughput": 3.6},
        "b": {"tar_over_json_files_cold_throughput": 2.6},
    }
    table = compare.comparison_table(records)
    row = table.key == "tar_over_json_files_cold_throughput"
    records["declared_drift"] = {"dataloader": found}
    assert _shown(table, records, row)["across machines"].startswith("within drift (32% ≤ 40%")
    records["declared_drift"] = {}
    assert _shown(table, records, row)["across machines"].startswith("differs")


def test_rows_from_published_data_are_shown_once_apart_from_the_machines():
    from mfulab.studies.compare import published_data

    records = _records(["a", "b"])
    records["metrics"]["predict"] = {
        "a": {"test_median_abs_error": 0.18, "measured_step_s": 0.6},
        "b": {"test_median_abs_error": 0.18, "measured_step_s": 0.3},
    }
    table = compare.comparison_table(records)
    measured, published = published_data.split(table)
    assert "test_median_abs_error" in set(published.key) and "measured_step_s" in set(measured.key)
    assert not set(measured.key) & published_data.published_keys()
    block = published_data.published_block(published[published.key == "test_median_abs_error"])
    assert block.value.iloc[0] == 0.18 and bool(block["same on every machine"].iloc[0])
    boot = [
        {
            "group": "test",
            "rows": 106,
            "sources": 7,
            "predictor_median_abs_error": 0.179,
            "null_median_abs_error": 0.186,
            "lead_over_null": 0.008,
            "lead_over_null_lo": -0.065,
            "lead_over_null_hi": 0.092,
        }
    ]
    assert "not told apart from the null model" in published_data.null_model_text(boot)


def test_a_row_measured_oversubscribed_is_not_compared_across_machines():
    """The metric table follows the verdict matrix: a machine whose run of the study had more ranks
    than cores is left out of the row's comparison; the other machines are still compared."""
    anatomy = {"a": {"naive_step_s": 0.34}, "b": {"naive_step_s": 0.18}, "c": {"naive_step_s": 0.36}}
    records = _records(["a", "b"], anatomy={k: anatomy[k] for k in "ab"})
    records["hosts"] = {"a": {"cpu_count": 1}, "b": {"cpu_count": 2}}
    records["ranks"] = {"a": {"anatomy": 2}, "b": {"anatomy": 2}}
    table = compare.comparison_table(records)
    row = table.key == "naive_step_s"
    shown = _shown(table, records, row)
    assert shown["not comparable on"] == "a"
    assert shown["across machines"] == "not compared (a oversubscribed)"  # one machine left
    records["hosts"]["a"]["cpu_count"] = 2  # two ranks on two cores: compared
    assert _shown(table, records, row)["across machines"].startswith("differs")
    # three machines, one oversubscribed: the other two are compared, the third named
    records = _records(["a", "b", "c"], anatomy=anatomy)
    records["hosts"] = {"a": {"cpu_count": 1}, "b": {"cpu_count": 2}, "c": {"cpu_count": 2}}
    records["ranks"] = {m: {"anatomy": 2} for m in "abc"}
    table = compare.comparison_table(records)
    cell = _shown(table, records, table.key == "naive_step_s")["across machines"]
    assert cell.startswith("differs") and cell.endswith("(a left out: oversubscribed)")


def test_plain_drift_note_names_the_rows_a_widened_drift_keeps_within():
    import pandas as pd

    from mfulab.studies.compare import drift

    shown = pd.DataFrame(
        {
            "metric": ["cold tar / JSON", "ceiling", "fusion"],
            "across machines": ["within drift (22% ≤ 40%)", "within drift (3% ≤ 5%)", "differs (9% > 5%)"],
        }
    )
    note = drift.plain_drift_note(shown, 0.05)
    assert "1 of the 2 rows" in note and "cold tar / JSON (22% against 40%)" in note and "ceiling" not in note
    assert "no row" in drift.plain_drift_note(shown.iloc[1:], 0.05)
    assert drift.plain_drift_note(shown.drop(columns="across machines"), 0.05) == ""


def test_summary_reads_each_machine_and_the_published_ranges():
    import pandas as pd

    from mfulab.studies.compare import summary

    matmul = {"value": 0.33, "share_of_peak": 330 / 325}
    bal = {"memory_TB_per_s": 0.0254, "best_matmul_flop_per_byte": 3.3e11 / 2.54e10}
    gloo = {"machine": "cpu-2c", "value": 1.2, "share_of_peak": 1.2 / 25.4}
    line = summary.machine_line("cpu-2c", matmul, bal, gloo)
    assert (
        "330 GFLOP/s (102% of its peak)" in line and "copy 25.4 GB/s" in line and "13 FLOP per byte" in line
    )
    assert "busbw 1.20 GB/s (5% of the copy)" in line and "oversubscribed" not in line
    crowded = summary.machine_line("cpu-1c", None, None, {**gloo, "machine": "cpu-1c (oversubscribed: …)"})
    assert crowded.endswith("of the copy) (oversubscribed)")
    assert summary.machine_line("x", None, None, None) == "`x`: no calibration"
    assert (
        summary._range([0.5, 0.87, float("nan")], ".0%") == "50%–87%" and summary._range([], ".0f") == "none"
    )
    matrix = pd.DataFrame(
        {"rests on the machine": [True, False], "flipped on": ["", "cpu-2c"], "differs": [False, False]}
    )
    refs = pd.DataFrame(
        {
            "machine": ["A100", "node", "cpu-2c"],
            "basis": ["published", "published", "measured here"],
            "quantity": [
                "best matmul over the dense peak",
                "all-reduce bus bandwidth over the link",
                "best matmul over the dense peak",
            ],
            "value": [271.2, 200.0, 0.33],
            "share_of_peak": [0.87, 0.78, 330 / 325],
        }
    )
    balance_table = pd.DataFrame(
        {
            "machine": ["A100", "cpu-2c"],
            "basis": ["datasheet / published MAMF", "measured here (copy, ceiling); ISA peak"],
            "memory_TB_per_s": [2.039, 0.0254],
            "best_matmul_flop_per_byte": [133.0, 13.0],
        }
    )
    text = summary.summary(refs, balance_table, matrix, {"machines": ["cpu-2c"]})
    assert "87% of the dense peak (1 GPUs)" in text and "133 FLOP per byte" in text
    assert "2 claims rows, 1 resting" in text and "1 flipped" in text
    assert "`cpu-2c`: matmul ceiling 330 GFLOP/s (102% of its peak), copy 25.4 GB/s, 13 FLOP per byte" in text


def test_a_verdict_that_differs_where_the_study_ran_other_code_is_not_a_machine_difference():
    """Machines whose results of a study came from different library code (``hosts.revisions``'
    digest): a verdict that differs there may be the code's doing, so the row reads `other code`
    (each machine with its commit), is left out of `differs`, and the note counts it apart."""
    records = _records(
        ["cpu", "gpu"],
        mfu={
            "cpu": {"claims": [{"id": "A5", "claim": "c", "verdict": "shown", "basis": "measured here"}]},
            "gpu": {"claims": [{"id": "A5", "claim": "c", "verdict": "confirmed", "basis": "measured here"}]},
        },
    )
    records["revisions"] = {
        "cpu": {"mfu": {"digest": "a", "commit": "1111111"}},
        "gpu": {"mfu": {"digest": "a", "commit": "2222222"}},  # another commit, the same code
    }
    row = compare.verdict_table(records).iloc[0]
    assert row["differs"] and row["other code"] == ""
    records["revisions"]["gpu"]["mfu"]["digest"] = "b"
    table = compare.verdict_table(records)
    row = table.iloc[0]
    # not compared, which is not "the same": the row reads n/a, not False
    assert row["differs"] == "n/a (other code)" and row["other code"] == "cpu at 1111111, gpu at 2222222"
    note = compare.verdict_note(table, records["machines"])
    assert (
        "0 with a different verdict on machines that ran the same code" in note
        and "1 row of studies whose machines ran different code (mfu" in note
        and "1 of them do read differently across the revisions (mfu A5)" in note
    )


def test_a_metric_measured_at_other_code_is_not_compared_across_machines():
    """The metric table follows the verdict matrix: where the machines ran the study at different
    code, a difference may be the code's, so the row reads "not compared (other code)"."""
    anatomy = {"a": {"naive_step_s": 0.34}, "b": {"naive_step_s": 0.18}}
    records = _records(["a", "b"], anatomy=anatomy)
    records["hosts"] = {"a": {"cpu_count": 2}, "b": {"cpu_count": 2}}
    records["revisions"] = {m: {"anatomy": {"digest": "x", "commit": m}} for m in "ab"}
    table = compare.comparison_table(records)
    row = table.key == "naive_step_s"
    assert _shown(table, records, row)["across machines"].startswith("differs")
    records["revisions"]["b"]["anatomy"]["digest"] = "y"
    assert _shown(table, records, row)["across machines"] == "not compared (other code)"


def test_the_verdict_matrix_joins_rows_on_the_claims_words_not_their_position():
    """A row one machine's newer code added before others shifts every "B11 (n)" after it: the
    matrix joins on the claim's id and words (round thirty-one's reader of chapter 11), so each
    row holds the same claim on every machine, a flip is read under each machine's own label and
    a basis that differs between machines is shown per machine."""

    def row(i, claim, verdict, basis="toy regime"):
        return {"id": i, "claim": claim, "verdict": verdict, "basis": basis}

    records = _records(
        ["old", "new"],
        mfu={
            "old": {
                "claims": [
                    row("B11", "x", "shown"),
                    row("B11", "shm 2 MB", "refuted", "documented specification"),
                ]
            },
            "new": {
                "claims": [
                    row("B11", "x", "shown"),
                    row("B11", "added", "confirmed", "documented specification"),
                    row("B11", "shm 2 MB", "refuted", "documented specification"),
                ]
            },
        },
    )
    records["flips"] = {"mfu": {"new": ["B11 (3)"]}}  # the new machine's label of the shm row
    table = compare.verdict_table(records).set_index("claim")
    assert list(table.index) == ["x", "shm 2 MB", "added"]
    assert table.loc["shm 2 MB", "old"] == table.loc["shm 2 MB", "new"] == "refuted"
    assert table.loc["added", "old"] == compare.MISSING and table.loc["shm 2 MB", "flipped on"] == "new"
    records["metrics"]["mfu"]["new"]["claims"][0]["basis"] = "by construction"
    basis = compare.verdict_table(records).set_index("claim").loc["x", "basis"]
    assert basis == "old: toy regime | new: by construction"


def test_shares_differ_by_each_machines_own_spread_in_points():
    """A share or signed error's tolerance is the widest absolute spread a machine's fresh runs
    saw (its relative drift × its own value), not a near-zero value's relative drift scaled to
    another machine's value (round thirty-one's reader of chapter 11)."""
    from mfulab.studies.compare import drift

    # −2.7% moving 265% between fresh runs spans 7.2 points; 10.4% against it is 13.1 points apart
    spreads = [2.65 * 0.027, 0.05 * 0.104]
    assert drift.across_points([-0.027, 0.104], 2.65, 0.01, spreads).startswith("differs (13.1 pt > 7.2 pt)")
    # without the spreads, the old rule scaled 265% to 10.4%: 27.6 points
    assert drift.across_points([-0.027, 0.104], 2.65, 0.01) == "within drift (13.1 pt ≤ 27.6 pt)"
    # a tolerance wider than the generic drift's names it, and the note counts the row
    cell = drift.across_points([0.10, 0.14], 0.5, 0.01, [0.05, 0.07], generic=0.05)
    assert cell == "within drift (4.0 pt ≤ 7.0 pt; 1.0 pt at the generic 5%)"
    import pandas as pd

    shown = pd.DataFrame({"metric": ["wait share"], "across machines": [cell]})
    assert "1 of the 1 rows that read within drift would differ" in drift.plain_drift_note(shown, 0.05)
