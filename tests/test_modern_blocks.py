"""Modern blocks: the analytic counts (analytic.blocks, flops) against FlopCounterMode on small
instances of each (measure.modern_blocks), and the MoE / window / MLA arithmetic by hand."""

import pytest

from mfulab.analytic import blocks, flops
from mfulab.analytic.config import MLA, MoE, TransformerConfig, preset
from mfulab.errors import ParameterError

BASE = dict(
    n_layers=1, d_model=64, n_heads=4, vocab_size=128, seq_len=16, d_ff=96,
    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
)  # fmt: skip


def test_flop_counter_matches_block_counts_exactly():
    """One forward + backward of each small block under FlopCounterMode equals 6 × active matmul
    weights + 3 × QKᵀ and A·V over exactly the keys each query's mask leaves (a capacity factor:
    each expert's padded buffer); the module's parameters equal the analytic total."""
    from mfulab.measure.modern_blocks import check_rows

    rows = check_rows(batch=2)
    assert len(rows) == 8
    for row in rows:
        assert row["relative_difference"] == pytest.approx(0, abs=1e-12), row["block"]
        assert row["params_match"], row["block"]


def test_capacity_rows_by_hand():
    moe = MoE(n_experts=4, top_k=2, d_ff_expert=32, capacity_factor=1.25)
    cfg = TransformerConfig(**BASE, n_kv_heads=2, moe=moe)
    assert blocks.routed_rows_per_token(cfg, tokens_per_group=32) == 4 * 20 / 32  # ceil(1.25·32·2/4)=20
    assert blocks.routed_rows_per_token(cfg) == 2  # no group given: the model count, top_k


def test_attended_keys_by_hand():
    assert blocks.attended_keys(4) == (1 + 2 + 3 + 4) / 4
    assert blocks.attended_keys(6, 3) == (1 + 2 + 3 + 3 + 3 + 3) / 6  # sliding window of 3
    assert blocks.attended_keys(7, 3, "chunked") == (1 + 2 + 3 + 1 + 2 + 3 + 1) / 7
    assert blocks.attended_keys(8, 100) == blocks.attended_keys(8)  # a window past T is global
    with pytest.raises(ParameterError):
        blocks.attended_keys(8, 3, "strided")


def test_moe_total_vs_active_and_the_6n_convention_uses_active():
    moe = MoE(n_experts=8, top_k=2, d_ff_expert=32, n_dense_layers=1)
    cfg = TransformerConfig(**{**BASE, "n_layers": 3}, moe=moe)
    expert = 3 * 64 * 32
    dense_ffn, router = 3 * 64 * 96, 64 * 8
    n_total, n_active = flops.param_count(cfg), flops.active_param_count(cfg)
    assert n_total - n_active == 2 * (8 - 2) * expert  # two MoE layers, six idle experts each
    dense_twin = cfg.with_(moe=None)
    assert flops.param_count(dense_twin) - n_active == 2 * (dense_ffn - router - 2 * expert)
    assert flops.flops_per_token(cfg, convention="6n") == 6 * n_active


def test_dense_counts_are_unchanged_by_the_block_path():
    """A dense GPT-2: 12·L·h² + 13·L·h + (V + s)·h + 2h, as nanoGPT counts it."""
    cfg = preset("gpt2-124m")
    L, h, V, s = cfg.n_layers, cfg.d_model, cfg.vocab_size, cfg.seq_len
    assert flops.param_count(cfg) == 12 * L * h**2 + 13 * L * h + (V + s) * h + 2 * h
    assert flops.active_param_count(cfg) == flops.param_count(cfg)
    full = flops.exact_matmul_flops_per_token(cfg, mask="full")
    causal = flops.exact_matmul_flops_per_token(cfg, mask="causal")
    assert full - causal == pytest.approx(6 * L * cfg.n_heads * cfg.head_dim * (s - 1), rel=1e-12)


def test_windows_cut_attention_only_on_their_layers():
    cfg = TransformerConfig(**{**BASE, "n_layers": 2, "seq_len": 64}, windows=(8, None))
    whole = cfg.with_(windows=None)
    saved = flops.exact_matmul_flops_per_token(whole, mask="causal") - flops.exact_matmul_flops_per_token(
        cfg, mask="causal"
    )
    per_key = 3 * 2 * cfg.n_heads * 2 * cfg.head_dim  # train FLOPs per attended key and token
    assert saved == pytest.approx(per_key * (blocks.attended_keys(64) - blocks.attended_keys(64, 8)))


@pytest.mark.parametrize(
    "bad",
    [
        dict(windows=(8,)),  # wrong length
        dict(windows=(0, None)),
        dict(window_kind="strided"),
        dict(moe=MoE(n_experts=2, top_k=1, d_ff_expert=8), bias=True),
        dict(moe=MoE(n_experts=2, top_k=1, d_ff_expert=8, n_dense_layers=3)),
    ],
)
def test_bad_modern_configs_are_refused(bad):
    with pytest.raises(ParameterError):
        TransformerConfig(**{**BASE, "n_layers": 2, **bad})


def test_moe_and_mla_specs_refuse_bad_fields():
    with pytest.raises(ParameterError, match="top_k"):
        MoE(n_experts=2, top_k=3, d_ff_expert=8)
    with pytest.raises(ParameterError, match="capacity"):
        MoE(n_experts=2, top_k=1, d_ff_expert=8, capacity_factor=0)
    with pytest.raises(ParameterError, match="kv_lora_rank"):
        MLA(kv_lora_rank=0, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)


def test_classic_only_models_refuse_modern_configs():
    cfg = TransformerConfig(**BASE, moe=MoE(n_experts=2, top_k=1, d_ff_expert=8))
    with pytest.raises(ParameterError, match="dense blocks"):
        flops.flops_per_token(cfg, convention="megatron")
    with pytest.raises(ParameterError, match="dense blocks"):
        flops.param_tensors(cfg)


def test_config_round_trips_through_a_record():
    cfg = TransformerConfig(**BASE, moe=MoE(n_experts=4, top_k=2, d_ff_expert=32), windows=[5])
    import json

    again = TransformerConfig(**json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


@pytest.mark.parametrize(
    "name, total_b, active_b",
    [
        ("llama3-8b", 8.03, 8.03),  # Llama 3 model card: 8.03B
        ("llama3-405b", 405.9, 405.9),  # "405B"
        ("mixtral-8x7b", 46.7, 12.9),  # Jiang et al. 2024 §2.1: 47B total, 13B active
        ("qwen3-30b-a3b", 30.5, 3.3),  # Qwen3 report Table 2: 30B / 3B
        ("deepseek-v3", 671.0, 37.5),  # DeepSeek-V3 §4.2: 671B total, 37B activated
    ],
)
def test_presets_reproduce_their_published_parameter_counts(name, total_b, active_b):
    cfg = preset(name)
    assert flops.param_count(cfg) / 1e9 == pytest.approx(total_b, abs=0.1)
    assert flops.active_param_count(cfg) / 1e9 == pytest.approx(active_b, abs=0.1)
