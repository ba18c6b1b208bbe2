"""Measurement of the ``dataloader`` study (torch, headless): write the corpus in every
format, sweep ``DataLoader`` settings warm and cold, and time the data stall of a training
loop.

Cold cache: ``evict`` asks the kernel to drop a file's pages (``posix_fadvise(DONTNEED)``,
no root needed) and ``resident_fraction`` checks with ``mincore`` that it took effect.
Units: ``mib_per_s`` is MiB/s (2**20 bytes per second) of the format's bytes on disk.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

import numpy as np

from ... import hardware
from .corpus import check_free_space, corpus_checksum, estimate_bytes, synthetic_corpus
from .formats import format_files, make_loader, write_format
from .params import Params

STUDY = "dataloader"
BENCHMARK_VERSION = {"loader": 2, "stall": 1}  # loader 2: rows carry mib_per_s (was mb_per_s, also MiB/s)


# ---------------------------------------------------------------------------- page cache
def evict(paths) -> None:
    """Drop the files' pages from the page cache (``posix_fadvise(DONTNEED)``; no root needed).
    Dirty pages cannot be dropped, so each file is flushed to disk first."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(path) -> float:
    """Fraction of a file's pages in the page cache, from ``mincore(2)`` on a fresh mapping."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    n_pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vec = (ctypes.c_ubyte * n_pages)()
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore on {path} failed")
            return sum(v & 1 for v in vec) / n_pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- loader sweep
def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def mib_per_s(n_bytes: float, seconds: float) -> float:
    """Bytes per second in MiB/s (1 MiB = 2**20 bytes)."""
    return n_bytes / 2**20 / seconds


def run_epochs(loader, epochs: int, expected: dict) -> list[dict]:
    """Iterate ``epochs`` epochs; per epoch: time to first batch, wall time, samples, tokens,
    and whether count and checksum equal the corpus's."""
    out = []
    for e in range(epochs):
        count, checksum, tokens = 0, 0, 0
        t0 = time.perf_counter()
        first = None
        for _, meta in loader:
            if first is None:
                first = time.perf_counter() - t0
            count += meta["count"]
            checksum += meta["checksum"]
            tokens += meta["tokens"]
        wall = time.perf_counter() - t0
        out.append(
            {
                "epoch": e,
                "first_batch_s": first,
                "epoch_s": wall,
                "samples": count,
                "tokens": tokens,
                "samples_per_s": count / wall,
                "tokens_per_s": tokens / wall,
                "intact": count == expected["count"] and checksum == expected["checksum"],
            }
        )
    return out


def _loader(p: Params, fmt: str, root: Path, *, num_workers: int, persistent: bool, pin_memory: bool):
    return make_loader(
        fmt,
        root,
        batch_size=p.batch_size,
        seq_len=p.seq_len,
        num_workers=num_workers,
        prefetch_factor=p.prefetch_factor,
        persistent=persistent,
        pin_memory=pin_memory,
    )


def loader_sweep(p: Params, root: Path, expected: dict, written: dict) -> list[dict]:
    """Every format × worker count (× persistent workers when > 0), warm cache, plus one cold
    epoch per format at ``num_workers=0`` with its eviction verified."""
    from ...timing import progress

    pin = p.device == "cuda"
    points = [
        (fmt, w, pers)
        for fmt in p.formats
        for w in p.num_workers
        for pers in ((False, True) if w > 0 else (False,))
    ]
    rows = []
    for fmt, workers, persistent in progress(points, "loader sweep"):
        loader = _loader(p, fmt, root, num_workers=workers, persistent=persistent, pin_memory=pin)
        cpu0 = _cpu_seconds()
        epochs = run_epochs(loader, p.epochs, expected)
        del loader
        cpu = _cpu_seconds() - cpu0
        for e in epochs:
            rows.append(
                {
                    "format": fmt,
                    "num_workers": workers,
                    "persistent_workers": persistent,
                    "cache": "warm",
                    "pin_memory": pin,
                    **e,
                    "mib_per_s": mib_per_s(written[fmt]["bytes"], e["epoch_s"]),
                    "cpu_s_all_epochs": cpu,
                }
            )
    if p.cold:
        for fmt in p.formats:
            files = format_files(fmt, root)
            evict(files)
            sample = files[:: max(1, len(files) // 20)]
            resident = float(np.mean([resident_fraction(f) for f in sample]))
            loader = _loader(p, fmt, root, num_workers=0, persistent=False, pin_memory=pin)
            e = run_epochs(loader, 1, expected)[0]
            rows.append(
                {
                    "format": fmt,
                    "num_workers": 0,
                    "persistent_workers": False,
                    "cache": "cold",
                    "pin_memory": pin,
                    **e,
                    "mib_per_s": mib_per_s(written[fmt]["bytes"], e["epoch_s"]),
                    "cpu_s_all_epochs": None,
                    "resident_after_evict": resident,
                }
            )
    return rows


# ---------------------------------------------------------------------------- stall runs
def stall_run(p: Params, root: Path, fmt: str | None, *, emulated_step_s: float = 0.0) -> dict:
    """Train the reference model on batches from ``fmt`` (or pre-loaded in memory when None):
    per step, the time blocked waiting for the batch and the compute time. With
    ``emulated_step_s`` the step is a timed wait instead (an accelerator-speed step: time
    passes, no core is busy), with ``num_workers=0`` so that loading sits inside the step."""
    import torch

    from ...config import preset
    from ...model import GPT
    from ...timing import synchronize

    device = p.device
    cfg = preset(p.stall_preset).with_(seq_len=p.seq_len, vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg, attn_impl="sdpa").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    workers = 0 if emulated_step_s else max(p.num_workers)
    if fmt is None:
        loader = _loader(p, p.formats[0], root, num_workers=0, persistent=False, pin_memory=False)
        cached = [b for b, _ in loader][: p.stall_steps + 1]
        batches = iter(cached * (1 + p.stall_steps // max(len(cached), 1)))
    else:
        loader = _loader(p, fmt, root, num_workers=workers, persistent=True, pin_memory=device == "cuda")
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
            _, loss = model(x[:, :-1], x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            synchronize(device)
        t2 = time.perf_counter()
        checkpoint = bool(
            p.checkpoint_every and fmt is None and not emulated_step_s and (i + 1) % p.checkpoint_every == 0
        )
        if checkpoint:
            torch.save(model.state_dict(), ckpt)  # synchronous write inside the step (B12)
            with open(ckpt, "rb") as f:
                os.fsync(f.fileno())
        t3 = time.perf_counter()
        steps.append(
            {
                "step": i,
                "wait_s": t1 - t0,
                "compute_s": t2 - t1,
                "checkpoint": checkpoint,
                "checkpoint_s": t3 - t2 if checkpoint else 0.0,
                "step_s": t3 - t0,
            }
        )
    return {
        "format": fmt or "in-memory",
        "num_workers": 0 if fmt is None else workers,
        "compute": "emulated compute" if emulated_step_s else "real compute",
        "steps": steps,
    }


def _forever(loader):
    while True:
        yield from loader


def measure(p: Params) -> dict:
    """Everything the study measures on this machine (see the module docstring)."""
    p = p.prepared()
    root = Path(p.scratch_dir).resolve()
    samples = synthetic_corpus(
        n_samples=p.n_samples, mean_bytes=p.mean_bytes, length_sigma=p.length_sigma, seed=p.seed
    )
    check_free_space(root, estimate_bytes(samples) * len(p.formats))
    expected = corpus_checksum(samples)
    rec = {
        "study": STUDY,
        "params": p.to_dict(),
        "device": p.device,
        "benchmark_version": BENCHMARK_VERSION,
        "device_name": hardware.device_name(p.device),
        "usable_cpus": hardware.usable_cpus(),
        "corpus": {**expected, "bytes_of_text": int(sum(len(s["text"]) for s in samples))},
    }
    rec["written"] = {
        fmt: write_format(fmt, samples, root, shard_samples=p.shard_samples) for fmt in p.formats
    }
    del samples
    rec["sweep"] = loader_sweep(p, root, expected, rec["written"])
    rec["stall"] = [stall_run(p, root, None)] + [stall_run(p, root, fmt) for fmt in p.formats]
    if p.stall_emulated_step_s:
        rec["stall"] += [
            stall_run(p, root, fmt, emulated_step_s=p.stall_emulated_step_s) for fmt in p.formats
        ]
    return rec
