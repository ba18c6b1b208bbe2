"""The machine comparison's own logic: one row per property, the note when one machine is all
there is, the figure's take-away title, readable units (no timing, nothing measured)."""

from mfulab.studies.compare import analysis as compare


def _records(machines, mfu=None, fusion=None, overlap=None):
    """Records as ``compare.collect`` returns them, with the given metrics per study and machine."""
    return {
        "study": "compare",
        "params": {"results_root": "results"},
        "machines": machines,
        "metrics": {"mfu": mfu or {}, "fusion": fusion or {}, "overlap": overlap or {}},
    }


def test_a_property_several_studies_write_is_one_row_unless_they_disagree():
    same = {"a": {"matmul_ceiling_flops_per_s": 3e11}, "b": {"matmul_ceiling_flops_per_s": 7e14}}
    table = compare.comparison_table(_records(["a", "b"], mfu=same, fusion={"a": same["a"]}))
    rows = table[table.key == "matmul_ceiling_flops_per_s"]
    assert len(rows) == 1 and rows.iloc[0].study == "mfu, fusion" and rows.iloc[0].b == 7e14
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
    assert "gpu's matmul ceiling is 2,000× cpu's" in title and "71% of its datasheet peak" in title


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
