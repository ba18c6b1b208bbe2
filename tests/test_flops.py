import math

import pytest
import torch

from mfulab.analytic import flops
from mfulab.analytic.config import TransformerConfig, preset
from mfulab.errors import ParameterError
from mfulab.measure.gpt import GPT

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
    # selective: Korthikanti Eq. 8 as printed adds 12·s·h·l; the physical count adds 4·s·h·l
    assert math.isclose(
        flops.flops_per_token(cfg, convention="megatron", recompute="selective") - base, 12 * s * h * l
    )
    assert math.isclose(
        flops.megatron_physical_flops_per_token(cfg, recompute="selective") - base, 4 * s * h * l
    )
    for count in (flops.flops_per_token, flops.megatron_physical_flops_per_token):
        kwargs = {"convention": "megatron"} if count is flops.flops_per_token else {}
        assert math.isclose(count(cfg, recompute="full", **kwargs) - base, 24 * l * h**2 * (1 + s / (6 * h)))


# A GPT block small enough to do by hand: l = 2, h = 6, s = 9, V = 36 (so s/6h = 1/4, s/3h = 1/2,
# V/12hl = 1/4, V/16lh = 3/16), and 72·l·h² = 5184, 96·l·h² = 6912 FLOPs per token.
HAND = TransformerConfig(n_layers=2, d_model=6, n_heads=2, vocab_size=36, seq_len=9)


def test_megatron_eq8_selective_by_hand():
    """Korthikanti et al. 2022 Eq. 8 as printed: 72·B·s·l·h²(1 + s/3h + V/12hl) per iteration."""
    per_token = {"none": 5184 * (1 + 1 / 4 + 1 / 4), "selective": 5184 * (1 + 1 / 2 + 1 / 4)}
    per_token["full"] = 6912 * (1 + 1 / 4 + 3 / 16)  # Narayanan et al. 2021 Eq. 3
    assert per_token == {"none": 7776, "selective": 9072, "full": 9936}
    for policy, expected in per_token.items():
        assert flops.flops_per_token(HAND, convention="megatron", recompute=policy) == expected
    # per iteration: B = 4 sequences of s = 9 tokens
    assert 4 * 9 * flops.flops_per_token(HAND, convention="megatron", recompute="selective") == 326_592
    # the physical count: selective re-runs QKᵀ and A·V once (4·s·h·l = 432), full = Eq. 3
    assert flops.megatron_physical_flops_per_token(HAND, recompute="selective") == 7776 + 432
    assert flops.megatron_physical_flops_per_token(HAND, recompute="full") == 9936


def test_megatron_eq8_gpt3_175b_by_hand():
    # l = 96, h = 12288, s = 2048, V = 51200 (the paper's GPT-3 row): 72·l·h² = 1,043,677,052,928;
    # s/3h = 1/18 → 57,982,058,496; V/12hl = 25/6912 → 3,774,873,600
    cfg = TransformerConfig(n_layers=96, d_model=12288, n_heads=96, vocab_size=51200, seq_len=2048)
    got = flops.flops_per_token(cfg, convention="megatron", recompute="selective")
    assert got == pytest.approx(1_043_677_052_928 + 57_982_058_496 + 3_774_873_600, rel=1e-15)


# Korthikanti et al. 2022 Table 5 (s = 2048, V = 51200): (heads, h, l, MFU %, HFU %) per model
KORTHIKANTI_TABLE5 = {
    "22B": (64, 6144, 48, 41.5, 43.7),
    "175B": (96, 12288, 96, 51.4, 52.8),
    "530B": (128, 20480, 105, 56.0, 57.0),
    "1T": (160, 25600, 128, 56.3, 57.0),
}


@pytest.mark.parametrize("model", KORTHIKANTI_TABLE5)
def test_eq8_reproduces_the_papers_hfu_and_the_physical_count_does_not(model):
    heads, h, l, mfu, hfu = KORTHIKANTI_TABLE5[model]
    cfg = TransformerConfig(n_layers=l, d_model=h, n_heads=heads, vocab_size=51200, seq_len=2048)
    model_flops = flops.flops_per_token(cfg, convention="megatron")
    eq8 = flops.flops_per_token(cfg, convention="megatron", recompute="selective")
    physical = flops.megatron_physical_flops_per_token(cfg, recompute="selective")
    # HFU = MFU × hardware/model FLOPs; the table rounds both to 0.1 point
    assert mfu * eq8 / model_flops == pytest.approx(hfu, abs=0.1)
    assert abs(mfu * physical / model_flops - hfu) > 0.4


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


def test_fused_attention_flops_are_the_causal_half_forward_and_two_and_a_half_times_back():
    """One expression for a flash kernel's FLOPs (the step model and predict's op-rate reading
    both use it): the forward is half of PaLM's 4·T·Q per token and head over T tokens."""
    kernel = flops.fused_attention_flops(heads_in_batch=2 * 12, seq_len=1024, head_dim=64)
    full_forward = 4 * 1024 * 64 * 1024 * 24  # QKᵀ and A·V over the whole T×T, 24 heads
    assert kernel["forward_flops"] == full_forward / 2
    assert kernel["backward_flops"] == 2.5 * kernel["forward_flops"]
