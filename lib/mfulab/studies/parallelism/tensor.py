"""Tensor and sequence parallelism measured on one block of the reference GPT (every rank
under torchrun), with PyTorch's own DTensor styles (``parallelize_module``): Q, K, V and the
MLP's first linear column-parallel, the attention output projection and the MLP's second
linear row-parallel (Megatron's layout, Narayanan et al. 2021 §3); with sequence parallelism
the two LayerNorms ``SequenceParallel`` on a sequence shard, the attention and MLP inputs
gathered (``PrepareModuleInput``) and the row-parallel outputs reduce-scattered back to
sequence shards (Korthikanti et al. 2022 §4.2.2).

Per rank: the output and every gradient against the same block run whole in one process
(the correctness gate); the collectives of one forward + backward, counted by DTensor's
``CommDebugMode``; and the activation bytes autograd keeps for backward (saved-tensor
hooks, local shards, storages counted once, parameters excluded).
"""

from __future__ import annotations


def _block(spec):
    import torch

    from mfulab.analytic.config import preset
    from mfulab.measure.gpt import Block
    from mfulab.studies.parallelism.pipeline import _device

    cfg = preset(spec["preset"]).with_(seq_len=spec["seq_len"])
    torch.manual_seed(0)
    return Block(cfg, attn_impl="naive").to(_device(spec)), cfg


def _plan(sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    col = {f"attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")} | {
        "mlp.up": ColwiseParallel()
    }
    if not sequence_parallel:
        return col | {"attn.o_proj": RowwiseParallel(), "mlp.down": RowwiseParallel()}
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return col | {
        "norm1": SequenceParallel(),
        "norm2": SequenceParallel(),
        "attn": gather,
        "mlp": gather,
        "attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    }


def _saved_activation_bytes(fn, params) -> int:
    """Bytes of the tensors autograd keeps for backward during ``fn()``: local shards of
    DTensors, each storage once, parameters left out."""
    import torch

    param_ptrs = set()
    for p in params:
        local = p.to_local() if hasattr(p, "to_local") else p
        param_ptrs.add(local.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t):
        local = t.to_local() if hasattr(t, "to_local") else t
        storage = local.untyped_storage()
        if storage.data_ptr() not in param_ptrs:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def tp_worker(spec: dict) -> dict:
    """torchrun worker: the block whole (reference), then with TP and with TP + SP."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    torch.set_num_threads(spec.get("threads_per_rank", 1))
    rank, t = dist.get_rank(), dist.get_world_size()
    ref_block, cfg = _block(spec)
    device = next(ref_block.parameters()).device
    mesh = init_device_mesh(device.type, (t,))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(spec["micro_batch"], cfg.seq_len, cfg.d_model, generator=gen).to(device)
    x_ref = x.clone().requires_grad_(True)
    ref_saved, ref_out = _saved_activation_bytes(lambda: ref_block(x_ref), list(ref_block.parameters()))
    ref_out.pow(2).sum().backward()
    ref_grads = {n: p.grad for n, p in ref_block.named_parameters()}
    refs = [ref_out, x_ref.grad, *ref_grads.values()]
    ref_scale = max(float(r.abs().max()) for r in refs)  # the gate is relative to it where it passes 1
    rows = [{"layout": "whole", "saved_bytes": ref_saved, "collectives": {}, "max_abs_diff": 0.0}]
    rows[0]["gradient_scale"] = ref_scale
    shard = cfg.seq_len // t
    for sp in (False, True):
        block, _ = _block(spec)
        parallelize_module(block, mesh, _plan(sp))
        block.attn.n_heads //= t  # each rank runs its own heads
        block.attn.n_kv_heads //= t
        x_in = (x[:, rank * shard : (rank + 1) * shard] if sp else x).clone().requires_grad_(True)
        comm = CommDebugMode()
        with comm:
            saved, out = _saved_activation_bytes(lambda b=block, x=x_in: b(x), list(block.parameters()))
            out.pow(2).sum().backward()
        ref_slice = ref_out[:, rank * shard : (rank + 1) * shard] if sp else ref_out
        ref_x_grad = x_ref.grad[:, rank * shard : (rank + 1) * shard] if sp else x_ref.grad
        diffs = [float((out - ref_slice).abs().max()), float((x_in.grad - ref_x_grad).abs().max())]
        diffs += [float((_full(p.grad) - ref_grads[n]).abs().max()) for n, p in block.named_parameters()]
        counts = {str(op).split(".")[-1]: int(c) for op, c in comm.get_comm_counts().items()}
        rows.append(
            {
                "layout": "tp+sp" if sp else "tp",
                "saved_bytes": saved,
                "collectives": counts,
                "max_abs_diff": max(diffs),
                "gradient_scale": ref_scale,
            }
        )
    per_rank = [None] * t
    dist.all_gather_object(per_rank, rows)
    return {
        "tp": t,
        "preset": spec["preset"],
        "config": cfg.to_dict(),
        "micro_batch": spec["micro_batch"],
        "rows": per_rank,
    }
