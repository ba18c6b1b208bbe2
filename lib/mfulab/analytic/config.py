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
- Llama 3 8B/70B/405B: Dubey et al. 2024 ("The Llama 3 Herd of Models"), Table 3, and the
  ``arch_args`` of meta-llama/llama-models ``models/sku_list.py`` (FFN from its multiplier and
  ``multiple_of``; vocabulary 128,256; pre-training sequences of 8,192, the model card).
- Mistral 7B v0.1: Jiang et al. 2023, Table 1 (sliding window 4096 on every layer, context 8192).
- Gemma 2 9B: Gemma Team 2024, Table 1, and google-deepmind/gemma ``gm/nn/_gemma.py`` (local
  window 4096 on alternate layers, starting local; head_dim 256; vocabulary 256,128; tied). Its
  GeGLU has SwiGLU's three matrices, so it counts as ``mlp="swiglu"``.
- Mixtral 8x7B: Jiang et al. 2024, Table 1 and the released config (8 experts, top 2, no window).
- Qwen3-30B-A3B: Qwen3 Technical Report, Table 2 (48 layers, 32/4 heads, 128 experts, 8 active,
  no shared expert) and its config (hidden 2048, head_dim 128, expert width 768, untied).
- DeepSeek-V3: DeepSeek-AI 2024, §4.2, and ``inference/configs/config_671B.json`` (MLA ranks
  1536/512, head dims 128+64/128; 256 routed + 1 shared expert of 2048, top 8; the first 3
  layers dense, 18,432 wide). The multi-token-prediction module (14B) is not counted.
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
# How a window limits attention: "sliding" lets each query see its last w positions (Mistral 7B,
# Gemma 2's local layers); "chunked" cuts the sequence into blocks of w and attends causally
# inside each block only (Llama 4's chunked-attention layers).
WINDOW_KINDS = ("sliding", "chunked")


def _positive_int(owner: str, field: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ParameterError(f"{owner}.{field} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts FFN (Shazeer et al. 2017; Fedus et al. 2022, Switch Transformer).

    Each token's router picks ``top_k`` of ``n_experts`` routed experts; ``n_shared_experts``
    always run (DeepSeekMoE, Dai et al. 2024); each expert is an FFN of width ``d_ff_expert``
    in the block's MLP kind. The first ``n_dense_layers`` blocks keep a dense FFN of width
    ``d_ff`` (DeepSeek-V3's ``first_k_dense_replace``). ``capacity_factor``: each expert
    processes a buffer of ceil(factor · tokens · top_k / n_experts) rows, padded or dropped
    (Switch Transformer §2.1); ``None`` is dropless routing."""

    n_experts: int
    top_k: int
    d_ff_expert: int
    n_shared_experts: int = 0
    n_dense_layers: int = 0
    capacity_factor: float | None = None

    def __post_init__(self) -> None:
        for field in ("n_experts", "top_k", "d_ff_expert"):
            _positive_int("moe", field, getattr(self, field))
        for field in ("n_shared_experts", "n_dense_layers"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ParameterError(f"moe.{field} must be a non-negative integer, got {value!r}")
        if self.top_k > self.n_experts:
            raise ParameterError(f"moe.top_k={self.top_k} exceeds moe.n_experts={self.n_experts}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ParameterError(
                f"moe.capacity_factor must be positive or None, got {self.capacity_factor!r}"
            )


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, §2.1, Eqs. 9-19).

    Keys and values are up-projected from a shared latent of ``kv_lora_rank`` (plus one decoupled
    rotary key of ``qk_rope_head_dim`` shared by all heads); queries from a latent of
    ``q_lora_rank`` (``None``: one full-rank query projection, DeepSeek-V2-Lite). Per head the
    score uses ``qk_nope_head_dim + qk_rope_head_dim`` dimensions and the value ``v_head_dim``."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive_int("mla", field, getattr(self, field))
        if self.q_lora_rank is not None:
            _positive_int("mla", "q_lora_rank", self.q_lora_rank)


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
    moe: MoE | None = None  # None: every block has a dense FFN of width d_ff
    mla: MLA | None = None  # None: multi-head / grouped-query attention of head_dim
    windows: tuple | None = None  # one window per layer (None in it: global); None: all global
    window_kind: str = "sliding"  # WINDOW_KINDS

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
        if isinstance(self.moe, dict):  # read back from a record (to_dict)
            object.__setattr__(self, "moe", MoE(**self.moe))
        if isinstance(self.mla, dict):
            object.__setattr__(self, "mla", MLA(**self.mla))
        if self.moe is not None and not isinstance(self.moe, MoE):
            raise ParameterError(f"moe must be a MoE or None, got {self.moe!r}")
        if self.mla is not None and not isinstance(self.mla, MLA):
            raise ParameterError(f"mla must be an MLA or None, got {self.mla!r}")
        if (self.moe is not None or self.mla is not None) and self.bias:
            raise ParameterError("a MoE or MLA config has no biases: set bias=False")
        if self.moe is not None and self.moe.n_dense_layers > self.n_layers:
            raise ParameterError(
                f"moe.n_dense_layers={self.moe.n_dense_layers} exceeds n_layers={self.n_layers}"
            )
        if self.window_kind not in WINDOW_KINDS:
            raise ParameterError(f"window_kind must be one of {WINDOW_KINDS}, got {self.window_kind!r}")
        if self.windows is not None:
            windows = tuple(self.windows)
            if len(windows) != self.n_layers:
                raise ParameterError(
                    f"windows needs one entry per layer ({self.n_layers}), got {len(windows)}"
                )
            for w in windows:
                if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w <= 0):
                    raise ParameterError(f"each window must be a positive integer or None, got {w!r}")
            object.__setattr__(self, "windows", windows)

    def check_classic(self, what: str) -> None:
        """Refuse a MoE, MLA or windowed config in ``what``, which models dense global-attention
        blocks only (the reference GPT, the step and memory models, Korthikanti's formula)."""
        modern = [name for name, v in (("moe", self.moe), ("mla", self.mla), ("windows", self.windows)) if v]
        if modern:
            raise ParameterError(
                f"{what} models dense blocks with global attention; this config sets {modern}"
            )

    def layer_window(self, layer: int) -> int | None:
        """The attention window of block ``layer`` (``None``: global attention)."""
        return None if self.windows is None else self.windows[layer]

    def layer_is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` has the MoE FFN (after the leading dense blocks)."""
        return self.moe is not None and layer >= self.moe.n_dense_layers

    def with_(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (e.g. ``cfg.with_(seq_len=2048)``)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def _gpt(name, n_layers, d_model, n_heads, seq_len=1024, vocab_size=50257):
    return TransformerConfig(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, vocab_size=vocab_size, seq_len=seq_len, name=name
    )


def _llama(name, n_layers, d_model, n_heads, d_ff, n_kv_heads=None, seq_len=4096, **rest):
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
    ).with_(**rest)


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
    # models trained now (sources in the module docstring)
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, d_ff=14336, n_kv_heads=8, seq_len=8192, vocab_size=128256),
    "llama3-70b": _llama(
        "llama3-70b", 80, 8192, 64, d_ff=28672, n_kv_heads=8, seq_len=8192, vocab_size=128256
    ),
    "llama3-405b": _llama(
        "llama3-405b", 126, 16384, 128, d_ff=53248, n_kv_heads=8, seq_len=8192, vocab_size=128256
    ),
    "mistral-7b": _llama(
        "mistral-7b", 32, 4096, 32, d_ff=14336, n_kv_heads=8, seq_len=8192, windows=(4096,) * 32
    ),
    "gemma2-9b": _llama(
        "gemma2-9b",
        42,
        3584,
        16,
        d_ff=14336,
        n_kv_heads=8,
        seq_len=8192,
        vocab_size=256128,
        head_dim=256,
        tied_embeddings=True,
        windows=(4096, None) * 21,
    ),  # fmt: skip
    "mixtral-8x7b": _llama(
        "mixtral-8x7b",
        32,
        4096,
        32,
        d_ff=14336,
        n_kv_heads=8,
        seq_len=32768,
        moe=MoE(n_experts=8, top_k=2, d_ff_expert=14336),
    ),  # fmt: skip
    "qwen3-30b-a3b": _llama(
        "qwen3-30b-a3b",
        48,
        2048,
        32,
        d_ff=6144,
        n_kv_heads=4,
        seq_len=4096,
        vocab_size=151936,
        head_dim=128,
        moe=MoE(n_experts=128, top_k=8, d_ff_expert=768),
    ),  # fmt: skip
    "deepseek-v3": _llama(
        "deepseek-v3",
        61,
        7168,
        128,
        d_ff=18432,
        seq_len=4096,
        vocab_size=129280,
        moe=MoE(n_experts=256, top_k=8, d_ff_expert=2048, n_shared_experts=1, n_dense_layers=3),
        mla=MLA(
            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=1536
        ),
    ),  # fmt: skip
    # the source articles' setups
    "article-13b": _gpt("article-13b", 40, 5120, 40, seq_len=4096),
    "article-7b": _llama("article-7b", 32, 4096, 32, d_ff=11008),
}


def preset(name: str) -> TransformerConfig:
    """The named preset; an unknown name raises :class:`ParameterError` listing the valid names."""
    if name not in PRESETS:
        raise ParameterError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name]
