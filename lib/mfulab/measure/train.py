"""The reference training step, in one place: the reference GPT with AdamW, a batch of
synthetic tokens, and one step (forward under the run's mixed precision, backward, optimizer
step, gradients freed). Chapter 01 times it, chapter 09's calibrated check predicts it, the
dataloader study's stall loop trains it; the step anatomy's DDP worker, which times the phases
of a step apart, builds the same model here. The fusion and recompute benchmarks time its
forward + backward alone (:func:`forward_backward`). Parallelism's FSDP2/DDP sharding runs build their
own (their wrappers and gradient accumulation are what they measure)."""

from __future__ import annotations


def reference_model(cfg, *, attn_impl: str, device: str, lr: float = 3e-4, seed: int = 0):
    """(model, optimizer): the reference GPT of ``cfg`` on ``device`` (weights seeded by
    ``seed``) and its AdamW (torch's default implementation for the device)."""
    import torch

    from mfulab.measure.gpt import GPT

    torch.manual_seed(seed)
    model = GPT(cfg, attn_impl=attn_impl).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def synthetic_batch(generator, cfg, micro_batch: int, device: str):
    """(inputs, targets) of ``micro_batch`` random sequences of ``cfg.seq_len`` tokens; on CUDA
    the host tensor is pinned and copied without blocking, as a DataLoader with
    ``pin_memory=True`` delivers it."""
    import torch

    tokens = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len + 1), generator=generator)
    tokens = tokens.pin_memory() if device == "cuda" else tokens
    return tokens[:, :-1].to(device, non_blocking=True), tokens[:, 1:].to(device, non_blocking=True)


def forward_backward(model, idx, *, dtype: str = "fp32"):
    """A closure of one forward + backward without an optimizer, what the fusion and recompute
    benchmarks time: the gradients freed (``zero_grad(set_to_none=True)``), the forward under
    ``timing.autocast`` of ``idx``'s device and ``dtype`` with the tokens as their own targets,
    the backward."""
    from mfulab.measure.timing import autocast

    device = idx.device.type

    def step():
        model.zero_grad(set_to_none=True)
        with autocast(device, dtype):
            _, loss = model(idx, idx)
        loss.backward()

    return step


def train_step(model, optimizer, x, y, *, device: str, dtype: str):
    """One training step: the forward under ``timing.autocast(device, dtype)``, the backward,
    the optimizer step and ``zero_grad(set_to_none=True)``. Returns the loss tensor (reading it
    synchronises the device: the caller decides when)."""
    from mfulab.measure.timing import autocast

    with autocast(device, dtype):
        _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss
