"""Mixture-of-experts exchange measured on this machine's ranks (every rank under torchrun):

- ``all_to_all_single`` against ``all_reduce`` of the same buffer on the same ranks, timed
  interleaved (each round times both, order alternating), every size checked for correctness;
- an expert layer step under skewed routing: dispatch all-to-all, each rank's experts work on
  the tokens they received (emulated: a sleep per token, no core busy, labelled), combine
  all-to-all. Rank 0's experts receive ``imbalance`` × the mean tokens; every rank's step
  and the part of it spent waiting in the combine for the most loaded rank are recorded.
"""

from __future__ import annotations

import time


def _splits(tokens: int, n: int, imbalance: float, rank: int) -> list[int]:
    """Tokens this rank sends to each expert rank: rank 0 gets ``imbalance`` × the mean share,
    the others split the rest evenly (whole tokens, the total kept)."""
    hot = round(tokens / n * imbalance)
    cold = (tokens - hot) // (n - 1)
    splits = [hot] + [cold] * (n - 1)
    splits[-1] += tokens - sum(splits)
    return splits


def _exchange_times(spec, rank, n):
    import torch
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar
    from mfulab.measure.timing import synchronize
    from mfulab.studies.parallelism.pipeline import _device

    device = _device(spec)

    rows = []
    for nbytes in spec["a2a_sizes_bytes"]:
        numel = max(n, nbytes // 4 // n * n)
        a2a_in = torch.full((numel,), float(rank), device=device)
        a2a_out = torch.empty(numel, device=device)
        ar = torch.ones(numel, device=device)
        times = {"all_to_all": [], "all_reduce": []}
        for i in range(spec["a2a_rounds"] + 1):
            order = ["all_to_all", "all_reduce"][:: 1 if i % 2 else -1]
            for op in order:
                dist.barrier()
                t0 = time.perf_counter()
                if op == "all_to_all":
                    dist.all_to_all_single(a2a_out, a2a_in)
                else:
                    dist.all_reduce(ar)
                synchronize(spec.get("device", "cpu"))
                elapsed = reduce_scalar(time.perf_counter() - t0, "max")
                if i:  # round 0 warms up
                    times[op].append(elapsed)
        expected = torch.arange(n, dtype=torch.float32, device=device).repeat_interleave(numel // n)
        wrong = int(reduce_scalar(float((a2a_out != expected).sum()), "sum"))
        rows.append(
            {"size_bytes": numel * 4, **{f"{op}_times_s": t for op, t in times.items()}, "wrong": wrong}
        )
    return rows


def _skewed_step(spec, rank, n, imbalance):
    import torch
    import torch.distributed as dist

    from mfulab.measure.timing import synchronize
    from mfulab.studies.parallelism.pipeline import _device

    device = _device(spec)
    tokens, hidden = spec["moe_tokens_per_rank"], spec["moe_hidden"]
    send = _splits(tokens, n, imbalance, rank)
    recv = [None] * n
    dist.all_gather_object(recv, send)
    recv_splits = [recv[src][rank] for src in range(n)]
    x = torch.randn(tokens, hidden, device=device)
    received = torch.empty(sum(recv_splits), hidden, device=device)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_to_all_single(received, x, output_split_sizes=recv_splits, input_split_sizes=send)
    synchronize(spec.get("device", "cpu"))
    t1 = time.perf_counter()
    time.sleep(received.shape[0] * spec["moe_expert_s_per_token"])  # emulated expert compute
    t2 = time.perf_counter()
    back = torch.empty(tokens, hidden, device=device)
    dist.all_to_all_single(back, received, output_split_sizes=send, input_split_sizes=recv_splits)
    synchronize(spec.get("device", "cpu"))
    t3 = time.perf_counter()
    return {
        "imbalance": imbalance,
        "received_tokens": int(received.shape[0]),
        "dispatch_s": t1 - t0,
        "expert_s": t2 - t1,
        "combine_s": t3 - t2,
        "step_s": t3 - t0,
    }


def moe_worker(spec: dict) -> dict:
    """torchrun worker: the all-to-all vs all-reduce rows, then the skewed steps (per rank)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    exchange = _exchange_times(spec, rank, n)
    steps = []
    for imbalance in spec["moe_imbalances"]:
        for _ in range(spec["moe_steps"]):
            steps.append(_skewed_step(spec, rank, n, imbalance))
    per_rank = [None] * n
    dist.all_gather_object(per_rank, steps)
    return {"ranks": n, "exchange": exchange, "skewed": per_rank}
