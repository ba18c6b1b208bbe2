"""Analytic memory formulas against hand-derived values (Korthikanti Table 2, ZeRO Fig. 1)."""

import pytest

from mfulab.analytic import memory
from mfulab.analytic.config import preset
from mfulab.errors import ParameterError

CFG = preset("article-13b")  # s=4096, h=5120, a=40
S, H, A = 4096, 5120, 40
SBH = S * H


def test_table2_rows():
    f = memory.activation_bytes_per_layer
    assert f(CFG, micro_batch=1) == SBH * (34 + 5 * A * S / H)
    assert f(CFG, micro_batch=2, tp=8) == 2 * SBH * (10 + 24 / 8 + 5 * A * S / (H * 8))
    assert f(CFG, micro_batch=1, tp=8, sequence_parallel=True) == pytest.approx(
        SBH * (34 / 8 + 5 * A * S / (H * 8))
    )
    assert f(CFG, micro_batch=1, tp=8, recompute="selective") == SBH * (10 + 24 / 8)
    assert f(CFG, micro_batch=1, tp=8, sequence_parallel=True, recompute="selective") == pytest.approx(
        SBH * 34 / 8
    )
    assert f(CFG, micro_batch=1, recompute="full") == 2 * SBH
    assert f(CFG, micro_batch=1, tp=8, sequence_parallel=True, recompute="full") == 2 * SBH / 8


def test_element_size_and_dropout_generalisation():
    # fp32 without dropout: 16e per s·b·h and e per a·s²·b
    got = memory.activation_bytes_per_layer(CFG, micro_batch=1, bytes_per_elem=4, dropout=False)
    assert got == SBH * 64 + 4 * A * S * S
    # the MLP policy keeps attention (5e + 1), the two norm inputs (2e) — 7e + 1 — and the scores
    got = memory.activation_bytes_per_layer(CFG, micro_batch=1, recompute="mlp")
    assert got == SBH * 15 + 5 * A * S * S


def test_zero_stages():
    psi, n = 1e9, 8
    f = memory.model_state_bytes_per_device
    assert f(psi, n_devices=n, zero_stage=0) == 16 * psi
    assert f(psi, n_devices=n, zero_stage=1) == 4 * psi + 12 * psi / n
    assert f(psi, n_devices=n, zero_stage=2) == 2 * psi + 14 * psi / n
    assert f(psi, n_devices=n, zero_stage=3) == 16 * psi / n
    # ZeRO paper Fig. 1: 7.5B parameters on 64 GPUs, stage 3 → 1.9 GB
    assert f(7.5e9, n_devices=64, zero_stage=3) / 1e9 == pytest.approx(1.875)
    assert memory.zero_traffic_bytes_per_step(psi, zero_stage=3) == 1.5 * memory.zero_traffic_bytes_per_step(
        psi, zero_stage=2
    )


def test_bad_input():
    with pytest.raises(ParameterError):
        memory.activation_bytes_per_layer(CFG, micro_batch=0)
    with pytest.raises(ParameterError):
        memory.activation_bytes_per_layer(CFG, micro_batch=1, recompute="half")
    with pytest.raises(ParameterError):
        memory.model_state_bytes_per_device(1e9, n_devices=8, zero_stage=4)
    with pytest.raises(ParameterError):
        memory.memory_per_device(CFG, micro_batch=1, recompute_layers=41)


def test_memory_per_device_mixes_recomputed_layers():
    full = memory.activation_bytes_per_layer(CFG, micro_batch=1, tp=8, recompute="full")
    none = memory.activation_bytes_per_layer(CFG, micro_batch=1, tp=8)
    m = memory.memory_per_device(CFG, micro_batch=1, tp=8, dp=4, zero_stage=2, recompute_layers=12)
    assert m["activations_bytes"] == pytest.approx(12 * full + 28 * none)
    assert m["total_bytes"] == pytest.approx(
        m["model_states_bytes"] + m["activations_bytes"] + m["logits_bytes"]
    )


def test_step_peak_bytes_by_hand():
    """gpt2-350m-like layer count at s = 2048, b = 16, fp32, fused attention, no optimizer: the
    recompute gpu profile that ran out of an 80 GB card (48 GiB of activations)."""
    from mfulab.analytic.config import preset
    from mfulab.analytic.flops import param_count
    from mfulab.analytic.memory import step_peak_bytes

    cfg = preset("gpt2-350m").with_(seq_len=2048)
    est = step_peak_bytes(
        cfg,
        micro_batch=16,
        activation_bytes_per_elem=4,
        attention="fused",
        optimizer=False,
        gradient_copies=2,
    )
    sbh = 2048 * 16 * cfg.d_model
    # Table 2 without dropout: 34 − 2 mask bytes at 2 bytes per element = 16 elements per s·b·h
    assert est["activations_bytes"] == cfg.n_layers * sbh * 16 * 4
    assert est["activations_bytes"] / 2**30 == pytest.approx(48, rel=0.01)
    assert est["logits_bytes"] == 3 * 4 * 2048 * 16 * cfg.vocab_size
    assert est["weights_and_grads_bytes"] == 16 * param_count(cfg) and est["optimizer_bytes"] == 0
    with_adam = step_peak_bytes(
        cfg, micro_batch=16, activation_bytes_per_elem=4, attention="fused", optimizer=True
    )
    assert with_adam["optimizer_bytes"] == 8 * param_count(cfg)
