"""The reference GPT used by every measurement.

A decoder-only transformer built from a :class:`~mfulab.analytic.config.TransformerConfig`: GPT-2
style (LayerNorm, GELU MLP, learned positions, tied embeddings) or Llama style (RMSNorm,
SwiGLU, rotary positions, grouped KV heads, untied head), following nanoGPT's ``model.py``
in structure. Its parameter count equals ``flops.param_count(cfg)`` exactly (tested).

Switches the studies use:
- ``attn_impl``: ``naive`` materialises the T×T scores (what FlopCounterMode can count on
  CPU) or ``sdpa`` (``F.scaled_dot_product_attention``, flash/memory-efficient kernels).
- ``recompute``: which part of each block is recomputed in backward (``torch.utils.checkpoint``,
  non-reentrant): ``none``; ``selective`` — the attention core (scores, softmax, A·V;
  Korthikanti et al. 2022, Sec. 4.2); ``mlp`` — norm2 + MLP (the source article's A14
  suggestion); ``full`` — the whole block; ``sac`` — torch's selective activation
  checkpointing that keeps matmul outputs and recomputes the rest.
  ``recompute_layers=k`` applies the policy to the first k blocks only (Megatron's
  ``--recompute-num-layers``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from mfulab.analytic.config import ATTENTION_IMPLS, RECOMPUTE_GPT, TransformerConfig, check_recompute
from mfulab.errors import ParameterError

# Callables told about every checkpoint's inputs: a non-reentrant checkpoint keeps its inputs
# alive without going through saved-tensor hooks, so memprobe.SavedTensorAccountant
# registers itself here to see them.
CHECKPOINT_OBSERVERS: list = []


def _checkpoint(fn, *args, context_fn=None):
    for observe in CHECKPOINT_OBSERVERS:
        observe(args)
    if context_fn is None:
        return checkpoint(fn, *args, use_reentrant=False)
    return checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn)


def _sac_context():
    """Selective activation checkpointing (torch ≥ 2.4): keep the outputs of matmuls and
    attention kernels, recompute everything else (norms, activations, elementwise)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    keep = {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
    }
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        keep.add(aten._scaled_dot_product_flash_attention_for_cpu.default)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _norm(cfg: TransformerConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=1e-5)
    return nn.LayerNorm(cfg.d_model, bias=cfg.bias)


def rotary_tables(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of rotary position embeddings (Su et al. 2021, RoFormer Eq. 34)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    T = x.shape[-2]
    c, s = cos[:T].to(x.dtype), sin[:T].to(x.dtype)
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


def naive_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√d + causal mask)·V written out (Vaswani et al. 2017, Eq. 1): every matmul
    visible to the FLOP counter, the T×T scores materialised (O(T²) memory)."""
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig, attn_impl: str = "sdpa"):
        super().__init__()
        if attn_impl not in ATTENTION_IMPLS:
            raise ParameterError(f"attn_impl must be one of {tuple(ATTENTION_IMPLS)}; got {attn_impl!r}")
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.attn_impl = attn_impl
        self.recompute_core = False  # set by Block for the "selective" policy
        h, q = cfg.d_model, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.n_heads * q, bias=cfg.bias)
        self.k_proj = nn.Linear(h, cfg.n_kv_heads * q, bias=cfg.bias)
        self.v_proj = nn.Linear(h, cfg.n_kv_heads * q, bias=cfg.bias)
        self.o_proj = nn.Linear(cfg.n_heads * q, h, bias=cfg.bias)
        self.rotary = not cfg.learned_positions
        if self.rotary:
            cos, sin = rotary_tables(cfg.seq_len, q)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(QKᵀ/√d + causal mask)·V on [B, H, T, Q] tensors."""
        if self.attn_impl == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return naive_causal_attention(q, k, v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            q, k = apply_rotary(q, self.cos, self.sin), apply_rotary(k, self.cos, self.sin)
        if self.n_kv_heads != self.n_heads:
            groups = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        y = (
            _checkpoint(self.core, q, k, v)
            if self.recompute_core and torch.is_grad_enabled()
            else self.core(q, k, v)
        )
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        h, f = cfg.d_model, cfg.d_ff
        self.up = nn.Linear(h, f, bias=cfg.bias)
        self.gate = nn.Linear(h, f, bias=cfg.bias) if self.swiglu else None
        self.down = nn.Linear(f, h, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, attn_impl: str = "sdpa", recompute: str = "none"):
        super().__init__()
        self.norm1, self.attn = _norm(cfg), Attention(cfg, attn_impl)
        self.norm2, self.mlp = _norm(cfg), MLP(cfg)
        check_recompute(recompute, RECOMPUTE_GPT)
        self.recompute = recompute
        self.attn.recompute_core = recompute == "selective"

    def _mlp_branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm2(x))

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        if self.recompute == "mlp" and torch.is_grad_enabled():
            return x + _checkpoint(self._mlp_branch, x)
        return x + self._mlp_branch(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full" and torch.is_grad_enabled():
            return _checkpoint(self._forward, x)
        if self.recompute == "sac" and torch.is_grad_enabled():
            return _checkpoint(self._forward, x, context_fn=_sac_context)
        return self._forward(x)


class GPT(nn.Module):
    """The reference model. ``forward(idx, targets)`` returns ``(logits, loss)``."""

    def __init__(
        self,
        cfg: TransformerConfig,
        *,
        attn_impl: str = "sdpa",
        recompute: str = "none",
        recompute_layers: int | None = None,
    ):
        super().__init__()
        check_recompute(recompute, RECOMPUTE_GPT)
        cfg.check_classic("the reference GPT")
        n = cfg.n_layers if recompute_layers is None else recompute_layers
        if not (isinstance(n, int) and 0 <= n <= cfg.n_layers):
            raise ParameterError(f"recompute_layers must be between 0 and n_layers={cfg.n_layers}; got {n!r}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model) if cfg.learned_positions else None
        self.blocks = nn.ModuleList(
            Block(cfg, attn_impl, recompute if i < n else "none") for i in range(cfg.n_layers)
        )
        self.norm_f = _norm(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights are counted once

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds seq_len={self.cfg.seq_len}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
