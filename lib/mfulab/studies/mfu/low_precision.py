"""Chapter 01's worked example of MFU under FP8 and FP4: one published run in three precisions,
each read with the three denominators of :mod:`mfulab.analytic.precision`."""

from __future__ import annotations

from dataclasses import replace

from mfulab.analytic import devices, flops, precision
from mfulab.analytic.config import preset

# NVIDIA-NeMo/Megatron-Bridge, docs/performance-summary-archive.md at 067f987d, "26.04 NeMo
# Container", table LLAMA3.1_405B (rows added in 74695a06 and 17a381f9): 256 DGX-GB300 GPUs,
# global batch 1536, sequence 8192; tokens/s and model TFLOP/s per GPU as published.
RUN_SOURCE = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987d, 26.04 container, "
    "Llama 3.1 405B on 256 GB300, GBS 1536, seq 8192"
)
RUN_PRESET, RUN_DEVICE = "llama3-405b", "gb300"
PUBLISHED_RUNS = (
    dict(precision="NVFP4", dtype="nvfp4", layout="TP4 PP8 VP4", tokens_per_s=1424, model_tflops=3594),
    dict(precision="FP8 (current scaling)", dtype="fp8", layout="TP4 PP8 VP4", tokens_per_s=1036,
         model_tflops=2615),
    dict(precision="MXFP8", dtype="mxfp8", layout="TP2 PP8 CP2 VP4", tokens_per_s=968, model_tflops=2443),
)  # fmt: skip
# The recipe: Transformer Engine runs the blocks' linear layers in the low precision; dot-product
# attention stays BF16 (fp8_dpa defaults to False) and so does the output head; the perf recipe
# sets first_last_layers_bf16 = False (Megatron-Bridge perf_recipes/_common.py, _perf_precision).
RECIPE_SOURCE = (
    "Megatron-Bridge perf recipe (_perf_precision): linears low, attention and head BF16, no BF16 blocks"
)
# NVIDIA's NVFP4 training blog keeps the last four blocks in BF16: the sensitivity's second recipe.
NVFP4_LAST_BF16_BLOCKS = 4
# A Hot Chips 2025 table (Tom's Hardware) lists 5 PF BF16 and 10 PF FP8 per B300 package, twice the
# dense figures in devices.yaml: the peak reading the sensitivity tries.
ALTERNATIVE_PEAK_FACTOR = {"bf16": 2.0, "fp8": 2.0, "fp4": 1.0}


def _peaks(device: str, dtypes, factor=None) -> dict:
    factor = factor or {}
    out = {}
    for d in {"bf16", *dtypes}:
        base = devices.DTYPE_ALIASES.get(d, d)
        out[d] = devices.peak_flops_per_s(device, d) * factor.get(base, 1.0)
    return out


def run_rows(*, peak_factor=None, nvfp4_bf16_last: int = 0) -> list[dict]:
    """Each published run: its tokens/s with the exact count of a Llama 3.1 405B token, and the
    three MFUs (BF16-equivalent, low-precision peak, precision-aware) on a GB300."""
    cfg = preset(RUN_PRESET)
    exact_flops = flops.exact_matmul_flops_per_token(cfg, mask="causal")
    rows = []
    for run in PUBLISHED_RUNS:
        recipe = precision.Recipe(run["precision"], linear=run["dtype"], source=RECIPE_SOURCE)
        if run["dtype"] == "nvfp4":
            recipe = replace(recipe, bf16_last=nvfp4_bf16_last)
        split = precision.flops_by_dtype(cfg, recipe)
        peaks = _peaks(RUN_DEVICE, split, peak_factor)
        m = precision.three_mfus(split, tokens_per_s=run["tokens_per_s"], peaks_flops_per_s=peaks)
        rows.append(
            {
                "precision": run["precision"],
                "layout": run["layout"],
                "tokens_per_s_per_gpu": run["tokens_per_s"],
                "published_model_TFLOPs": run["model_tflops"],
                "exact_count_TFLOPs": exact_flops * run["tokens_per_s"] / 1e12,
                "low_precision_share_of_flops": 1 - split.get("bf16", 0.0) / sum(split.values()),
                "bf16_equivalent_mfu": m["bf16_equivalent"],
                "low_precision_peak_mfu": m["low_precision_peak"],
                "precision_aware_mfu": m["precision_aware"],
                "effective_peak_TFLOPs": m["effective_peak_flops_per_s"] / 1e12,
            }
        )
    return rows


def tables() -> dict:
    """The worked example and its sensitivity: the GB300 peak reading (devices.yaml's dense
    figures, or the Hot Chips table's twice-as-large BF16 and FP8) and, for NVFP4, the last four
    blocks kept in BF16."""
    import pandas as pd

    cases = {
        "devices.yaml dense peaks; recipe as published": dict(),
        "BF16 and FP8 peaks ×2 (Hot Chips per-package figures read as dense)": dict(
            peak_factor=ALTERNATIVE_PEAK_FACTOR
        ),
        f"NVFP4 with the last {NVFP4_LAST_BF16_BLOCKS} blocks BF16": dict(
            nvfp4_bf16_last=NVFP4_LAST_BF16_BLOCKS
        ),
    }
    sens = [
        {"case": case, **row}
        for case, kwargs in cases.items()
        for row in run_rows(**kwargs)
        if kwargs.get("nvfp4_bf16_last") is None or row["precision"] == "NVFP4"
    ]
    return {"low_precision_mfu": pd.DataFrame(run_rows()), "low_precision_sensitivity": pd.DataFrame(sens)}
