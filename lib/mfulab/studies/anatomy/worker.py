"""The ``anatomy`` training job, on every rank under torchrun: the reference GPT under
``DistributedDataParallel`` (gloo on CPU, NCCL on CUDA), fed by a ``DataLoader`` over the corpus
(a ``DistributedSampler`` gives each rank its share), with checkpoints.

One :class:`Trainer` per rung of the B15 ladder (``ladder.LADDER``: each rung turns on one knob)
and per leave-one-out configuration (the last rung without one knob), all built up front, so that
the rounds can interleave them: in each round every configuration (and the B13 straggler variant
of the last rung) runs one block of steps, in an order drawn per round with the
same seed on every rank. A block's time is the slowest rank's (``launch.reduce_scalar``).

Per step and per rank, explicit timestamps split the step into data wait (the batch from the
loader, to the device), compute (forward, backward, optimizer), communication wait and other (the
checkpoint and the rest). Each block writes one checkpoint, after step max(1, ⌊block_steps / 2⌋)
of the block (the first of 3, the second of 4): a background write then has steps to hide
behind, and the block's timer waits for it before it stops. In the
B13 straggler's blocks every second step (counted across its blocks, the same on every rank) has
the slowest rank (the most compute in its warm-up steps) spin on its core before its
forward (busy, as a throttled card's slower kernels are: a sleep would free the core for the other
rank), so the other ranks wait for it inside the same step's all-reduces; the steps between are
its paired baseline (these blocks write no checkpoint). The communication wait is measured
through a DDP comm hook that returns at once, as DDP's own does: the time ``backward()`` still runs
after the last hook returned (the all-reduces backward did not hide; a blocking hook would add the
spans it waits). The same steps are annotated for ``torch.profiler`` (``data``, ``mfulab.ddp_backward``,
``mfulab.comm_wait``, ``mfulab.checkpoint``: see ``opprofile.RULES``) so that the profiler's split
can be set beside it.
"""

from __future__ import annotations

import time
from pathlib import Path

from mfulab.studies.anatomy.ladder import LADDER, leave_one_out, rungs

STRAGGLER = "last rung + straggler"


def ddp_device_ids(device: str) -> list[int] | None:
    """DDP's ``device_ids`` for this rank: the GPU :func:`launch.cuda_index` picks (``LOCAL_RANK``
    among the node's GPUs, or the only one a scheduler that binds one GPU per rank shows)."""
    from mfulab.measure.launch import cuda_index

    return [cuda_index()] if device == "cuda" else None


class HostClock:
    """Marks on the host clock: on a CPU the host's time is the device's."""

    def mark(self):
        return time.perf_counter()

    def elapsed_s(self, a, b) -> float:
        return max(0.0, b - a)


class CudaEventClock:
    """Marks on the device timeline: a CUDA event recorded on the current stream, read after the
    step's synchronise. The host runs ahead of the GPU, so host timestamps taken in a comm hook
    date the enqueue, not the work (audit D20)."""

    def __init__(self, torch_cuda=None):
        if torch_cuda is None:
            import torch

            torch_cuda = torch.cuda
        self.cuda = torch_cuda

    def mark(self):
        event = self.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, a, b) -> float:
        return max(0.0, a.elapsed_time(b) / 1e3)


def step_clock(device: str):
    """The clock a rung's communication wait is read on: CUDA events on a GPU, the host's clock
    elsewhere."""
    return CudaEventClock() if device == "cuda" else HostClock()


class HookTimer:
    """A DDP comm hook (all-reduce of the bucket, averaged) that marks, on ``clock``, where each
    bucket's all-reduce began and ended and where the hook returned; when ``blocking`` it waits
    for its all-reduce before returning (no overlap with backward).

    The step's exposed communication (:meth:`comm_wait_s`) is the blocked spans plus the tail from
    the last hook's return to the end of backward. On a GPU every mark is a CUDA event on the
    compute stream: a bucket's "began" fires when its gradients are computed, its "ended" when the
    compute stream has waited for the all-reduce, and the tail is the device time backward spent
    waiting for the buckets still in flight when its compute ended (audit D20)."""

    def __init__(self, blocking: bool, device: str, clock=None):
        self.blocking, self.device = blocking, device
        self.clock = clock if clock is not None else step_clock(device)
        self.reset()

    def reset(self):
        self.spans, self.last_return, self.calls = [], None, 0

    def run(self, bucket):
        import torch.distributed as dist
        from torch.profiler import record_function

        began = self.clock.mark()
        tensor = bucket.buffer().div_(dist.get_world_size())
        fut = dist.all_reduce(tensor, async_op=True).get_future()
        returned = began
        if self.blocking:
            with record_function("mfulab.comm_wait"):
                fut.wait()  # on CUDA: the current stream waits for the all-reduce
                returned = self.clock.mark()
                if self.device == "cuda":
                    import torch

                    torch.cuda.synchronize()  # and the host too: nothing overlaps this bucket
            self.spans.append((began, returned))
        self.calls += 1
        self.last_return = returned
        return fut.then(lambda f: f.value()[0])

    def comm_wait_s(self, backward_end, backward_s: float) -> float:
        """The exposed communication of one backward: the blocked spans, plus the tail from the
        last hook's return to ``backward_end`` (a mark on the same clock, taken once backward has
        returned, before the synchronise), capped at the backward's own time."""
        blocked_s = sum(self.clock.elapsed_s(a, b) for a, b in self.spans)
        tail_s = self.clock.elapsed_s(self.last_return, backward_end) if self.last_return is not None else 0.0
        return min(blocked_s + tail_s, backward_s)


def timed_allreduce(state: HookTimer, bucket):
    """The comm hook DDP calls per bucket (``state``: the rung's :class:`HookTimer`)."""
    return state.run(bucket)


class Trainer:
    """One rung: its DDP model, optimizer, loader and checkpoint mode; ``step()`` runs one
    training step and appends its timestamps to ``rows``."""

    def __init__(self, name: str, knobs: dict, spec: dict, rank: int, world: int):
        import torch
        import torch.utils.data as tud
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data.distributed import DistributedSampler

        from mfulab.analytic.config import ATTENTION_IMPLS, TransformerConfig, check_attention
        from mfulab.measure.ckptio import BackgroundCheckpointer
        from mfulab.measure.dataformats import Collate, dataset
        from mfulab.measure.train import reference_model

        self.name, self.spec, self.rank, self.device = name, spec, rank, spec["device"]
        cfg = TransformerConfig(**spec["config"])
        self.attention = knobs.get("attention", "naive")  # a kernel class of config.ATTENTION_KERNELS
        check_attention(self.attention)
        impl = {kernel: impl for impl, kernel in ATTENTION_IMPLS.items()}[self.attention]  # the GPT's
        model, self.opt = reference_model(cfg, attn_impl=impl, device=self.device, lr=1e-4)
        # the buckets knob is article B §5.2's step 2: a larger cap, gradient_as_bucket_view and
        # static_graph; every rung overlaps its all-reduce with backward, as DDP does by default
        cap = spec["good_bucket_cap_mb"] if knobs.get("buckets") else spec["naive_bucket_cap_mb"]
        tuned = {"gradient_as_bucket_view": True, "static_graph": True} if knobs.get("buckets") else {}
        self.ddp = DDP(model, bucket_cap_mb=cap, device_ids=ddp_device_ids(self.device), **tuned)
        self.hook = HookTimer(blocking=False, device=self.device)
        self.ddp.register_comm_hook(self.hook, timed_allreduce)
        # compile the DDP-wrapped model, not the model inside DDP: dynamo's DDPOptimizer then
        # splits the graph at bucket boundaries and each bucket's all-reduce still overlaps the
        # backward; DDP(torch.compile(model)) returns every gradient at the end of one compiled
        # backward, and the overlap every rung relies on would silently be lost
        compiled = self.attention == "fused" and spec["compile"]
        self.model = torch.compile(self.ddp) if compiled else self.ddp
        fmt = spec["good_format"] if knobs.get("format") == "good" else spec["naive_format"]
        workers = spec["good_workers"] if knobs.get("workers") else 0
        ds = dataset(fmt, spec["corpus_dir"])
        extra = {"persistent_workers": True, "prefetch_factor": 2} if workers else {}
        self.loader = tud.DataLoader(
            ds,
            batch_size=spec["micro_batch"],
            sampler=DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0),
            num_workers=workers,
            collate_fn=Collate(cfg.seq_len + 1),
            pin_memory=self.device == "cuda",
            **extra,
        )
        self.batches = self._forever()
        self.format, self.workers, self.bucket_cap_mb = fmt, workers, cap
        self.overlap = not self.hook.blocking
        self.background = BackgroundCheckpointer() if knobs.get("background") else None
        self.ckpt = Path(spec["corpus_dir"]) / f"ckpt-rank{rank}-{name.replace(' ', '_').replace('+', '')}.pt"
        self.steps, self.block_step, self.blocks, self.rows = 0, 0, 0, []

    def _forever(self):
        epoch = 0
        while True:
            self.loader.sampler.set_epoch(epoch)
            for batch, _ in self.loader:
                yield batch
            epoch += 1

    def step(self, *, delay_s: float = 0.0, record: str = "", straggler_on: bool = False) -> dict:
        from torch.profiler import record_function

        from mfulab.measure.ckptio import write_checkpoint
        from mfulab.measure.timing import autocast, synchronize

        dev = self.device
        t0 = t_delay = time.perf_counter()
        if delay_s:  # before the forward: the other ranks wait for it in this step's all-reduces
            with record_function("mfulab.straggler"):
                _busy(delay_s)
            t_delay = time.perf_counter()
        with record_function("data"):
            x = next(self.batches).to(dev, non_blocking=True)
            synchronize(dev)
        t1 = time.perf_counter()
        with autocast(dev, self.spec["dtype"]):
            _, loss = self.model(x[:, :-1], x[:, 1:])
        synchronize(dev)
        t2 = time.perf_counter()
        self.hook.reset()
        with record_function("mfulab.ddp_backward"):
            loss.backward()
            backward_end = self.hook.clock.mark()  # a CUDA event: where backward's stream ends
            synchronize(dev)
        t3 = time.perf_counter()
        comm_s = self.hook.comm_wait_s(backward_end, t3 - t2)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        synchronize(dev)
        t4 = t5 = time.perf_counter()
        self.steps += 1
        self.block_step += 1
        # one checkpoint per block (every checkpoint_every_blocks-th block), in its middle: a
        # background write has steps to hide behind, and the block's timer waits for it
        # (ckptio.BackgroundCheckpointer.wait) before it stops; checkpoint_ranks "rank0" writes
        # on rank 0 only (the others meet the spike at the next all-reduce), as a node job does
        every = self.spec.get("checkpoint_every_blocks", 1)
        writer = self.spec.get("checkpoint_ranks", "all") == "all" or self.rank == 0
        checkpoint = (
            record not in ("warmup", STRAGGLER)
            and writer
            and self.block_step == max(1, self.spec["block_steps"] // 2)
            and (self.blocks - 1) % every == 0
        )
        if checkpoint:
            with record_function("mfulab.checkpoint"):
                if self.background is not None:
                    self.background.save(self.ddp.module, self.opt, self.ckpt)
                else:
                    write_checkpoint(self.ddp.module, self.opt, self.ckpt)
        t6 = time.perf_counter()
        row = {
            "rung": self.name,
            "record": record,
            "rank": self.rank,
            "step": self.steps,
            "start_s": t0,
            "data_s": t1 - t_delay,
            "forward_s": t2 - t1,
            "backward_s": t3 - t2,
            "comm_wait_s": comm_s,
            "optimizer_s": t4 - t3,
            "straggler_s": t_delay - t0,
            "straggler_on": straggler_on,
            "checkpoint": checkpoint,
            "checkpoint_s": t6 - t5,
            "step_s": t6 - t0,
            "loss": float(loss.detach()),
            "hook_calls": self.hook.calls,
        }
        self.rows.append(row)
        return row

    def close(self):
        if self.background is not None:
            self.background.wait()
        self.ckpt.unlink(missing_ok=True)


def _pin_rank_to_core(rank: int) -> int | None:
    """Pin this rank's process (every thread it has, and so every thread and loader worker it
    starts later) to one core of those it may run on, by local rank: each rank owns its core as
    each GPU is its rank's own, and a rank waiting in an all-reduce cannot lend its core to
    another. The core, or None where the platform has no affinity call."""
    import os

    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    core = cores[int(os.environ.get("LOCAL_RANK", rank)) % len(cores)]
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # a thread that ended meanwhile
            pass
    return core


def _busy(seconds: float) -> None:
    """Keep this rank's core busy for ``seconds`` (a spin on the clock)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _block(trainer, steps: int, delay_s: float, record: str, straggler_on=None) -> float:
    """``steps`` steps of one trainer; the slowest rank's seconds per step. ``straggler_on``: per
    step, whether the straggler is on (this rank waits ``delay_s`` on those steps only)."""
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar

    dist.barrier()
    trainer.block_step = 0
    trainer.blocks += 1
    t0 = time.perf_counter()
    for i in range(steps):
        on = straggler_on[i] if straggler_on is not None else bool(delay_s)
        trainer.step(delay_s=delay_s if on else 0.0, record=record, straggler_on=on)
    if trainer.background is not None:  # the block's background write ends inside its time
        trainer.background.wait()
    return reduce_scalar(time.perf_counter() - t0, "max") / steps


def anatomy_worker(spec: dict) -> dict:
    """Runs on every rank: warm-up, the interleaved rounds (every rung + the straggler), then the
    profiled steps of the naive rung; returns every rank's rows (gathered) and the timings."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from mfulab.measure import opprofile
    from mfulab.measure.launch import reduce_scalar

    if spec["device"] == "cpu":
        torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    pinned = _pin_rank_to_core(rank) if spec["device"] == "cpu" and spec.get("pin_ranks", True) else None
    configurations = rungs() + (leave_one_out() if spec.get("leave_one_out", True) else [])
    trainers = {name: Trainer(name, knobs, spec, rank, world) for name, knobs in configurations}
    last = trainers[LADDER[-1][0]]
    for t in trainers.values():
        for _ in range(spec["warmup_steps"]):
            t.step(record="warmup")
    base_s = _block(last, max(1, spec["warmup_steps"]), 0.0, "warmup")
    delay_s = spec["straggler_slowdown"] * base_s
    delay_s = reduce_scalar(delay_s, "max")  # one delay for the job
    # the straggler is the rank whose own work takes longest (the most compute in the last rung's
    # warm-up steps: forward, backward less the communication it waited, optimizer): the article's
    # card is slower than every other, and a delay put on a faster rank would first use up its
    # wait for the others (the same rank on every rank: gathered)
    computes = [None] * world
    warm = [r for r in last.rows if r["record"] == "warmup"]
    mine = [r["forward_s"] + r["backward_s"] - r["comm_wait_s"] + r["optimizer_s"] for r in warm]
    dist.all_gather_object(computes, float(np.median(mine)))
    slow_rank = int(np.argmax(computes))
    labels = [*trainers, STRAGGLER]
    samples = {label: [] for label in labels}
    rng = np.random.default_rng(spec["seed"])  # the same order on every rank
    straggler_steps = 0  # the straggler's steps so far: it is on in every second one
    for _ in range(spec["rounds"]):
        for i in rng.permutation(len(labels)):
            label = labels[i]
            if label != STRAGGLER:
                samples[label].append(_block(trainers[label], spec["block_steps"], 0.0, label))
                continue
            n = spec["straggler_block_steps"]
            on = [(straggler_steps + k) % 2 == 1 for k in range(n)]
            straggler_steps += n
            delay = delay_s if rank == slow_rank else 0.0
            samples[label].append(_block(last, n, delay, label, straggler_on=on))
    naive = trainers[LADDER[0][0]]
    naive.block_step = -1  # the profiler's first (left-out) step, then a block with its checkpoint
    trace = Path(spec["trace_dir"]) / f"anatomy_naive_rank{rank}.json.gz"
    n_before = len(naive.rows)
    profile = opprofile.profile_steps(
        lambda: naive.step(record="profiled"),
        steps=spec["profile_steps"],
        warmup_steps=0,
        device=spec["device"],
        trace_path=trace,
        max_trace_bytes=spec["trace_max_bytes"],
    )
    profiled_rows = naive.rows[n_before + 1 :]  # the profiler's own first step is left out
    for t in trainers.values():
        t.close()
    mine = {
        "rank": rank,
        "pinned_core": pinned,
        "rows": [r for t in trainers.values() for r in t.rows],
        "profile": profile,
        "profiled_rows": profiled_rows,
    }
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    return {
        "world_size": world,
        "device": spec["device"],
        "rungs": [
            {
                "rung": name,
                "format": t.format,
                "workers": t.workers,
                "bucket_cap_mb": t.bucket_cap_mb,
                "overlap": t.overlap,
                "attention": t.attention,
                "background_checkpoint": t.background is not None,
            }
            for name, t in trainers.items()
        ],
        "labels": labels,
        "samples_s": samples,
        "straggler": {
            "rank": slow_rank,
            "delay_s": delay_s,
            "base_step_s": base_s,
            "warmup_compute_s": computes,
        },
        "ranks": gathered,
    }
