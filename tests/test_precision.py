"""MFU under mixed precision (analytic.precision): the split sums to the exact count, and the
three MFUs behave as defined."""

import pytest

from mfulab.analytic import flops, precision
from mfulab.analytic.config import preset
from mfulab.errors import ParameterError

FP8_LINEARS = precision.Recipe("fp8 linears", linear="fp8")


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gemma2-9b"])
def test_split_sums_to_the_exact_count(name):
    cfg = preset(name)
    split = precision.flops_by_dtype(cfg, FP8_LINEARS)
    assert sum(split.values()) == pytest.approx(flops.exact_matmul_flops_per_token(cfg, mask="causal"))
    assert set(split) == {"fp8", "bf16"}


def test_bf16_blocks_move_work_back_to_bf16():
    cfg = preset("llama3-8b")
    kept = precision.Recipe("fp8, 2 + 2 blocks bf16", linear="fp8", bf16_first=2, bf16_last=2)
    all_fp8, some_bf16 = precision.flops_by_dtype(cfg, FP8_LINEARS), precision.flops_by_dtype(cfg, kept)
    per_block_linear = precision.flops_parts_per_token(cfg, 0)["linear"]
    assert all_fp8["fp8"] - some_bf16["fp8"] == pytest.approx(4 * per_block_linear)
    with pytest.raises(ParameterError):
        precision.flops_by_dtype(cfg, precision.Recipe("too many", linear="fp8", bf16_first=20, bf16_last=20))


def test_three_mfus_one_precision_agree_and_mixed_ones_order():
    peaks = {"bf16": 1000.0, "fp8": 2000.0}
    one = precision.three_mfus({"bf16": 10.0}, tokens_per_s=40.0, peaks_flops_per_s=peaks)
    assert one["bf16_equivalent"] == one["precision_aware"] == one["low_precision_peak"] == pytest.approx(0.4)
    # 90% of the work at fp8, run at 1.5x the bf16 peak in all: BF16-equivalent MFU passes 100%
    mixed = precision.three_mfus({"fp8": 9.0, "bf16": 1.0}, tokens_per_s=150.0, peaks_flops_per_s=peaks)
    assert mixed["bf16_equivalent"] == pytest.approx(1.5)
    assert mixed["low_precision_peak"] == pytest.approx(0.75)
    ideal_s = 9.0 / 2000 + 1.0 / 1000  # per token at the peaks
    assert mixed["precision_aware"] == pytest.approx(ideal_s * 150.0)
    assert mixed["low_precision_peak"] < mixed["precision_aware"] <= 1 < mixed["bf16_equivalent"]


def test_three_mfus_refuse_a_missing_peak():
    with pytest.raises(ParameterError):
        precision.three_mfus({"fp4": 1.0, "bf16": 1.0}, tokens_per_s=1.0, peaks_flops_per_s={"bf16": 1.0})


def test_published_gb300_runs_re_derive_and_read_three_ways():
    """Megatron-Bridge's model TFLOP/s per GPU are its tokens/s × the exact count of a Llama 3.1
    405B token (within 0.1%); FP8's BF16-equivalent MFU passes 100%, the precision-aware one not."""
    from mfulab.studies.mfu import low_precision

    rows = {r["precision"]: r for r in low_precision.run_rows()}
    for r in rows.values():
        assert r["exact_count_TFLOPs"] == pytest.approx(r["published_model_TFLOPs"], rel=1e-3)
        assert r["low_precision_peak_mfu"] < r["precision_aware_mfu"] < 1
    assert rows["FP8 (current scaling)"]["bf16_equivalent_mfu"] > 1 > rows["MXFP8"]["bf16_equivalent_mfu"]


def test_sparse_peaks_are_refused_and_block_scaled_formats_read_their_element_rate():
    from mfulab.analytic import devices

    with pytest.raises(ParameterError, match="sparse"):
        devices.peak_flops_per_s("gb300", "fp8_sparse")
    assert devices.peak_flops_per_s("gb300", "nvfp4") == devices.peak_flops_per_s("gb300", "fp4")
    assert devices.peak_flops_per_s("b200", "mxfp8") == devices.peak_flops_per_s("b200", "fp8")
    with pytest.raises(ParameterError):
        devices.peak_flops_per_s("a100", "fp8")  # no published dense FP8 on an A100


def test_a_table_with_a_sparse_column_does_not_load(tmp_path):
    from mfulab.analytic import devices

    bad = tmp_path / "devices.yaml"
    bad.write_text("devices:\n  - key: x\n    tflops: {bf16: 1, fp8_sparse: 4}\n    source: s\n")
    with pytest.raises(ValueError, match="dense"):
        devices._load_devices(bad)
