"""The mfu study's library: the articles' arithmetic, validation, and the analysis of a tiny run."""

import pytest
import yaml

from mfulab.config import ParameterError
from mfulab.studies.mfu import analysis, arithmetic, bench
from mfulab.studies.mfu.params import Params

from conftest import ROOT


def smoke_params(**changes):
    params = yaml.safe_load((ROOT / "studies" / "mfu" / "smoke.yaml").read_text())
    params.update(changes)
    return Params.from_dict(params).prepared()


def test_a19_arithmetic():
    a = arithmetic.a19_check()
    assert a["tokens_per_step"] == 131_072
    assert a["flops_6n_x3"] == pytest.approx(3.067e16, rel=1e-3)  # the article's 3.06e16 includes the ×3
    assert a["flops_6n"] == pytest.approx(1.0224e16, rel=1e-3)
    assert a["stated_division_result"] == pytest.approx(4.98, abs=0.01)  # not 0.497
    assert a["implied_mfu_6n"] == pytest.approx(1.664, abs=1e-3)  # > 1: impossible


def test_b1_and_b15_tables():
    b1 = arithmetic.b1_table()
    article = b1.iloc[0]
    assert article.flops_per_step == pytest.approx(8.808e16, rel=1e-3)
    assert article.ideal_step_s == pytest.approx(4.41, abs=0.01)
    assert article["mfu_at_10.2s"] == pytest.approx(0.4325, abs=1e-3)
    assert article["mfu_at_8.5s"] == pytest.approx(0.519, abs=1e-3)
    b15 = arithmetic.b15_table()
    assert b15.gain_s.sum() == pytest.approx(1.7)
    assert b15.set_index("category").gain_s["slow operators"] == pytest.approx(0.8)


def test_claims_without_measurements_have_computed_verdicts():
    verdicts = {c.id: c.verdict for c in analysis.claims(None)}
    assert verdicts == {"A19": "refuted", "B1": "confirmed", "B15": "refuted", "A1": "not checkable"}


@pytest.mark.parametrize(
    "name,value,match",
    [
        ("seq_len", 0, "seq_len"),
        ("micro_batch", -1, "micro_batch"),
        ("steps", 0, "steps"),
        ("preset", "gpt5", "valid presets"),
        ("dtype", "fp8", "dtype"),
        ("calibration", "huge", "calibration"),
        ("convention_seq_lens", [1024, 0], "convention_seq_lens"),
        ("device", "tpu", "device"),
    ],
)
def test_params_refuse_bad_values(name, value, match):
    with pytest.raises(ParameterError, match=match):
        smoke_params(**{name: value})


def test_params_refuse_unknown_names_and_keep_defaults():
    with pytest.raises(ParameterError, match="unknown parameters: sequence"):
        smoke_params(sequence=3)
    assert Params.from_dict({}).steps == Params().steps == 20  # a missing name takes its default


@pytest.fixture(scope="module")
def tiny_records():
    return bench.measure(smoke_params())


def test_measure_records_and_analysis(tiny_records):
    r = tiny_records
    assert r["train"]["losses_finite"]
    assert abs(r["train"]["initial_loss"] - r["train"]["expected_initial_loss"]) < 0.5
    assert len(r["train"]["rows"]) == r["train"]["steps"] + r["train"]["warmup_steps"]
    # the counting check is exact for naive attention; the CPU SDPA flash kernel counts less
    assert analysis.count_table(r).set_index("source").loc[
        "analytic: 6·N_matmul + 12·L·H·Q·T", "relative_difference_vs_counter"
    ] == pytest.approx(0, abs=1e-12)
    b = analysis.breakdown(r)
    assert b["compute_s"] + b["data_s"] + b["scheduling_s"] + b["unaccounted_s"] == pytest.approx(
        b["job_wall_s"]
    )
    assert b["local_flops_per_s"] >= b["global_flops_per_s"] > 0
    w = analysis.waterfall_losses(r)
    assert w["residual_flops_per_s"] == pytest.approx(0, abs=1e-6 * w["start"][1])
    assert {c.id for c in analysis.claims(r)} == {"A19", "B1", "B2", "B15", "A1"}
    m = analysis.headline_metrics(r)
    assert m["peak"]["datasheet_flops_per_s"] is None and m["matmul_ceiling_flops_per_s"] > 0
