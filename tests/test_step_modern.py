"""The step model on what dense GPT blocks lack (mfulab.analytic.step_modern): latent and windowed
attention, MoE experts with expert parallelism, context parallelism and FP8 GEMMs. Each test
checks a count against the exact per-token formulas of ``blocks`` or a term against its mechanism."""

from __future__ import annotations

import math

import pytest

from mfulab.analytic import blocks, flops, step, step_modern
from mfulab.analytic.config import MLA, MoE, TransformerConfig, preset
from mfulab.errors import ParameterError

LLAMA = dict(norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False, mlp="swiglu")
MOE = TransformerConfig(
    n_layers=4,
    d_model=512,
    n_heads=8,
    n_kv_heads=2,
    vocab_size=1000,
    seq_len=1024,
    d_ff=1024,
    moe=MoE(n_experts=8, top_k=2, d_ff_expert=256, n_shared_experts=1, n_dense_layers=1),
    **LLAMA,
)
DENSE = TransformerConfig(
    n_layers=4, d_model=512, n_heads=8, vocab_size=1000, seq_len=1024, d_ff=2048, **LLAMA
)


def _flops(gemms):
    return sum(2 * m * n * k * (g[3] if len(g) > 3 else 1) for g in gemms for m, n, k in [g[:3]])


@pytest.mark.parametrize("tp,ep,etp", [(1, 1, 1), (2, 4, 1), (1, 8, 1), (2, 2, 2)])
def test_expert_gemms_carry_the_active_ffn_flops_of_the_device_share(tp, ep, etp):
    T = 4096
    ffn = step_modern.ffn_gemms(MOE, 1, tokens=T, tp=tp, ep=ep, etp=etp)
    active = blocks.ffn_weight_counts(MOE, 1)["active"]
    router = MOE.d_model * MOE.moe.n_experts
    assert math.isclose(_flops(ffn["gemms"]), 2 * T / tp * (active - router), rel_tol=1e-12)
    assert math.isclose(_flops([ffn["router"]]), 2 * T / tp * router, rel_tol=1e-12)
    assert ffn["routed_rows"] == T / tp * MOE.moe.top_k
    dense = step_modern.ffn_gemms(MOE, 0, tokens=T, tp=tp)  # the leading dense block
    assert math.isclose(_flops(dense["gemms"]), 2 * T / tp * blocks.ffn_weight_counts(MOE, 0)["active"])


def test_imbalance_and_capacity_raise_the_busiest_devices_rows():
    T = 4096
    base = _flops(step_modern.ffn_gemms(MOE, 1, tokens=T, tp=1, ep=8)["gemms"][:2])
    skewed = _flops(step_modern.ffn_gemms(MOE, 1, tokens=T, tp=1, ep=8, load_imbalance=1.25)["gemms"][:2])
    assert math.isclose(skewed, 1.25 * base)
    padded = MOE.with_(
        moe=MoE(n_experts=8, top_k=2, d_ff_expert=256, n_shared_experts=1, capacity_factor=1.5)
    )
    rows = step_modern.ffn_gemms(padded, 1, tokens=T, tp=1, ep=8)["routed_rows"]
    assert rows == 8 * math.ceil(1.5 * T * 2 / 8)


@pytest.mark.parametrize(
    "mla",
    [None, MLA(kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, q_lora_rank=96)],
)
def test_attention_gemms_are_the_blocks_weights(mla):
    cfg = DENSE.with_(mla=mla, n_kv_heads=8 if mla else 2)
    T = 2048
    assert math.isclose(
        _flops(step_modern.attention_gemms(cfg, tokens=T, tp=1)), 2 * T * blocks.attention_weight_count(cfg)
    )


def test_attention_kernel_matches_the_exact_core_count_and_splits_over_cp():
    heads = 2 * DENSE.n_heads
    dense = step_modern.attention_kernel_flops(DENSE, 0, heads_in_batch=heads)
    assert dense == flops.fused_attention_flops(heads_in_batch=heads, seq_len=1024, head_dim=DENSE.head_dim)
    assert step_modern.attention_kernel_flops(DENSE, 0, heads_in_batch=heads, cp=4)["forward_flops"] == (
        dense["forward_flops"] / 4
    )
    windowed = DENSE.with_(windows=(128, None, 128, None))
    w = step_modern.attention_kernel_flops(windowed, 0, heads_in_batch=heads)["forward_flops"]
    exact = blocks.attention_core_fwd_flops_per_token(windowed, 0) * 1024 * 2  # × s tokens × 2 sequences
    assert math.isclose(w, exact, rel_tol=2 / 1024)  # the causal s/2 against (s + 1)/2


def test_dense_bf16_steps_are_untouched_and_cp_halves_the_tokens_per_rank():
    cfg = preset("llama3-70b")
    kw = dict(
        n_devices=64, tp=4, pp=4, global_batch=64, sequence_parallel=True, zero_stage=1, device="h100-sxm"
    )
    plain = step.step_time(cfg, **kw)
    assert plain["ep_comm_s"] == plain["cp_comm_s"] == 0.0
    cp2 = step.step_time(cfg, **{**kw, "n_devices": 128}, context_parallel=2)
    assert cp2["layout"]["dp"] == plain["layout"]["dp"]  # the extra devices went to the context split
    assert 0.45 < cp2["matmul_s"] / plain["matmul_s"] < 0.55
    slow = step.step_time(cfg, **{**kw, "n_devices": 128}, context_parallel=2, intra_node_bytes_per_s=1e9)
    assert slow["cp_comm_s"] > 0.0  # a ring slower than its attention blocks shows


def test_all_to_all_stays_on_nvlink_inside_a_node_and_pays_the_port_past_it():
    from mfulab.analytic.rates import Assumptions, machine_rates

    r = machine_rates("h100-sxm", dtype="bf16", assumptions=Assumptions())
    nbytes = 64e6
    assert step_modern.all_to_all_s(nbytes, ep=1, etp=1, devices_per_node=8, rates=r, alpha_s=0) == 0.0
    inside = step_modern.all_to_all_s(nbytes, ep=8, etp=1, devices_per_node=8, rates=r, alpha_s=0)
    assert math.isclose(inside, nbytes * 7 / 8 / r.intra.bytes_per_s)
    across = step_modern.all_to_all_s(nbytes, ep=16, etp=1, devices_per_node=8, rates=r, alpha_s=0)
    assert math.isclose(across, nbytes * 8 / 16 / r.inter.bytes_per_s)


def test_moe_steps_price_the_all_to_alls_and_shard_the_experts():
    cfg = preset("mixtral-8x7b")
    kw = dict(n_devices=64, global_batch=128, zero_stage=1, device="h100-sxm", recompute="full")
    ep1 = step.step_time(cfg, **kw)
    ep8 = step.step_time(cfg, **kw, expert_parallel=8)
    assert ep1["ep_comm_s"] == 0.0 < ep8["ep_comm_s"]
    assert ep8["model_states_gib"] < ep1["model_states_gib"] / 3  # 8 experts over 8 devices
    assert ep8["mfu_megatron"] is None  # Korthikanti's formula prices dense blocks only
    with pytest.raises(ParameterError, match="sequence parallelism"):
        step.step_time(cfg, **kw, tp=2, expert_parallel=4)
    with pytest.raises(ParameterError, match="does not divide 8 experts"):
        step.step_time(cfg, **kw, expert_parallel=16)


def test_fp8_gemms_run_at_the_fp8_peak_and_pay_their_casts():
    cfg = preset("llama3-70b")
    kw = dict(
        n_devices=64, tp=4, pp=4, global_batch=64, sequence_parallel=True, zero_stage=1, device="h100-sxm"
    )
    bf16 = step.step_time(cfg, **kw)
    fp8 = step.step_time(cfg, **kw, dtype="fp8", fp8_recipe="delayed")
    assert 0.45 < fp8["matmul_s"] / bf16["matmul_s"] < 0.6  # logits stay in bf16
    assert fp8["memory_bound_s"] > bf16["memory_bound_s"]
    current = step.step_time(cfg, **kw, dtype="fp8", fp8_recipe="current")
    assert current["memory_bound_s"] > fp8["memory_bound_s"]  # one more read for the amax
    half = step.step_time(cfg, **kw, dtype="fp8", fp8_recipe="delayed", fp8_matmul_relative_efficiency=0.5)
    assert 0.9 < half["matmul_s"] / bf16["matmul_s"] < 1.02
    assert fp8["peak_flops_per_s"] == bf16["peak_flops_per_s"]  # MFU stays on the BF16 peak
    with pytest.raises(ParameterError, match="fp8_recipe"):
        step_modern.fp8_cast_bytes([(1, 1, 1, 1)], recipe="nvfp4")


def test_moe_layers_without_shared_or_tensor_parallel_experts_drop_the_ffn_tp_collectives():
    assert step_modern.tp_collectives_share(DENSE) == 1.0
    assert step_modern.tp_collectives_share(preset("deepseek-v3")) == 1.0  # its shared expert is TP-split
    assert step_modern.tp_collectives_share(preset("mixtral-8x7b")) == 0.5
    assert step_modern.tp_collectives_share(preset("mixtral-8x7b"), etp=2) == 1.0
    assert (
        step_modern.tp_collectives_share(MOE.with_(moe=MoE(8, 2, 256, n_dense_layers=1))) == 1 - 0.5 * 3 / 4
    )


def test_the_planner_refuses_to_rank_moe_layouts():
    from mfulab.analytic import layouts

    with pytest.raises(ParameterError, match="does not rank MoE layouts"):
        layouts.plan(preset("mixtral-8x7b"), n_devices=64, global_batch=128, device="h100-sxm")


def test_predict_warns_on_a_moe_model():
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "mfulab", "predict", "--preset", "mixtral-8x7b", "--devices", "64"]
    cmd += ["--device", "h100-sxm", "--global-batch", "128", "--expert-parallel", "8", "--zero-stage", "1"]
    cmd += ["--recompute", "full"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "warning: MoE steps miss" in out.stderr and "ep_comm" in out.stdout


def test_the_planner_refuses_to_search_context_or_expert_parallel_layouts():
    from mfulab.analytic import layouts

    with pytest.raises(ParameterError, match="does not search context_parallel"):
        layouts.plan(
            preset("llama3-8b"), n_devices=16, global_batch=32, device="h100-sxm", context_parallel=2
        )
