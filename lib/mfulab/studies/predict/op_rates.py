"""The measured step's ops, each timed alone at the step's own shapes (``timing.time_fn``):
its GEMMs, its memory-bound ops and attention kernel (forward and backward, fresh leaves) and
its optimizer step: what this machine reaches on the step's own work, which the calibration's
two figures (square matmuls, a copy) do not say.

The calibrated check (``calibrated``) prices the step twice: from the calibration alone, and
with these rates in place of the square-matmul fit (GEMMs), the copy bandwidth (memory-bound
terms, optimizer) and the flash share (attention). The second reading's remaining error is how
the ops compose into a step (the autograd engine, caches shared between kernels), not what
each op costs.

Ops per layer, as the reference model runs them (``measure.gpt``): its linear layers (q, k, v,
attention output, MLP up, MLP down), each a forward GEMM with its bias
(``F.linear``: ``addmm``) and two backward GEMMs (input gradient dY·W, weight gradient
dYᵀ·X); two LayerNorms over the block's rows, GeLU (tanh form) over the MLP's hidden rows, two
residual adds, causal ``scaled_dot_product_attention``. Once per step: the logits GEMM against
the tied embedding (no bias) with its two backward GEMMs, the fp32 cross-entropy over the
logits, and AdamW's step over every parameter."""

from __future__ import annotations

# op -> how many run per layer (None: once per step)
OPS = {"norms": 2, "activation": 1, "residual": 2, "attention": 1, "loss": None}
# the step's GEMMs (``gemm_cases``) and its optimizer step (``optimizer_case``), once per step
OPTIMIZER = "optimizer"


def linear_shapes(cfg) -> dict:
    """``{name: (in_features, out_features, bias, per_step)}``: the reference model's linear
    layers as ``measure.gpt`` builds them (q, k and v apart; SwiGLU's gate apart from its up
    projection) and the logits against the tied embedding."""
    h, q, L = cfg.d_model, cfg.head_dim, cfg.n_layers
    shapes = {
        "q": (h, cfg.n_heads * q, cfg.bias, L),
        "k": (h, cfg.n_kv_heads * q, cfg.bias, L),
        "v": (h, cfg.n_kv_heads * q, cfg.bias, L),
        "attn out": (cfg.n_heads * q, h, cfg.bias, L),
        "mlp up": (h, cfg.d_ff, cfg.bias, L),
    }
    if cfg.mlp == "swiglu":
        shapes["mlp gate"] = (h, cfg.d_ff, cfg.bias, L)
    return shapes | {"mlp down": (cfg.d_ff, h, cfg.bias, L), "logits": (h, cfg.vocab_size, False, 1)}


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


def gemm_cases(cfg, *, micro_batch: int, dtype: str, device: str) -> dict:
    """``{"<layer> <pass>": (callable, flops, per_step)}``: each GEMM of the step alone, in the
    layout autograd runs it (forward ``addmm``/``mm`` against Wᵀ; input gradient dY·W; weight
    gradient dYᵀ·X), 2·m·n·k FLOPs each."""
    import torch

    dt, g = _torch_dtype(dtype), torch.Generator(device="cpu").manual_seed(1)
    T = micro_batch * cfg.seq_len

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(device=device, dtype=dt)

    out = {}
    for name, (k, n, bias, per_step) in linear_shapes(cfg).items():
        x, w, dy, b = rand(T, k), rand(n, k), rand(T, n), rand(n) if bias else None
        forward = (lambda x=x, w=w, b=b: torch.addmm(b, x, w.t())) if bias else (lambda x=x, w=w: x @ w.t())
        flops = 2.0 * T * k * n
        out[f"{name} forward"] = (forward, flops, per_step)
        out[f"{name} input grad"] = (lambda dy=dy, w=w: dy @ w, flops, per_step)
        out[f"{name} weight grad"] = (lambda dy=dy, x=x: dy.t() @ x, flops, per_step)
    return out


def optimizer_case(cfg, *, device: str):
    """One step of the reference model's AdamW (``train.reference_model``: torch's default
    implementation) over every parameter, each with a gradient set once."""
    import torch

    from mfulab.measure.train import reference_model

    model, optimizer = reference_model(cfg, attn_impl="sdpa", device=device)
    g = torch.Generator(device="cpu").manual_seed(2)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=g).to(device=device, dtype=param.dtype)
    return optimizer.step


def cases(cfg, *, micro_batch: int, dtype: str, device: str) -> dict:
    """``{label: (callable, meta)}`` for every op the step runs (:data:`OPS`, the GEMMs, the
    optimizer step); ``meta`` has the step's count of it (``per_step``) and a GEMM's FLOPs."""
    out = {}
    for name, fn in op_cases(cfg, micro_batch=micro_batch, dtype=dtype, device=device).items():
        per_layer = OPS[name]
        out[name] = (fn, {"per_step": cfg.n_layers * per_layer if per_layer else 1})
    for name, (fn, flops, per_step) in gemm_cases(
        cfg, micro_batch=micro_batch, dtype=dtype, device=device
    ).items():
        out[name] = (fn, {"per_step": per_step, "flops": flops})
    out[OPTIMIZER] = (optimizer_case(cfg, device=device), {"per_step": 1})
    return out


def records(timings: dict, op_cases_: dict) -> dict:
    """The op records from ``{label: Timing}`` (``timing.interleaved`` over :func:`cases`, maybe
    beside other labels): median seconds and spread of one instance, with its ``meta``."""
    return {name: {**timings[name].to_dict(), **meta} for name, (_, meta) in op_cases_.items()}


def measure(cfg, *, micro_batch: int, dtype: str, device: str, warmup: int, min_samples: int) -> dict:
    """Every op of :func:`cases` timed alone, interleaved over ``min_samples`` rounds (one block
    of each op per round, in a shuffled order: a machine whose speed moves weighs on every op
    alike)."""
    from mfulab.measure import timing

    ops = cases(cfg, micro_batch=micro_batch, dtype=dtype, device=device)
    timings = timing.interleaved(
        {name: fn for name, (fn, _) in ops.items()},
        rounds=min_samples,
        device=device,
        warmup=warmup,
        min_block_s=0.05,
        desc="the step's ops alone",
    )
    return records(timings, ops)


def gemm_rows(ops: dict) -> list[dict]:
    """The timed GEMMs as calibration rows (``rates.fit_matmul``: FLOPs and median seconds)."""
    return [
        {"label": name, "flops": v["flops"], "median_s": v["median_s"]}
        for name, v in ops.items()
        if "flops" in v
    ]


def gemm_names(ops: dict) -> list[str]:
    return [name for name, v in ops.items() if "flops" in v]


def step_seconds(ops: dict, names) -> float:
    """Seconds per step of the named ops, each instance at its isolated median."""
    return sum(ops[n]["median_s"] * ops[n]["per_step"] for n in names)
