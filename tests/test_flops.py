import math

import pytest
import torch

from mfulab import flops
from mfulab.config import ParameterError, TransformerConfig, preset
from mfulab.model import GPT

SMALL_CONFIGS = [
    preset("tiny"),
    preset("llama-tiny"),
    TransformerConfig(n_layers=3, d_model=48, n_heads=6, vocab_size=97, seq_len=16, bias=False),
    TransformerConfig(
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_kv_heads=1,
        vocab_size=50,
        seq_len=8,
        mlp="swiglu",
        d_ff=80,
        tied_embeddings=False,
        learned_positions=False,
        norm="rmsnorm",
        bias=True,
    ),
    TransformerConfig(n_layers=1, d_model=40, n_heads=2, head_dim=24, vocab_size=30, seq_len=12),
]


@pytest.mark.parametrize("cfg", SMALL_CONFIGS, ids=lambda c: c.name + str(c.d_model))
def test_param_count_equals_built_model(cfg):
    assert flops.param_count(cfg) == GPT(cfg).num_params()


def test_param_count_gpt2_closed_form():
    cfg = preset("gpt2-124m")
    L, h, V, s = cfg.n_layers, cfg.d_model, cfg.vocab_size, cfg.seq_len
    assert flops.param_count(cfg) == 12 * L * h**2 + 13 * L * h + (V + s) * h + 2 * h == 124_439_808


def test_param_count_llama2_7b_published():
    assert flops.param_count(preset("llama2-7b")) == 6_738_415_616


def test_gpt2_124m_flops_per_token_hand_derived():
    # nanoGPT estimate_mfu at T=1024: 6N + 12·L·H·Q·T with L=12, H=12, Q=64
    cfg = preset("gpt2-124m")
    N = 124_439_808
    assert flops.flops_per_token(cfg, convention="6n") == 6 * N
    assert flops.flops_per_token(cfg, convention="palm") == 6 * N + 12 * 12 * 12 * 64 * 1024 == 859_885_056
    assert flops.flops_per_token(cfg, convention="causal") == 6 * N + 6 * 12 * 12 * 64 * 1024
    expected_megatron = 72 * 12 * 768**2 * (1 + 1024 / (6 * 768) + 50257 / (12 * 12 * 768))
    assert math.isclose(flops.flops_per_token(cfg, convention="megatron"), expected_megatron, rel_tol=1e-12)


def test_recompute_adds_hardware_flops():
    cfg = preset("gpt2-124m")
    N, attn = 124_439_808, 12 * 12 * 64 * 1024  # L·H·Q·T
    assert flops.flops_per_token(cfg, convention="palm", recompute="full") == 8 * N + 16 * attn
    assert flops.flops_per_token(cfg, convention="palm", recompute="selective") == 6 * N + 16 * attn
    assert flops.flops_per_token(cfg, convention="6n", recompute="full") == 8 * N
    assert flops.flops_per_token(cfg, convention="6n", recompute="selective") == 6 * N
    l, h, s = 12, 768, 1024
    base = flops.flops_per_token(cfg, convention="megatron")
    assert math.isclose(
        flops.flops_per_token(cfg, convention="megatron", recompute="selective") - base, 4 * s * h * l
    )
    assert math.isclose(
        flops.flops_per_token(cfg, convention="megatron", recompute="full") - base,
        24 * l * h**2 * (1 + s / (6 * h)),
    )


def test_n_params_override_and_seq_len_override():
    cfg = preset("llama2-7b")
    assert flops.flops_per_token(cfg, convention="6n", n_params=7_000_000_000) == 42e9
    short = flops.flops_per_token(cfg, convention="palm", seq_len=1024)
    long = flops.flops_per_token(cfg, convention="palm", seq_len=4096)
    assert long - short == 12 * 32 * 32 * 128 * (4096 - 1024)


def test_attention_share_grows_with_seq_len():
    cfg = preset("gpt2-124m")
    shares = [flops.attention_flops_share(cfg, seq_len=T) for T in (512, 2048, 8192)]
    assert shares == sorted(shares) and 0 < shares[0] < shares[-1] < 1
    assert flops.attention_flops_share(cfg, convention="6n") == 0


def test_mfu_arithmetic():
    assert flops.model_flops_utilisation(
        flops_per_token=6e9, tokens_per_s=1e4, n_devices=2, peak_flops_per_s=1e14
    ) == pytest.approx(0.3)
    # the B1 example: 8.8e16 FLOPs per step in 10.2 s on 64 × 312 TFLOP/s
    assert flops.step_mfu(
        flops_per_step=512 * 4096 * 6 * 7e9, step_time_s=10.2, n_devices=64, peak_flops_per_s=312e12
    ) == pytest.approx(0.4325, abs=1e-4)


@pytest.mark.parametrize("kwargs", [dict(tokens_per_s=0), dict(n_devices=0), dict(peak_flops_per_s=-1)])
def test_mfu_refuses_non_positive(kwargs):
    base = dict(flops_per_token=1.0, tokens_per_s=1.0, n_devices=1, peak_flops_per_s=1.0)
    with pytest.raises(ParameterError):
        flops.model_flops_utilisation(**{**base, **kwargs})


def test_unknown_convention_and_policy():
    cfg = preset("tiny")
    with pytest.raises(ParameterError, match="convention"):
        flops.flops_per_token(cfg, convention="7n")
    with pytest.raises(ParameterError, match="recompute"):
        flops.flops_per_token(cfg, recompute="half")


@pytest.mark.parametrize("cfg", [preset("tiny"), preset("llama-tiny")], ids=["gpt", "llama"])
def test_flop_counter_matches_analytic_exactly(cfg):
    """FlopCounterMode over forward+backward equals 6·N_matmul + 12·L·H·Q·T (naive attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = GPT(cfg, attn_impl="naive")
    idx = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len))
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    assert counter.get_total_flops() == flops.exact_matmul_flops_per_token(cfg) * idx.numel()
