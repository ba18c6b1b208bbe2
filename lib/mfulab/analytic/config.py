"""Transformer shapes and named presets.

A :class:`TransformerConfig` describes the shape of a decoder-only transformer in
enough detail to count its parameters exactly (``flops.param_count``) and to build
the reference model (``gpt.GPT``). Presets are the published shapes of common
models plus the setups used in the two source articles (see ``docs/claims.md``).

Sources of the presets:
- GPT-2: Radford et al. 2019, Table 2; nanoGPT ``model.py`` (vocab 50257, context 1024).
- GPT-3 175B: Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048).
- Llama 2: Touvron et al. 2023, Table 1 and the released ``params.json`` files
  (7B: 32 x 4096, 13B: 40 x 5120, 70B: 80 x 8192 with 8 KV heads; FFN 11008/13824/28672).
- ``article-13b``: article A §8 / A17 (40 layers, hidden 5120, 40 heads, seq 4096),
  built GPT-style (MindSpeed's GPT recipe) since the article names no vocabulary or MLP.
- ``article-7b``: article B §5 ("7B dense model, seq 4096"), taken as Llama-2-7B.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from mfulab.errors import ParameterError

MLP_KINDS = ("gelu", "swiglu")


# Attention: one vocabulary of kernel classes. "naive" materialises the s×s score matrix (what
# Korthikanti et al. 2022, Table 2, counts); "fused" keeps O(s) per query row and head
# (FlashAttention, Dao et al. 2022; torch's scaled_dot_product_attention dispatches to such a
# kernel). The analytic models take a kernel class.
ATTENTION_KERNELS = ("naive", "fused")
# The reference GPT's implementations, each named by what it calls, and its kernel class.
ATTENTION_IMPLS = {"naive": "naive", "sdpa": "fused"}

# Recompute (activation checkpointing) policies: the library's one vocabulary. Each function
# that takes a policy accepts the subset it can model and refuses the rest by
# :func:`check_recompute`, naming the valid ones.
RECOMPUTE_POLICIES = {
    "none": "keep every activation for backward",
    "selective": "recompute the attention core (QKᵀ, softmax, ·V) in backward (Korthikanti et al. "
    "2022, §4.3)",
    "mlp": "recompute the MLP branch from its input (the source article's A14 policy)",
    "full": "keep only each block's input and recompute the whole block in backward",
    "sac": "torch selective activation checkpointing: keep matmul and attention outputs, recompute the rest",
    "every_k": "full recompute of the first k blocks only (Megatron's --recompute-method block)",
}


# Named subsets: what each model can price, or the reference GPT can run. A function refuses a
# policy outside its subset by :func:`check_recompute`, naming the valid ones. ``every_k`` is
# written as a plan, ``block:<k>`` or ``uniform:<k>`` (Megatron's two checkpoint methods).
RECOMPUTE_FLOPS = ("none", "selective", "full")  # hardware FLOPs per token (flops)
RECOMPUTE_PARTIAL = ("none", "selective", "mlp")  # keep a layer, or recompute one part of it (A14)
RECOMPUTE_TABLE2 = (*RECOMPUTE_PARTIAL, "full")  # activations per layer (Korthikanti Table 2 forms)
RECOMPUTE_GPT = (
    "none",
    "selective",
    "mlp",
    "full",
    "sac",
)  # the reference GPT's block switches (measure.gpt)
RECOMPUTE_PLANS = (*RECOMPUTE_TABLE2, "block:<k>", "uniform:<k>")  # whole-model plans (memory, step, layouts)


def check_recompute(policy: str, supported) -> None:
    """Refuse a policy outside ``supported`` (a subset of :data:`RECOMPUTE_POLICIES`)."""
    if policy not in supported:
        raise ParameterError(f"recompute policy must be one of {', '.join(supported)}; got {policy!r}")


def check_attention(kernel: str) -> None:
    """Refuse an attention kernel class outside :data:`ATTENTION_KERNELS`."""
    if kernel not in ATTENTION_KERNELS:
        raise ParameterError(f"attention must be one of {', '.join(ATTENTION_KERNELS)}; got {kernel!r}")


NORM_KINDS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a decoder-only transformer (sizes are counts, not bytes)."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    seq_len: int
    head_dim: int | None = None  # defaults to d_model // n_heads
    n_kv_heads: int | None = None  # defaults to n_heads (multi-head attention)
    d_ff: int | None = None  # defaults to 4 * d_model
    mlp: str = "gelu"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True  # False: rotary positions (no parameters)
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in ("n_layers", "d_model", "n_heads", "vocab_size", "seq_len"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ParameterError(f"{field} must be a positive integer, got {value!r}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ParameterError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set head_dim"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        for field in ("head_dim", "n_kv_heads", "d_ff"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ParameterError(f"{field} must be a positive integer, got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise ParameterError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        if self.mlp not in MLP_KINDS:
            raise ParameterError(f"mlp must be one of {MLP_KINDS}, got {self.mlp!r}")
        if self.norm not in NORM_KINDS:
            raise ParameterError(f"norm must be one of {NORM_KINDS}, got {self.norm!r}")

    def with_(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (e.g. ``cfg.with_(seq_len=2048)``)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def _gpt(name, n_layers, d_model, n_heads, seq_len=1024, vocab_size=50257):
    return TransformerConfig(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, vocab_size=vocab_size, seq_len=seq_len, name=name
    )


def _llama(name, n_layers, d_model, n_heads, d_ff, n_kv_heads=None, seq_len=4096):
    return TransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        vocab_size=32000,
        seq_len=seq_len,
        mlp="swiglu",
        norm="rmsnorm",
        bias=False,
        tied_embeddings=False,
        learned_positions=False,
        name=name,
    )


PRESETS: dict[str, TransformerConfig] = {
    # small shapes the CPU profiles can train in seconds
    "tiny": _gpt("tiny", 2, 64, 4, seq_len=64, vocab_size=256),
    "cpu-small": _gpt("cpu-small", 4, 256, 4, seq_len=256, vocab_size=4096),
    "cpu-deep": _gpt("cpu-deep", 8, 256, 4, seq_len=512, vocab_size=512),  # activations dominate memory
    "llama-tiny": _llama("llama-tiny", 2, 64, 4, d_ff=176, n_kv_heads=2, seq_len=64).with_(vocab_size=256),
    # published shapes
    "gpt2-124m": _gpt("gpt2-124m", 12, 768, 12),
    "gpt2-350m": _gpt("gpt2-350m", 24, 1024, 16),
    "gpt2-774m": _gpt("gpt2-774m", 36, 1280, 20),
    "gpt2-1.5b": _gpt("gpt2-1.5b", 48, 1600, 25),
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96, seq_len=2048),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, d_ff=11008),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 40, d_ff=13824),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, d_ff=28672, n_kv_heads=8),
    # the source articles' setups
    "article-13b": _gpt("article-13b", 40, 5120, 40, seq_len=4096),
    "article-7b": _llama("article-7b", 32, 4096, 32, d_ff=11008),
}


def preset(name: str) -> TransformerConfig:
    """The named preset; an unknown name raises :class:`ParameterError` listing the valid names."""
    if name not in PRESETS:
        raise ParameterError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name]
