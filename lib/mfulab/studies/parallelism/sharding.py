"""Data parallelism and sharding measured on the reference GPT (every rank under torchrun):
DDP against FSDP2 (``torch.distributed.fsdp.fully_shard``) with ``reshard_after_forward``
off (parameters stay gathered from forward to backward: sharded gradients and optimizer
states) and on (fully sharded, ZeRO-3), each block a unit and the root a unit, with ``m``
micro-batches of gradient accumulation per optimizer step.

Per rank, counted, not estimated:
- the bytes of parameters, gradients and AdamW states this rank holds (local shards), and the
  parameter bytes it holds when a forward ends (what backward needs gathered: with
  ``reshard_after_forward`` off every parameter stays gathered until its backward);
- every collective the step issues and its full buffer in elements (nccl-tests' S): DDP's
  all-reduces through a communication hook that counts each bucket, FSDP2's all-gathers and
  reduce-scatters from the profiler's ``c10d::`` dispatcher ops and their input shapes;
- the gradients after the step, gathered whole, against DDP's (the correctness gate).
"""

from __future__ import annotations

import time

CONFIGS = ("ddp", "fsdp_grad_op", "fsdp_full")
C10D_BUFFER = {  # dispatcher op → which input holds the full buffer S (nccl-tests' size)
    "c10d::_allgather_base_": ("all_gather", 0),  # (output, input): the gathered output
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1),  # (output, input): the full input
}


def _model(spec):
    import torch

    from mfulab.analytic.config import preset
    from mfulab.measure.gpt import GPT
    from mfulab.studies.parallelism.pipeline import _device

    torch.manual_seed(0)
    return GPT(preset(spec["preset"]).with_(seq_len=spec["seq_len"])).to(_device(spec))


def _wrap(config: str, model, n: int, counts: dict):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    if config == "ddp":
        ddp = DDP(model, broadcast_buffers=False)

        def counting_hook(state, bucket):
            counts["all_reduce"] = counts.get("all_reduce", 0) + bucket.buffer().numel()
            counts["all_reduce_calls"] = counts.get("all_reduce_calls", 0) + 1
            work = dist.all_reduce(bucket.buffer(), async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0].div_(n))

        ddp.register_comm_hook(None, counting_hook)
        return ddp
    mesh = init_device_mesh("cuda" if next(model.parameters()).is_cuda else "cpu", (n,))
    reshard = config == "fsdp_full"
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def _count_c10d(prof, counts: dict) -> None:
    import math

    for e in prof.events():
        if e.name in C10D_BUFFER:
            op, which = C10D_BUFFER[e.name]
            counts[op] = counts.get(op, 0) + math.prod(e.input_shapes[which])
            counts[f"{op}_calls"] = counts.get(f"{op}_calls", 0) + 1


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def run_config(spec: dict, config: str, m: int, rank: int, n: int) -> tuple[dict, dict]:
    import torch

    model = _model(spec)
    counts: dict = {}
    wrapped = _wrap(config, model, n, counts)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)  # each rank its own data, as data parallelism does
    vocab, T, b = model.cfg.vocab_size, spec["seq_len"], spec["micro_batch"]
    device = next(model.parameters()).device
    batches = [torch.randint(0, vocab, (b, T), generator=gen).to(device) for _ in range(m)]

    def step(count: bool):
        for i, idx in enumerate(batches):
            if config == "ddp" and i < m - 1:
                with wrapped.no_sync():  # DDP accumulates locally and reduces on the last micro-batch
                    wrapped(idx, idx)[1].div(m).backward()
            else:
                wrapped(idx, idx)[1].div(m).backward()

    step(False)  # warm-up: DDP builds its buckets, FSDP2 its buffers
    model.zero_grad(set_to_none=True)
    counts.clear()
    forward_end = []  # parameter bytes this rank holds when a forward ends (FSDP2 swaps in gathered tensors)
    hook = model.register_forward_hook(lambda *_: forward_end.append(_local_bytes(model.parameters())))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        t0 = time.perf_counter()
        step(True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - t0
    hook.remove()
    _count_c10d(prof, counts)
    grads = {name: _full(p.grad).detach().clone() for name, p in model.named_parameters()}
    opt.step()
    states = [t for s in opt.state.values() for k, t in s.items() if k != "step"]
    row = {
        "config": config,
        "m": m,
        "params_bytes": _local_bytes(model.parameters()),
        "grads_bytes": _local_bytes(p.grad for p in model.parameters()),
        "optimizer_bytes": _local_bytes(states),
        "params_at_forward_end_bytes": max(forward_end),
        "collectives": counts,
        "step_s": step_s,
    }
    return row, grads


def sharding_worker(spec: dict) -> dict:
    """torchrun worker: every (config, m) of the spec; per-rank rows, gradient gate vs DDP."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(spec.get("threads_per_rank", 1))
    rank, n = dist.get_rank(), dist.get_world_size()
    psi = sum(p.numel() for p in _model(spec).parameters())
    rows, gate, scale = [], {}, {}
    for m in spec["accumulation"]:
        ref = None
        for config in spec["configs"]:
            row, grads = run_config(spec, config, m, rank, n)
            if ref is None:
                ref = grads
            gate[f"{config}@{m}"] = max(float((grads[k] - ref[k]).abs().max()) for k in ref)
            scale[f"{config}@{m}"] = max(float(ref[k].abs().max()) for k in ref)  # the gate is relative to it
            rows.append(row)
    per_rank = [None] * n
    dist.all_gather_object(per_rank, rows)
    out = {"ranks": n, "n_params": psi, "preset": spec["preset"], "rows": per_rank, "gradient_gate": gate}
    return {**out, "gradient_scale": scale}
