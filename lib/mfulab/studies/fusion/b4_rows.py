"""B4, article B §2.1: "TF32 ... 矩阵乘法的吞吐可以翻倍" (matmul throughput *can double*), and the
TF32 half of B15's first step (article B §5.2: SDPA "and TF32 on the side", 10.2 → 9.4 s).

The sentence reads two ways: "can (at least) double" (a ratio of 2× or more) and "doubles" (a
ratio of about 2×, ``stated.B4_DOUBLING_BAND``). Where the two readings give the same answer it
stands; where they disagree the row is *not checkable*. B15's first step turns TF32 on beside
SDPA, and the article credits that step's gain to attention, not to TF32: a note on the row (no
claim of the article's to judge), from its own figures (§1.1): TF32 acts only on fp32 matmuls
(``torch.backends.cuda.matmul.allow_tf32``), and its baseline already ran several times faster
per GPU than the fp32 peak, so TF32 had nothing left to speed up there."""

from __future__ import annotations

from mfulab.analytic import devices
from mfulab.analytic.articles import B15_STEPS
from mfulab.studies.fusion.stated import (
    B4_DATASHEET_DEVICE,
    B4_DOUBLING_BAND,
    B15_STATED_DEVICES,
    B15_STATED_FLOPS_PER_STEP,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def _decide(ratio: float) -> tuple[str, str]:
    """可以翻倍 says throughput *can* double: one reading, at least the band's low end
    (``B4_DOUBLING_BAND``). A ratio past the band's top does not make it false (a gain of 8× can
    double throughput); the evidence notes that the sentence then understates the datasheet."""
    lo, hi = B4_DOUBLING_BAND
    can = ratio >= lo
    note = (
        f"the ratio lies in {lo:g}–{hi:g}×, about double"
        if ratio <= hi
        else f"a note, not a second reading: the ratio is past {hi:g}×, so 'can double' understates the "
        "datasheet"
    )
    return verdicts.verdict_from_agreement(can), f"can double (≥ {lo:g}×): {'yes' if can else 'no'}; {note}"


def b15_tf32_note() -> str:
    """The article's own arithmetic on TF32 in B15's first step: the baseline's rate per GPU
    against the fp32 peak (a note: the article credits the step to attention, not to TF32)."""
    baseline_step_s = B15_STEPS[0][0]
    baseline_flops_per_gpu_s = B15_STATED_FLOPS_PER_STEP / (B15_STATED_DEVICES * baseline_step_s)
    peaks = devices.device_spec(B4_DATASHEET_DEVICE).flops_per_s
    fp32_peak_flops_per_s, tf32_peak_flops_per_s = peaks["fp32"], peaks["tf32"]
    return (
        f"note: B15's first step turns TF32 on beside SDPA; its baseline already ran at "
        f"{baseline_flops_per_gpu_s / 1e12:.0f} TFLOP/s per GPU, "
        f"{baseline_flops_per_gpu_s / fp32_peak_flops_per_s:.1f}× the A100's fp32 peak "
        f"({fp32_peak_flops_per_s / 1e12:g} TFLOP/s) and "
        f"{baseline_flops_per_gpu_s / tf32_peak_flops_per_s:.0%} of its dense TF32 peak "
        f"({tf32_peak_flops_per_s / 1e12:g} TFLOP/s) in model FLOPs alone, more than a whole training step "
        "sustains in TF32: its matmuls were bf16, and TF32 had nothing left to speed up; the article "
        "credits the step's gain to attention"
    )


def b4_claims(t) -> list[Claim]:
    """The throughput row: measured on a GPU with TF32; elsewhere the A100 datasheet's dense
    peaks; with :func:`b15_tf32_note` in its evidence."""
    dt = t["matmul_dtypes"].set_index("dtype")
    sheet_ratio = dt.loc["A100 datasheet tf32 / fp32", "vs_fp32"]
    band = f"{B4_DOUBLING_BAND[0]:g}–{B4_DOUBLING_BAND[1]:g}× reads as double"
    if "tf32" in dt.index:
        ratio = dt.loc["tf32", "vs_fp32"]
        verdict, why = _decide(ratio)
        throughput = Claim(
            "B4",
            "TF32 can double matmul throughput over fp32 on A100-class GPUs",
            f"matmul ceiling tf32 vs fp32 on this GPU ({band})",
            verdict,
            f"tf32/fp32 = {ratio:.2f}×: {why}; A100 datasheet tf32/fp32 = {sheet_ratio:.0f}× (dense); "
            + b15_tf32_note(),
            basis=verdicts.MEASURED,
        )
    else:
        verdict, why = _decide(sheet_ratio)
        throughput = Claim(
            "B4",
            "TF32 can double matmul throughput over fp32 on A100-class GPUs",
            f"the A100 datasheet's dense tensor-core TF32 peak against its FP32 peak ({band}; no TF32 "
            "on a CPU)",
            verdict,
            f"A100 datasheet tf32/fp32 = {sheet_ratio:.0f}× (dense): {why}; a GEMM reaches a share of each "
            "peak (chapter 01's MAMF); " + b15_tf32_note(),
            basis=verdicts.DOCUMENTED,
        )
    return [throughput]
