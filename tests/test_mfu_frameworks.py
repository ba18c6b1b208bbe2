"""Chapter 01's framework table: each restated formula against its hand-written form."""

import pytest

from mfulab.analytic import flops
from mfulab.analytic.config import preset
from mfulab.studies.mfu import frameworks as fw


def test_nanogpt_is_estimate_mfu_on_gpt2():
    cfg = preset("gpt2-124m")
    L, h, T = cfg.n_layers, cfg.d_model, cfg.seq_len
    n_non_position = flops.param_count(cfg) - T * h  # get_num_params(non_embedding=True)
    assert fw.nanogpt(cfg) == 6 * n_non_position + 12 * L * h * T


def test_torchtitan_llama3_is_6n_less_embedding_plus_full_scores():
    cfg = preset("llama3-8b")
    L, h, T, V = cfg.n_layers, cfg.d_model, cfg.seq_len, cfg.vocab_size
    assert fw.torchtitan(cfg) == pytest.approx(6 * (flops.param_count(cfg) - V * h) + 12 * L * h * T)


def test_megatron_gqa_swiglu_by_hand_and_moe_without_router():
    cfg = preset("llama3-8b")
    L, h, H, G, d, f, T, V = 32, 4096, 32, 8, 128, 14336, 8192, 128256
    per_layer = 6 * (2 * h * H * d + 2 * h * G * d + 3 * h * f) + 6 * H * d * T  # causal half
    assert fw.megatron(cfg) == pytest.approx(L * per_layer + 6 * h * V)
    moe_cfg = preset("mixtral-8x7b")
    L, T, f = 32, 32768, 14336
    per_layer = 6 * (2 * h * H * d + 2 * h * G * d + 2 * 3 * h * f) + 6 * H * d * T  # top 2, no router
    assert fw.megatron(moe_cfg) == pytest.approx(L * per_layer + 6 * h * 32000)


def test_moe_frameworks_price_active_experts_and_nanogpt_every_expert():
    cfg = preset("mixtral-8x7b")
    exact = fw.exact(cfg)
    assert fw.nanogpt(cfg) / exact > 3  # 6 × 46.7B total against 12.9B active
    for name in ("torchtitan", "llm-foundry", "OLMo-core", "MaxText", "Megatron-LM"):
        assert fw.COUNTS[name](cfg) / exact < 1.3, name


def test_windows_seen_by_olmo_core_and_by_maxtext_only_in_its_windowed_families():
    cfg = preset("mistral-7b")  # window 4096 on every layer at T = 8192
    global_twin = cfg.with_(windows=None)
    for name, sees in {
        "MaxText": False,
        "OLMo-core": True,
        "torchtitan": False,
        "Megatron-LM": False,
    }.items():
        cut = fw.COUNTS[name](global_twin) - fw.COUNTS[name](cfg)
        assert (cut > 0) == sees, name
    gemma = preset("gemma2-9b")  # MaxText's Gemma 2 block counts its local layers' windows
    assert fw.maxtext(gemma.with_(windows=None)) > fw.maxtext(gemma)
    H, d, L = 32, 128, 32
    assert fw.olmo_core(global_twin) - fw.olmo_core(cfg) == pytest.approx(L * 12 * H * d * (8192 - 4096))


def test_maxtext_restatement_is_the_exact_count_up_to_the_causal_rounding():
    for name in fw.MODERN_PRESETS:
        cfg = preset(name)
        if name == "mistral-7b":  # its window falls into MaxText's default (full causal) branch
            assert fw.maxtext(cfg) == pytest.approx(fw.megatron(cfg), rel=1e-9)
            continue
        assert fw.maxtext(cfg) / fw.exact(cfg) - 1 == pytest.approx(0, abs=5e-4), name


def test_same_run_scales_each_count_and_divides_by_its_own_peak():
    cfg = preset("llama3-8b")
    rows = {r["framework"]: r for r in fw.same_run_mfu(cfg, exact_mfu=0.4, h100_peak_flops_per_s=989.4e12)}
    assert rows["MaxText"]["tflops_per_gpu"] == pytest.approx(0.4 * 989.4, rel=1e-3)
    assert rows["Megatron-LM"]["mfu"] is None
    nano = rows["nanoGPT"]
    assert nano["mfu"] == pytest.approx(nano["tflops_per_gpu"] / 312.0)
    table = fw.framework_table(("llama3-8b",), h100_peak_flops_per_s=989.4e12)
    assert len(table) == 6 and len(fw.sources_table()) == 6
