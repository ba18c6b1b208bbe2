"""The training-loop measurements of the ``dataloader`` study (torch, headless): the data
stall per loader (B2) and the spike of a synchronous checkpoint write (B12).

- ``stall_run``: the reference model trains on batches from one loader (or from batches
  pre-loaded in memory); per step, the time blocked waiting for the batch, the compute, and
  the rest (a synchronous checkpoint every ``checkpoint_every`` steps, and the loop itself).
  One process: no collective runs, so communication is zero by construction.
- ``checkpoint_spike``: a short training step with and without a synchronous checkpoint
  write (model + AdamW state, ``torch.save`` then ``fsync``), timed interleaved
  (``timing.interleaved``: one of each per round, order shuffled per round), and this
  machine's fsync write bandwidth (``fsync_write_bandwidth``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mfulab.measure.ckptio import write_checkpoint
from mfulab.studies.dataloader.formats import loader_for
from mfulab.studies.dataloader.params import Params
from mfulab.units import MIB

MFU_CONVENTION = "palm"  # the model FLOPs B2's useful compute counts (notebook 01's conventions)


def _config(p: Params):
    from mfulab.analytic.config import preset

    return preset(p.stall_preset).with_(seq_len=p.seq_len, vocab_size=256)


def _model(p: Params):
    from mfulab.measure.train import reference_model

    return reference_model(_config(p), attn_impl="sdpa", device=p.device, lr=1e-4)


def model_flops(p: Params, x) -> float:
    """Model FLOPs of one training step on batch ``x`` (it trains on ``x[:, :-1]``)."""
    from mfulab.analytic import flops

    rows, tokens = int(x.shape[0]), int(x.shape[1]) - 1
    return flops.flops_per_token(_config(p).with_(seq_len=tokens), convention=MFU_CONVENTION) * rows * tokens


def _cached_batches(p: Params, root: Path, n: int) -> list:
    loader = loader_for(p, p.formats[0], root, num_workers=0, persistent=False, pin_memory=False)
    cached = [b for b, _ in loader][:n]
    return cached * (1 + n // max(len(cached), 1))


def _train_step(model, opt, x, device: str) -> None:
    from mfulab.measure.timing import synchronize
    from mfulab.measure.train import train_step

    train_step(model, opt, x[:, :-1], x[:, 1:], device=device, dtype="fp32")
    synchronize(device)


def stall_run(p: Params, root: Path, fmt: str | None, *, emulated_step_s: float = 0.0) -> dict:
    """Train the reference model on batches from ``fmt`` (or pre-loaded in memory when None):
    per step, the time blocked waiting for the batch, the compute time and the checkpoint
    write (real compute only). With ``emulated_step_s`` the step is a timed wait instead (an
    accelerator-speed step: time passes, no core is busy), with ``num_workers=0`` so that
    loading sits inside the step, and no checkpoint."""
    from mfulab.measure.timing import synchronize

    device = p.device
    model, opt = _model(p)
    workers = 0 if emulated_step_s else max(p.num_workers)
    if fmt is None:
        batches = iter(_cached_batches(p, root, p.stall_steps + 1))
    else:
        loader = loader_for(p, fmt, root, num_workers=workers, persistent=True, pin_memory=device == "cuda")
        batches = (b for b, _ in _forever(loader))
    steps, ckpt = [], Path(root) / "checkpoint.pt"
    for i in range(p.stall_steps):
        t0 = time.perf_counter()
        x = next(batches).to(device, non_blocking=True)
        synchronize(device)
        t1 = time.perf_counter()
        if emulated_step_s:
            time.sleep(emulated_step_s)
        else:
            _train_step(model, opt, x, device)
        t2 = time.perf_counter()
        checkpoint = bool(p.checkpoint_every and not emulated_step_s and (i + 1) % p.checkpoint_every == 0)
        if checkpoint:
            write_checkpoint(model, opt, ckpt)  # synchronous write inside the step
        t3 = time.perf_counter()
        steps.append(
            {
                "step": i,
                "wait_s": t1 - t0,
                "compute_s": t2 - t1,
                "model_flops": 0.0 if emulated_step_s else model_flops(p, x),
                "checkpoint": checkpoint,
                "checkpoint_s": t3 - t2 if checkpoint else 0.0,
                "step_s": t3 - t0,
            }
        )
    return {
        "format": fmt or "in-memory",
        "num_workers": 0 if fmt is None else workers,
        "compute": "emulated compute" if emulated_step_s else "real compute",
        "ranks": 1,  # one process: no collective, communication is zero by construction
        "steps": steps,
    }


def _forever(loader):
    while True:
        yield from loader


STEP, STEP_WITH_CHECKPOINT = "step", "step + synchronous checkpoint"


def fsync_write_bandwidth(path: Path, n_bytes: int, repeats: int = 3) -> dict:
    """This machine's write bandwidth through the page cache to the disk: ``n_bytes`` written
    and ``fsync``-ed ``repeats`` times (median), as ``write_checkpoint`` writes; bytes/s. Each
    repeat also writes the same bytes without ``fsync`` (into the page cache only)."""
    import numpy as np

    from mfulab.measure.timing import summarize

    buf = np.random.default_rng(0).integers(0, 256, n_bytes, dtype=np.uint8).tobytes()
    times, buffered = [], []
    try:
        for _ in range(repeats):
            for synced, out in ((True, times), (False, buffered)):
                path.unlink(missing_ok=True)
                t0 = time.perf_counter()
                with open(path, "wb") as f:
                    f.write(buf)
                    f.flush()
                    if synced:
                        os.fsync(f.fileno())
                out.append(time.perf_counter() - t0)
    finally:
        path.unlink(missing_ok=True)
    median_s = summarize(times).median_s
    return {
        "bytes": n_bytes,
        "median_s": median_s,
        "bytes_per_s": n_bytes / median_s,
        # without fsync (torch.save and most checkpointers do not call it) the write ends in the
        # page cache: a memory copy the kernel flushes later
        "buffered_bytes_per_s": n_bytes / summarize(buffered).median_s,
    }


def checkpoint_spike(p: Params, root: Path) -> dict:
    """B12: a real training step (in-memory batches of ``p.checkpoint_batch_rows`` sequences)
    with and without a synchronous checkpoint write after it, ``p.checkpoint_rounds``
    interleaved rounds of one call each. Returns both timings with their per-round samples,
    the checkpoint's bytes, the write alone (median of a few, for the evidence) and this
    machine's fsync write bandwidth on ``p.fsync_probe_mib`` MiB (B12's magnitude row)."""
    from mfulab.measure.timing import interleaved, summarize

    model, opt = _model(p)
    batches = [b[: p.checkpoint_batch_rows] for b in _cached_batches(p, root, 8)]
    state = {"i": 0}
    ckpt = Path(root) / "checkpoint-b12.pt"

    def step():
        state["i"] += 1
        _train_step(model, opt, batches[state["i"] % len(batches)].to(p.device), p.device)

    def step_with_checkpoint():
        step()
        write_checkpoint(model, opt, ckpt)

    timings = interleaved(
        {STEP: step, STEP_WITH_CHECKPOINT: step_with_checkpoint},
        rounds=p.checkpoint_rounds,
        device=p.device,
        warmup=1,
        number=1,  # a block is one step (with or without its write)
        seed=p.seed,
        desc="checkpoint spike (interleaved)",
    )
    writes = []
    for _ in range(3):
        t0 = time.perf_counter()
        nbytes = write_checkpoint(model, opt, ckpt)
        writes.append(time.perf_counter() - t0)
    ckpt.unlink(missing_ok=True)
    return {
        "timings": {label: t.to_dict(with_samples=True) for label, t in timings.items()},
        "checkpoint_bytes": nbytes,
        "write_alone_s": summarize(writes).median_s,
        "rounds": p.checkpoint_rounds,
        "batch_rows": int(batches[0].shape[0]),
        "fsync_write": fsync_write_bandwidth(Path(root) / "fsync-probe.bin", p.fsync_probe_mib * MIB),
    }
