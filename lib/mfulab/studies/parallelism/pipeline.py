"""Pipeline parallelism measured with ``torch.distributed.pipelining`` (every rank under
torchrun): GPipe, 1F1B and interleaved 1F1B on ``p`` ranks, ``m`` micro-batches, with each
stage's compute **emulated** (every layer's forward and backward sleep a stated time: an
accelerator kernel as the host sees it, no core busy, labelled everywhere) or **real**
(Linear + tanh layers). Each rank holds ``layers_per_rank`` layers, in ``v`` chunks of
``layers_per_rank / v`` for the interleaved schedule (rank r holds stages r, r + p, …).

The measured bubble is (step − ideal) / ideal, where ideal is m micro-batches of one rank's
layers run back to back with no pipeline: for emulated compute m · layers_per_rank ·
(t_forward + t_backward); for real compute the same chunk timed alone on the rank. Every layer
records when its forward and its backward ran (``time.perf_counter``, one clock for every process
of a host), so one step can be drawn stage by stage. On CUDA a real layer's marks are CUDA events
on its stream, read after the step's synchronise against an event recorded when the step
started: host timestamps there would be the times the kernels were queued, not run.
"""

from __future__ import annotations

import time

from mfulab.measure.timing import synchronize

P2P_OPS = ("c10d::send", "c10d::recv_")  # the dispatcher's point-to-point ops, as the profiler names them
SCHEDULE_CLASSES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved": "ScheduleInterleaved1F1B",
}


def _device(spec: dict):
    """This rank's device: the CPU, or its GPU under torchrun (``launch.cuda_index``)."""
    import torch

    from mfulab.measure.launch import cuda_index

    return torch.device("cuda", cuda_index()) if spec.get("device") == "cuda" else torch.device("cpu")


def _sleep_layer(forward_s: float, backward_s: float, log: list, stage: int):
    """A layer whose forward and backward sleep (emulated compute) and log their spans."""
    import torch

    class Sleep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            t0 = time.perf_counter()
            time.sleep(forward_s)
            log.append(("F", stage, t0, time.perf_counter()))
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):
            t0 = time.perf_counter()
            time.sleep(backward_s)
            log.append(("B", stage, t0, time.perf_counter()))
            return grad

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(1))  # a parameter, so the stage has gradients

        def forward(self, x):
            # scale first: the stage's input needs no gradient, but the sleep's backward must run
            return Sleep.apply(x * self.scale)

    return Layer()


def _mark(x):
    """Now, on the clock of ``x``'s device: ``time.perf_counter()`` on the CPU, a CUDA event
    recorded on the current stream on a GPU (read by :func:`_span_times` after a synchronise)."""
    if x.is_cuda:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def _span_times(log: list, t0: float, ref) -> list:
    """The step's spans as (kind, stage, start, end) in seconds since ``t0``: host marks as they
    are, CUDA events by their distance from ``ref`` (an event recorded at ``t0``)."""

    def since(mark):
        return mark - t0 if isinstance(mark, float) else ref.elapsed_time(mark) / 1e3

    return [(kind, st, since(a), since(b)) for kind, st, a, b in log]


def _real_layer(hidden: int, log: list, stage: int):
    import torch

    class Backward(torch.autograd.Function):
        """Identity whose backward marks when the gradient passes: at a layer's output it is where
        the layer's backward starts, at its input where it ends (the span between is logged). An
        input that needs no gradient (the first layer of the first stage) gets none: that one
        layer's backward is left undrawn."""

        @staticmethod
        def forward(ctx, x, box):
            ctx.box = box
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            box = ctx.box
            if "start" not in box:
                box["start"] = _mark(grad)
            else:
                log.append(("B", stage, box.pop("start"), _mark(grad)))
            return grad, None

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(hidden, hidden)

        def forward(self, x):
            box = {}  # this micro-batch's backward span: its output's mark, then its input's
            x = Backward.apply(x, box)
            t0 = _mark(x)
            y = torch.tanh(self.linear(x))
            log.append(("F", stage, t0, _mark(y)))
            return Backward.apply(y, box)

    return Layer()


def _chunk(spec: dict, stage: int, layers: int, log: list):
    import torch

    torch.manual_seed(stage)
    if spec["compute"] == "emulated":
        make = lambda: _sleep_layer(spec["layer_forward_s"], spec["layer_backward_s"], log, stage)  # noqa: E731
    else:
        make = lambda: _real_layer(spec["hidden"], log, stage)  # noqa: E731
    return torch.nn.Sequential(*(make() for _ in range(layers)))


def _run(spec: dict, schedule: str, m: int, v: int, rank: int, p: int, log: list) -> dict:
    """One schedule at one m: a warm-up step, then ``steps`` timed steps (slowest rank)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining

    from mfulab.measure.launch import reduce_scalar

    n_stages = p * v
    layers = spec["layers_per_rank"] // v
    stage_ids = [rank + k * p for k in range(v)]
    chunks = {s: _chunk(spec, s, layers, log) for s in stage_ids}
    device = _device(spec)
    for chunk in chunks.values():
        chunk.to(device)
    stages = [pipelining.PipelineStage(chunks[s], s, n_stages, device) for s in stage_ids]
    cls = getattr(pipelining, SCHEDULE_CLASSES[schedule])
    kwargs = {"n_microbatches": m, "loss_fn": lambda out, target: out.pow(2).mean()}
    sched = cls(stages if schedule == "interleaved" else stages[0], **kwargs)
    rows = spec["micro_batch_rows"] * m
    x = torch.randn(rows, spec["hidden"], generator=torch.Generator().manual_seed(0)).to(device)
    target = torch.zeros(rows, spec["hidden"], device=device)
    holds_first, holds_last = 0 in stage_ids, (n_stages - 1) in stage_ids

    def step():
        args = (x,) if holds_first else ()
        kw = {"target": target, "losses": []} if holds_last else {}
        sched.step(*args, **kw)

    step()  # warm-up: shapes, buffers, connections
    times, spans = [], []
    for _ in range(spec["steps"]):
        dist.barrier()
        del log[:]
        t0 = time.perf_counter()
        ref = _mark(target)  # on CUDA: the event every span is read against
        step()
        synchronize(spec.get("device", "cpu"))
        elapsed = time.perf_counter() - t0
        times.append(reduce_scalar(elapsed, "max"))
        spans = _span_times(log, t0, ref)
    gate = (
        _gradient_gate(spec, chunks, stage_ids, n_stages, step, x, m) if spec["compute"] == "real" else None
    )
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    p2p = sum(1 for e in prof.events() if e.name in P2P_OPS)
    ideal_chunk_s = _ideal(spec, chunks, stage_ids)
    return {
        "schedule": schedule,
        "m": m,
        "v": v,
        "times_s": times,
        "ideal_s": reduce_scalar(m * ideal_chunk_s, "max"),
        "p2p_messages": int(reduce_scalar(p2p, "sum")),  # sends + receives of one step, all ranks
        "gradient_gate": None if gate is None else reduce_scalar(gate[0], "max"),
        "gradient_scale": None if gate is None else reduce_scalar(gate[1], "max"),
        "spans": spans,  # the last timed step of this rank
    }


def _gradient_gate(spec: dict, chunks: dict, stage_ids, n_stages: int, step, x, m: int) -> tuple:
    """Largest |gradient − reference| of this rank's chunks after one pipelined step, and the
    largest |reference gradient| (the gate is relative to it where it passes 1); the
    reference runs every chunk (rebuilt from the same seeds) in one process on the same
    micro-batches, the loss averaged over them as the schedule does."""
    import torch

    for chunk in chunks.values():
        chunk.zero_grad(set_to_none=True)
    step()
    whole = torch.nn.Sequential(*(_chunk(spec, s, len(chunks[stage_ids[0]]), []) for s in range(n_stages)))
    whole.to(x.device)
    sum(whole(xm).pow(2).mean() for xm in x.chunk(m)).div(m).backward()
    pairs = [(p, r) for s in stage_ids for p, r in zip(chunks[s].parameters(), whole[s].parameters())]
    return (
        max(float((p.grad - r.grad).abs().max()) for p, r in pairs),
        max(float(r.grad.abs().max()) for _, r in pairs),
    )


def _ideal(spec: dict, chunks: dict, stage_ids) -> float:
    """One micro-batch through this rank's layers, forward and backward, with no pipeline."""
    import torch

    if spec["compute"] == "emulated":
        return spec["layers_per_rank"] * (spec["layer_forward_s"] + spec["layer_backward_s"])
    x = torch.randn(spec["micro_batch_rows"], spec["hidden"], device=_device(spec), requires_grad=True)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for s in stage_ids:
            chunks[s](x).pow(2).mean().backward()
        synchronize(spec.get("device", "cpu"))
        best = min(best, time.perf_counter() - t0)
    return best


def legal(*, p: int, m: int, v: int) -> bool:
    from mfulab.analytic.parallel import check_pipeline
    from mfulab.errors import ParameterError

    try:
        check_pipeline(p=p, m=m, v=v)
    except ParameterError:
        return False
    return True


def pipeline_worker(spec: dict) -> dict:
    """torchrun worker: every legal (schedule, m) of the spec on this job's ranks."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, p = dist.get_rank(), dist.get_world_size()
    log: list = []
    runs = []
    for schedule in spec["schedules"]:
        v = spec["virtual_stages"] if schedule == "interleaved" else 1
        for m in spec["micro_batch_counts"]:
            if schedule != "gpipe" and not legal(p=p, m=m, v=v):
                continue  # 1F1B needs m ≥ p, interleaved m a multiple of p (parallel.check_pipeline)
            runs.append(_run(spec, schedule, m, v, rank, p, log))
    gathered = [None] * p
    dist.all_gather_object(gathered, [r["spans"] for r in runs])
    for i, run in enumerate(runs):
        run["spans"] = {str(r): gathered[r][i] for r in range(p)}
    return {"ranks": p, "compute": spec["compute"], "runs": runs}
