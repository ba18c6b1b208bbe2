"""What six training frameworks print as FLOPs per token, and as MFU, for the same run.

Each framework's formula is restated (not copied) from its own source at the commit named in
:data:`FRAMEWORKS`, as it counts a training token (forward + backward, 3 × forward):

- **nanoGPT** (``model.py``, ``estimate_mfu``): 6·N + 12·L·h·T, N = every parameter less the
  learned position table, h = ``n_embd``; T = ``block_size``. Always against 312 TFLOP/s.
- **torchtitan** (``torchtitan/models/utils.py``, ``get_dense_model_nparams_and_flops`` and
  ``get_moe_model_nparams_and_flops``): 6·N + 6·L·H·(d_qk + d_v)·T, N = parameters less the
  input embedding (a tied one stays), under MoE the router, shared and top-k of the routed
  experts; no causal halving and no windows at this commit (PR #4300 adds windows later).
  MFU against a BF16 dense peak (``tools/utils.py``, ``get_peak_flops``); none under FP8.
- **Megatron-LM** (``megatron/training/training.py``, ``num_floating_point_operations``):
  6 × the projection and FFN weights (K, V with the query groups; MoE: top-k routed plus shared
  experts, the router not counted; MLA's latent projections and norms) + 6·h·V for the logits +
  3·L·H·(d_qk + d_v)·T, the score term halved for the causal mask; no windows (issue #1725).
  Prints TFLOP/s per GPU, no MFU.
- **MaxText** (``src/maxtext/utils/maxtext_utils.py``, ``calculate_tflops_training_per_device``):
  6 × projections, FFN (router and active experts) and logits; attention halved for causality
  (PR #1988), sliding layers 4·H·d·(w − w²/2T) forward per token, chunked layers by their blocks
  (PRs #2009, #2030, #3592), but only in the decoder blocks with such a branch (Gemma 2/3, GPT-OSS,
  Gemma 4, Llama 4): any other model's window is counted as full causal attention. Prints TFLOP/s
  per device.
- **llm-foundry** (``llmfoundry/models/mpt/modeling_mpt.py``, ``flops_per_batch``): 6·N_active +
  12·L·h·T, N_active less an untied input embedding, learned positions kept; no halving, no
  windows. MFU from Composer's ``SpeedMonitor`` peak table.
- **OLMo-core** (``src/olmo_core/nn/transformer/model.py``, ``num_flops_per_token``, since PR
  #511): 6 × each block's attention and FFN weights (MoE: router, shared, top-k of the routed) +
  12·H·head_dim·min(w, T) per layer + 6 × the LM head and its norm; no causal halving. MFU from
  its speed monitor against a BF16 peak.

The exact count beside them is :func:`mfulab.analytic.flops.exact_matmul_flops_per_token` with
``mask="causal"``: active weights, attention over exactly the keys each mask leaves.
"""

from __future__ import annotations

from mfulab.analytic import blocks, flops, precision
from mfulab.analytic.config import TransformerConfig

# repository, commit read, file, and the BF16 peak (TFLOP/s) each uses for an H100 SXM;
# None where the framework prints TFLOP/s and no MFU.
FRAMEWORKS = {
    "nanoGPT": dict(
        repo="karpathy/nanoGPT", commit="3adf61e154c3fe3fca428ad6bc3818b27a3b8291",
        path="model.py (estimate_mfu)", h100_peak_tflops=312.0,
        prints="MFU against 312 TFLOP/s (an A100's BF16 peak) on every GPU",
    ),
    "torchtitan": dict(
        repo="pytorch/torchtitan", commit="b5bcd76c66d0acb1a08b176d9639425bc55e0b2a",
        path="torchtitan/models/utils.py; tools/utils.py (get_peak_flops)", h100_peak_tflops=989.0,
        prints="MFU against its BF16 dense table; none when FP8/MXFP8/NVFP4 layers are present",
    ),
    "Megatron-LM": dict(
        repo="NVIDIA/Megatron-LM", commit="d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        path="megatron/training/training.py (num_floating_point_operations)", h100_peak_tflops=None,
        prints="TFLOP/s per GPU only",
    ),
    "MaxText": dict(
        repo="AI-Hypercomputer/maxtext", commit="e591f30cbbf217ed67ef71263ec0538239f9c3b8",
        path="src/maxtext/utils/maxtext_utils.py (calculate_tflops_training_per_device)",
        h100_peak_tflops=None, prints="TFLOP/s per device (MFU only in its benchmark uploader)",
    ),
    "llm-foundry": dict(
        repo="mosaicml/llm-foundry", commit="8c8dd48f72168c5d51e2f7b151595892a8fba43d",
        path="llmfoundry/models/mpt/modeling_mpt.py (flops_per_batch); Composer speed_monitor.py",
        h100_peak_tflops=989.5, prints="MFU against Composer's table (dense BF16)",
    ),
    "OLMo-core": dict(
        repo="allenai/OLMo-core", commit="fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d",
        path="src/olmo_core/nn/transformer/model.py (num_flops_per_token); train/callbacks/speed_monitor.py",
        h100_peak_tflops=989.5, prints="MFU against datasheet × 0.5 (BF16 only)",
    ),
}  # fmt: skip


def _layer_sum(cfg: TransformerConfig, per_layer) -> float:
    return float(sum(per_layer(layer) for layer in range(cfg.n_layers)))


def _embedding(cfg: TransformerConfig) -> int:
    return cfg.vocab_size * cfg.d_model


def _global_core(cfg: TransformerConfig, keys: float) -> float:
    """6·H·(d_qk + d_v) per key and layer: both attention matmuls over ``keys`` keys for every
    query, trained (3 × :func:`blocks.attention_core_fwd_flops_per_token` unmasked)."""
    return 3.0 * blocks.attention_core_fwd_flops_per_token(cfg, 0, mask="full", seq_len=keys)


def _weight_flops(cfg: TransformerConfig, layer: int) -> float:
    """6 × the block's active matmul weights (router included): :func:`blocks.block_counts`."""
    return blocks.block_counts(cfg, layer)["weight_flops"]


def nanogpt(cfg: TransformerConfig) -> float:
    positions = cfg.seq_len * cfg.d_model if cfg.learned_positions else 0
    n_params = flops.param_count(cfg) - positions
    return 6.0 * n_params + 12.0 * cfg.n_layers * cfg.d_model * cfg.seq_len


def torchtitan(cfg: TransformerConfig) -> float:
    n_params = flops.active_param_count(cfg) - (0 if cfg.tied_embeddings else _embedding(cfg))
    return 6.0 * n_params + cfg.n_layers * _global_core(cfg, cfg.seq_len)


def megatron(cfg: TransformerConfig) -> float:
    def layer(i):
        linear_flops = precision.flops_parts_per_token(cfg, i)["linear"]  # the router left out
        latent_norms = blocks.attention_other_params(cfg) if cfg.mla is not None else 0
        return linear_flops + 6.0 * latent_norms + 0.5 * _global_core(cfg, cfg.seq_len)

    return _layer_sum(cfg, layer) + 6.0 * _embedding(cfg)


# MaxText counts windows only in the decoder blocks that have a branch for them (Gemma 2 and 3,
# GPT-OSS and Gemma 4 sliding layers; Llama 4's chunked layers); any other model, Mistral 7B's
# sliding window included, falls into the default branch: full causal attention.
MAXTEXT_WINDOW_FAMILIES = ("gemma2", "gemma3", "gemma4", "gpt-oss", "llama4")


def maxtext(cfg: TransformerConfig) -> float:
    T = cfg.seq_len
    sees_windows = cfg.name.startswith(MAXTEXT_WINDOW_FAMILIES)

    def core(i):
        w = cfg.layer_window(i) if sees_windows else None
        if w is None or w >= T:
            return 0.5 * _global_core(cfg, T)
        if cfg.window_kind == "sliding":
            return _global_core(cfg, w - w * w / (2 * T))
        full_chunks, rest = divmod(T, w)
        return 0.5 * _global_core(cfg, (full_chunks * w * w + rest * rest) / T)

    def layer(i):
        return _weight_flops(cfg, i) + core(i)

    return _layer_sum(cfg, layer) + 6.0 * _embedding(cfg)


def llm_foundry(cfg: TransformerConfig) -> float:
    n_active = flops.active_param_count(cfg) - (0 if cfg.tied_embeddings else _embedding(cfg))
    return 6.0 * n_active + 12.0 * cfg.n_layers * cfg.d_model * cfg.seq_len


def olmo_core(cfg: TransformerConfig) -> float:
    def layer(i):
        w = cfg.layer_window(i)
        visible = cfg.seq_len if w is None else min(w, cfg.seq_len)
        return _weight_flops(cfg, i) + _global_core(cfg, visible)

    return _layer_sum(cfg, layer) + 6.0 * (_embedding(cfg) + cfg.d_model)


COUNTS = {
    "nanoGPT": nanogpt,
    "torchtitan": torchtitan,
    "Megatron-LM": megatron,
    "MaxText": maxtext,
    "llm-foundry": llm_foundry,
    "OLMo-core": olmo_core,
}


def exact(cfg: TransformerConfig) -> float:
    """The exact training FLOPs per token: active weights, attention over the mask's keys."""
    return flops.exact_matmul_flops_per_token(cfg, mask="causal")


def framework_rows(cfg: TransformerConfig) -> list[dict]:
    """Each framework's FLOPs per token for ``cfg`` and its departure from the exact count."""
    exact_flops = exact(cfg)
    rows = [{"framework": "exact (mfulab)", "flops_per_token": exact_flops, "vs_exact": 0.0}]
    for name, count in COUNTS.items():
        value = count(cfg)
        rows.append({"framework": name, "flops_per_token": value, "vs_exact": value / exact_flops - 1})
    return rows


def same_run_mfu(cfg: TransformerConfig, *, exact_mfu: float, h100_peak_flops_per_s: float) -> list[dict]:
    """What each framework prints for one H100 run whose exact model work is ``exact_mfu`` of
    the device's BF16 dense peak: its TFLOP/s per GPU (its count × the run's tokens/s) and, where
    it reports MFU, that over its own peak constant."""
    tokens_per_s = exact_mfu * h100_peak_flops_per_s / exact(cfg)
    rows = []
    for name, count in COUNTS.items():
        printed_flops_per_s = count(cfg) * tokens_per_s
        peak_tflops = FRAMEWORKS[name]["h100_peak_tflops"]
        rows.append(
            {
                "framework": name,
                "tflops_per_gpu": printed_flops_per_s / 1e12,
                "mfu": None if peak_tflops is None else printed_flops_per_s / (peak_tflops * 1e12),
            }
        )
    return rows


MODERN_PRESETS = (
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mistral-7b",
    "gemma2-9b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "deepseek-v3",
)
MOE_PRESETS = ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")
# The run every framework is asked to report: exact model work at this share of an H100 SXM's
# BF16 dense peak. An assumption, not a measurement: each framework's number scales with it,
# so the ratios between frameworks do not depend on it.
SAME_RUN_EXACT_MFU = 0.40


def preset_table(presets=MODERN_PRESETS):
    """Per preset: total and active parameters, 6·N with each, and the exact count."""
    import pandas as pd

    from mfulab.analytic.config import preset

    rows = []
    for name in presets:
        cfg = preset(name)
        n_total, n_active = flops.param_count(cfg), flops.active_param_count(cfg)
        rows.append(
            {
                "preset": name,
                "seq_len": cfg.seq_len,
                "total_params_B": n_total / 1e9,
                "active_params_B": n_active / 1e9,
                "six_n_total_GFLOP": 6 * n_total / 1e9,
                "six_n_active_GFLOP": 6 * n_active / 1e9,
                "exact_GFLOP_per_token": exact(cfg) / 1e9,
                "attention_share_of_exact": 1 - 6 * flops.matmul_param_count(cfg) / exact(cfg),
            }
        )
    return pd.DataFrame(rows)


def framework_table(presets=MODERN_PRESETS, *, h100_peak_flops_per_s: float):
    """Per preset and framework: FLOPs per token, its departure from the exact count, and what
    it prints for the same H100 run (:data:`SAME_RUN_EXACT_MFU`): TFLOP/s per GPU and MFU."""
    import pandas as pd

    from mfulab.analytic.config import preset

    rows = []
    for name in presets:
        cfg = preset(name)
        run_rows = same_run_mfu(
            cfg, exact_mfu=SAME_RUN_EXACT_MFU, h100_peak_flops_per_s=h100_peak_flops_per_s
        )
        printed = {r["framework"]: r for r in run_rows}
        for row in framework_rows(cfg)[1:]:
            run = printed[row["framework"]]
            rows.append(
                {
                    "preset": name,
                    "framework": row["framework"],
                    "GFLOP_per_token": row["flops_per_token"] / 1e9,
                    "vs_exact": row["vs_exact"],
                    "printed_TFLOPs_per_gpu": run["tflops_per_gpu"],
                    "printed_mfu": run["mfu"],
                }
            )
    return pd.DataFrame(rows)


# Where each restated formula departs from the exact count (read off the restatements above).
DEPARTS = {
    "nanoGPT": "every parameter (all experts, the input embedding), full T×T scores at width d_model",
    "torchtitan": "full T×T scores (no causal half), windows ignored",
    "Megatron-LM": "windows ignored; the router not counted",
    "MaxText": "the causal half as T/2, not (T+1)/2; windows only in the model families it has a branch "
    "for (Gemma 2/3, GPT-OSS, Llama 4), not Mistral's",
    "llm-foundry": "full T×T scores at width d_model, windows ignored",
    "OLMo-core": "full scores over min(w, T) keys (no causal half)",
}


def departure_summary(framework_df):
    """Per framework: where it departs from the exact count, and by how much over the presets."""
    import pandas as pd

    rows = []
    for name, group in framework_df.groupby("framework", sort=False):
        rows.append(
            {
                "framework": name,
                "departs_where": DEPARTS[name],
                "vs_exact_min": group.vs_exact.min(),
                "vs_exact_max": group.vs_exact.max(),
                "dense_presets_max": group[~group.preset.isin(MOE_PRESETS)].vs_exact.max(),
            }
        )
    return pd.DataFrame(rows)


def sources_table():
    """Where each formula was read: repository, commit, file; what the framework prints."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"framework": name, "repository": f["repo"], "commit": f["commit"][:12], "file": f["path"],
             "prints": f["prints"]}
            for name, f in FRAMEWORKS.items()
        ]
    )  # fmt: skip


def tables() -> dict:
    """Chapter 01 §4's tables: the presets' counts, the counter check of each block kind, each
    framework's count and report for the same H100 run, where each departs, and the sources."""
    import pandas as pd

    from mfulab.analytic import devices
    from mfulab.measure import modern_blocks

    framework_df = framework_table(h100_peak_flops_per_s=devices.peak_flops_per_s("h100-sxm"))
    return {
        "modern_presets": preset_table(),
        "modern_block_counter_check": pd.DataFrame(modern_blocks.check_rows()),
        "framework_flops": framework_df,
        "framework_departures": departure_summary(framework_df),
        "framework_sources": sources_table(),
    }
