"""Small reference implementations of modern blocks, built to be counted by
``torch.utils.flop_counter.FlopCounterMode`` on CPU: grouped-query and latent (MLA)
attention under causal, sliding-window and chunked masks, and a mixture-of-experts FFN with
its router, shared experts and an optional capacity.

They are counting instruments, not fast kernels. Attention runs one query row at a time
over exactly the keys its mask leaves, so the counter sees what a kernel that skips every
masked key would run (the counter cannot see skipping inside a fused kernel: on CPU it counts
``scaled_dot_product_attention`` by its dense shape, or not at all, depending on the backend
torch dispatches to). The MoE FFN gathers each expert's tokens and runs the expert on them,
so the counter sees top-k rows per token (or each expert's full capacity buffer).
Shapes follow :class:`~mfulab.analytic.config.TransformerConfig`; the analytic counts they
check are in :mod:`mfulab.analytic.blocks`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mfulab.analytic.config import TransformerConfig


def _ffn(cfg: TransformerConfig, width: int) -> nn.ModuleDict:
    mats = {
        "up": nn.Linear(cfg.d_model, width, bias=False),
        "down": nn.Linear(width, cfg.d_model, bias=False),
    }
    if cfg.mlp == "swiglu":
        mats["gate"] = nn.Linear(cfg.d_model, width, bias=False)
    return nn.ModuleDict(mats)


def _run_ffn(mats: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
    if "gate" in mats:
        return mats["down"](nn.functional.silu(mats["gate"](x)) * mats["up"](x))
    return mats["down"](nn.functional.gelu(mats["up"](x)))


class Attention(nn.Module):
    """Grouped-query attention (``n_kv_heads``) or MLA (``cfg.mla``) of block ``layer``, without
    rotary rotation (a rotation is elementwise and adds no matmul FLOPs)."""

    def __init__(self, cfg: TransformerConfig, layer: int = 0):
        super().__init__()
        self.cfg, self.window = cfg, cfg.layer_window(layer)
        h, H = cfg.d_model, cfg.n_heads
        m = cfg.mla
        if m is None:
            q = cfg.head_dim
            self.d_qk = self.d_v = q
            self.q_proj = nn.Linear(h, H * q, bias=False)
            self.k_proj = nn.Linear(h, cfg.n_kv_heads * q, bias=False)
            self.v_proj = nn.Linear(h, cfg.n_kv_heads * q, bias=False)
        else:
            self.d_qk, self.d_v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
            if m.q_lora_rank is None:
                self.q_proj = nn.Linear(h, H * self.d_qk, bias=False)
            else:
                self.q_down = nn.Linear(h, m.q_lora_rank, bias=False)
                self.q_norm = nn.RMSNorm(m.q_lora_rank)
                self.q_up = nn.Linear(m.q_lora_rank, H * self.d_qk, bias=False)
            self.kv_down = nn.Linear(h, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
            self.kv_norm = nn.RMSNorm(m.kv_lora_rank)
            self.kv_up = nn.Linear(m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(H * self.d_v, h, bias=False)

    def _qkv(self, x: torch.Tensor):
        B, T, _ = x.shape
        cfg, H, m = self.cfg, self.cfg.n_heads, self.cfg.mla
        if m is None:
            group = H // cfg.n_kv_heads
            q = self.q_proj(x).view(B, T, H, self.d_qk)
            k = self.k_proj(x).view(B, T, cfg.n_kv_heads, self.d_qk).repeat_interleave(group, dim=2)
            v = self.v_proj(x).view(B, T, cfg.n_kv_heads, self.d_v).repeat_interleave(group, dim=2)
            return q, k, v
        if m.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))
        q = q.view(B, T, H, self.d_qk)
        latent, rope_key = self.kv_down(x).split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
        kv = self.kv_up(self.kv_norm(latent)).view(B, T, H, m.qk_nope_head_dim + m.v_head_dim)
        k_nope, v = kv.split([m.qk_nope_head_dim, m.v_head_dim], dim=-1)
        k = torch.cat([k_nope, rope_key.unsqueeze(2).expand(B, T, H, m.qk_rope_head_dim)], dim=-1)
        return q, k, v

    def first_key(self, i: int) -> int:
        """The first key position query ``i`` attends (its mask's left edge)."""
        w = self.window
        if w is None:
            return 0
        if self.cfg.window_kind == "chunked":
            return (i // w) * w
        return max(0, i - w + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))  # (B, H, T, d)
        scale = 1.0 / math.sqrt(self.d_qk)
        rows = []
        for i in range(T):  # one query row over exactly the keys its mask leaves
            lo = self.first_key(i)
            scores = (q[:, :, i : i + 1] @ k[:, :, lo : i + 1].transpose(-1, -2)) * scale
            rows.append(torch.softmax(scores, dim=-1) @ v[:, :, lo : i + 1])
        out = torch.cat(rows, dim=2).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(out)


class MoEFFN(nn.Module):
    """A top-k routed FFN with shared experts (``cfg.moe``); with a capacity factor, each expert
    runs a buffer of exactly its capacity (short buffers padded with zeros, overflow dropped)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg, moe = cfg, cfg.moe
        self.router = nn.Linear(cfg.d_model, moe.n_experts, bias=False)
        self.experts = nn.ModuleList(_ffn(cfg, moe.d_ff_expert) for _ in range(moe.n_experts))
        self.shared = nn.ModuleList(_ffn(cfg, moe.d_ff_expert) for _ in range(moe.n_shared_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moe, shape = self.cfg.moe, x.shape
        tokens = x.reshape(-1, shape[-1])
        n = tokens.shape[0]
        gates, chosen = torch.softmax(self.router(tokens), dim=-1).topk(moe.top_k, dim=-1)
        out = torch.zeros_like(tokens)
        capacity = None
        if moe.capacity_factor is not None:
            capacity = math.ceil(moe.capacity_factor * n * moe.top_k / moe.n_experts)
        for e, expert in enumerate(self.experts):
            token_idx, slot = (chosen == e).nonzero(as_tuple=True)
            if capacity is not None:
                token_idx, slot = token_idx[:capacity], slot[:capacity]
                rows = torch.zeros(capacity, shape[-1], dtype=tokens.dtype)
                rows = rows.index_copy(0, torch.arange(len(token_idx)), tokens[token_idx])
                result = _run_ffn(expert, rows)[: len(token_idx)]
            else:
                result = _run_ffn(expert, tokens[token_idx])
            out = out.index_add(0, token_idx, result * gates[token_idx, slot].unsqueeze(-1))
        for expert in self.shared:
            out = out + _run_ffn(expert, tokens)
        return out.reshape(shape)


class Block(nn.Module):
    """One pre-norm block of ``cfg`` at ``layer``: attention, then a dense or MoE FFN."""

    def __init__(self, cfg: TransformerConfig, layer: int = 0):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(cfg.d_model), nn.RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, layer)
        self.ffn = MoEFFN(cfg) if cfg.layer_is_moe(layer) else _ffn(cfg, cfg.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        y = self.norm2(x)
        return x + (self.ffn(y) if isinstance(self.ffn, MoEFFN) else _run_ffn(self.ffn, y))


def counted_training_flops(cfg: TransformerConfig, layer: int = 0, *, batch: int = 2, seed: int = 0) -> dict:
    """FlopCounterMode's count of one forward and backward of block ``layer`` on ``batch``
    random sequences (the input requires grad, as inside a stack): total FLOPs, per token,
    and the module's parameter count."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(seed)
    block = Block(cfg, layer)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        block(x).sum().backward()
    total_flops = counter.get_total_flops()
    n_params = sum(p.numel() for p in block.parameters())
    return {
        "flops": total_flops,
        "flops_per_token": total_flops / x.shape[0] / x.shape[1],
        "params": n_params,
    }


def _small(**changes) -> TransformerConfig:
    base = dict(
        n_layers=1, d_model=64, n_heads=4, vocab_size=128, seq_len=16, d_ff=96, mlp="swiglu",
        norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
    )  # fmt: skip
    return TransformerConfig(**{**base, **changes})


def check_cases() -> dict[str, TransformerConfig]:
    """One small block of each kind the analytic counts cover (seq 16, d_model 64, 4 heads)."""
    from mfulab.analytic.config import MLA, MoE

    mla = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
    return {
        "GQA (4 query, 2 KV heads)": _small(n_kv_heads=2),
        "MQA, GELU MLP": _small(n_kv_heads=1, mlp="gelu"),
        "sliding window 5": _small(n_kv_heads=2, windows=(5,)),
        "chunked attention, chunks of 6": _small(n_kv_heads=2, windows=(6,), window_kind="chunked"),
        "MoE: 4 experts, top 2, 1 shared": _small(
            n_kv_heads=2, moe=MoE(n_experts=4, top_k=2, d_ff_expert=32, n_shared_experts=1)
        ),
        "MoE with capacity factor 1.25": _small(
            n_kv_heads=2, moe=MoE(n_experts=4, top_k=2, d_ff_expert=32, capacity_factor=1.25)
        ),
        "MLA (latent q and kv)": _small(mla=MLA(**mla, q_lora_rank=24)),
        "MLA, full-rank query": _small(mla=MLA(**mla)),
    }


def check_rows(batch: int = 2) -> list[dict]:
    """Each :func:`check_cases` block counted by FlopCounterMode beside the analytic count
    (``blocks.block_counts`` with the causal mask; a capacity factor priced at this batch)."""
    from mfulab.analytic import blocks

    rows = []
    for name, cfg in check_cases().items():
        counted = counted_training_flops(cfg, batch=batch)
        analytic = blocks.block_counts(cfg, 0, mask="causal", tokens_per_group=batch * cfg.seq_len)
        analytic_flops = analytic["weight_flops"] + analytic["attention_core_flops"]
        rows.append(
            {
                "block": name,
                "counter_flops_per_token": counted["flops_per_token"],
                "analytic_flops_per_token": analytic_flops,
                "relative_difference": analytic_flops / counted["flops_per_token"] - 1,
                "params_match": counted["params"] == analytic["total_params"],
            }
        )
    return rows
