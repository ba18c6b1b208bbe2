"""The measured step's memory-bound ops and its attention kernel, each timed alone at the step's
own shapes (forward and backward, fresh leaves, ``timing.time_fn``): what this machine's
elementwise kernels and attention reach, which the calibration's two figures (square matmuls,
a copy) do not say.

The calibrated check (``calibrated``) prices the step twice: from the calibration alone, and
with these rates in place of the copy bandwidth (memory-bound terms) and of the flash share
(attention). The second reading's remaining error is how the ops compose into a step (the
eager copies, the autograd engine, caches shared with the GEMMs), not what each op costs.

Ops per layer, as the reference model runs them (``measure.gpt``): two LayerNorms over the
block's rows, GeLU (tanh form) over the MLP's hidden rows, two residual adds, causal
``scaled_dot_product_attention``; once per step the fp32 cross-entropy over the logits."""

from __future__ import annotations

# op -> how many run per layer (None: once per step)
OPS = {"norms": 2, "activation": 1, "residual": 2, "attention": 1, "loss": None}


def _torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def _fwd_bwd(fn, inputs):
    """One forward and backward of ``fn(*inputs)`` against a gradient of ones (no accumulation
    into ``.grad``: ``torch.autograd.grad``)."""
    import torch

    def run():
        out = fn(*inputs)
        torch.autograd.grad(out, [t for t in inputs if t.requires_grad], torch.ones_like(out))

    return run


def op_cases(cfg, *, micro_batch: int, dtype: str, device: str) -> dict:
    """``{op: callable}``: one forward + backward of one instance of each op in :data:`OPS`."""
    import torch
    import torch.nn.functional as F

    dt, g = _torch_dtype(dtype), torch.Generator(device="cpu").manual_seed(0)
    T, h, f, V = micro_batch * cfg.seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size
    H, q = cfg.n_heads, cfg.head_dim

    def leaf(*shape, grad=True):
        return (
            torch.randn(*shape, generator=g, dtype=torch.float32)
            .to(device=device, dtype=dt)
            .requires_grad_(grad)
        )

    weight, bias = leaf(h), leaf(h)
    targets = torch.randint(0, V, (T,), generator=g).to(device)
    qkv = [leaf(micro_batch, H, cfg.seq_len, q) for _ in range(3)]
    return {
        "norms": _fwd_bwd(lambda x, w, b: F.layer_norm(x, (h,), w, b), [leaf(T, h), weight, bias]),
        "activation": _fwd_bwd(lambda x: F.gelu(x, approximate="tanh"), [leaf(T, f)]),
        "residual": _fwd_bwd(lambda x, y: x + y, [leaf(T, h), leaf(T, h)]),
        "attention": _fwd_bwd(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), qkv),
        "loss": _fwd_bwd(lambda z: F.cross_entropy(z.float(), targets), [leaf(T, V)]),
    }


def measure(cfg, *, micro_batch: int, dtype: str, device: str, warmup: int, min_samples: int) -> dict:
    """Median seconds (and spread) of one instance of each op, and the step's count of them."""
    from mfulab.measure import timing

    out = {}
    for name, fn in op_cases(cfg, micro_batch=micro_batch, dtype=dtype, device=device).items():
        t = timing.time_fn(
            fn, label=name, device=device, warmup=warmup, min_run_time_s=0.2, min_samples=min_samples
        )
        per_layer = OPS[name]
        out[name] = {**t.to_dict(), "per_step": cfg.n_layers * per_layer if per_layer else 1}
    return out


def step_seconds(ops: dict, names) -> float:
    """Seconds per step of the named ops, each instance at its isolated median."""
    return sum(ops[n]["median_s"] * ops[n]["per_step"] for n in names)
