import pytest

from mfulab.analytic.config import PRESETS, TransformerConfig, preset
from mfulab.errors import ParameterError


def test_defaults_are_derived():
    cfg = TransformerConfig(n_layers=2, d_model=64, n_heads=4, vocab_size=100, seq_len=32)
    assert cfg.head_dim == 16 and cfg.n_kv_heads == 4 and cfg.d_ff == 256


def test_articles_13b_setup():
    cfg = preset("article-13b")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.seq_len) == (40, 5120, 40, 4096)


def test_required_presets_exist():
    for name in (
        "gpt2-124m",
        "gpt2-350m",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "gpt3-175b",
        "article-13b",
        "article-7b",
    ):
        assert name in PRESETS


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ParameterError) as err:
        preset("gpt5")
    assert "gpt5" in str(err.value) and "llama2-7b" in str(err.value)


@pytest.mark.parametrize(
    "field,value", [("n_layers", 0), ("d_model", -8), ("seq_len", 0), ("vocab_size", 1.5)]
)
def test_non_positive_sizes_are_refused(field, value):
    kwargs = dict(n_layers=2, d_model=64, n_heads=4, vocab_size=100, seq_len=32)
    kwargs[field] = value
    with pytest.raises(ParameterError, match=field):
        TransformerConfig(**kwargs)


def test_bad_head_layout_is_refused():
    with pytest.raises(ParameterError):
        TransformerConfig(n_layers=1, d_model=60, n_heads=7, vocab_size=10, seq_len=8)
    with pytest.raises(ParameterError):
        TransformerConfig(n_layers=1, d_model=64, n_heads=4, n_kv_heads=3, vocab_size=10, seq_len=8)
