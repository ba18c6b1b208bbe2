"""Measurement of the ``dataloader`` study (torch, headless): write the corpus in every
format, read it warm under every loader setting, read it cold in interleaved rounds, and
time the data stall and the checkpoint spike of a training loop (``stall``).

Timing is interleaved wherever two things are compared (docs/architecture.md):
- warm: one epoch of every loader setting per round, in an order shuffled per round
  (``epoch`` is the round);
- cold (B11): one epoch of every format per round (``num_workers=0``), shuffled per round,
  each format's pages evicted from the page cache (``cache.evict``) just before its epoch and
  checked with ``mincore``, and with ``drop_metadata`` the kernel's directory entries and
  inodes dropped too where this process may (``cache.drop_metadata``: root only); the files
  each epoch opens are counted (``cache.count_opens``) for the per-file latency emulation of
  ``analysis``.

Units: ``mib_per_s`` is MiB/s (2**20 bytes per second) of the format's bytes on disk.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from mfulab.errors import ParameterError
from mfulab.measure import calibration, host
from mfulab.measure.corpus import check_free_space, corpus_checksum, estimate_bytes, synthetic_corpus
from mfulab.measure.dataformats import format_files, unavailable_formats, write_format
from mfulab.studies.dataloader.cache import count_opens, drop_metadata, evict, sampled_resident_fraction
from mfulab.studies.dataloader.contention import contention_rounds
from mfulab.studies.dataloader.disk import probe as disk_probe
from mfulab.studies.dataloader.formats import loader_for
from mfulab.studies.dataloader.hiding import hiding_rounds
from mfulab.studies.dataloader.params import Params
from mfulab.studies.dataloader.prefetch import prefetch_rounds
from mfulab.studies.dataloader.stall import checkpoint_spike, stall_run
from mfulab.units import MIB

STUDY = "dataloader"
# loader 2: rows carry mib_per_s (was mb_per_s, also MiB/s); loader 3: interleaved warm epochs and
# cold rounds; loader 4: JSONL reads through one open handle per process (was an open per sample);
# stall 2: checkpoints in every real-compute run, checkpoint A/B interleaved (B12); stall 3: the
# A/B on a short step (checkpoint_batch_rows), and the fsync write bandwidth (B12's magnitude);
# stall 4: each step's model FLOPs and the calibration's ceiling (B2's useful compute)
BENCHMARK_VERSION = {
    "loader": 4,
    "stall": 5,
    "hiding": 1,
    "prefetch": 1,
    "image_decode": 1,
    "tar_readers": 1,
    "tokenizer": 1,
}


def mib_per_s(n_bytes: float, seconds: float) -> float:
    """Bytes per second in MiB/s (1 MiB = 2**20 bytes)."""
    return n_bytes / MIB / seconds


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


def loader_sweep(p: Params, root: Path, expected: dict, written: dict) -> list[dict]:
    """Every format × worker count (× persistent workers when > 0), warm page cache,
    ``p.epochs`` rounds: one epoch of every setting per round, in a shuffled order. A
    persistent loader keeps its workers between its epochs; the others start new ones."""
    from mfulab.measure.timing import progress

    pin = p.device == "cuda"
    points = [
        (fmt, w, pers)
        for fmt in p.formats
        for w in p.num_workers
        for pers in ((False, True) if w > 0 else (False,))
    ]
    loaders = {
        pt: loader_for(p, pt[0], root, num_workers=pt[1], persistent=pt[2], pin_memory=pin) for pt in points
    }
    rng = np.random.default_rng(p.seed)
    rows = []
    try:
        for epoch in progress(range(p.epochs), "loader sweep (warm, interleaved settings)"):
            for i in rng.permutation(len(points)):
                fmt, workers, persistent = points[i]
                e = run_epochs(loaders[points[i]], 1, expected)[0]
                rows.append(
                    {
                        "format": fmt,
                        "num_workers": workers,
                        "persistent_workers": persistent,
                        "cache": "warm",
                        "pin_memory": pin,
                        **e,
                        "epoch": epoch,
                        "mib_per_s": mib_per_s(written[fmt]["bytes"], e["epoch_s"]),
                    }
                )
    finally:
        loaders.clear()  # persistent workers exit with their loader
    return rows


def cold_rounds(p: Params, root: Path, expected: dict, written: dict) -> list[dict]:
    """``p.cold_rounds`` rounds; in each, every format is read once at ``num_workers=0`` in a
    shuffled order, its files evicted from the page cache just before its epoch (the loader
    is built first, so what a reader indexes when built is not part of the epoch). Per epoch:
    the resident fraction after eviction (sampled files), whether the directory entries and
    inodes were dropped too (``p.drop_metadata``, where permitted) and the files the epoch opened."""
    from mfulab.measure.timing import progress

    pin = p.device == "cuda"
    evict([f for fmt in p.formats for f in format_files(fmt, root)], flush=True)  # clean pages only
    rng = np.random.default_rng(p.seed + 1)
    rows = []
    for rnd in progress(range(p.cold_rounds), "cold rounds (interleaved formats)"):
        for i in rng.permutation(len(p.formats)):
            fmt = p.formats[i]
            loader = loader_for(p, fmt, root, num_workers=0, persistent=False, pin_memory=pin)
            files = format_files(fmt, root)
            evict(files, flush=False)
            resident = sampled_resident_fraction(files)
            metadata_dropped = p.drop_metadata and drop_metadata()  # after mincore's own opens
            with count_opens(Path(root) / fmt) as opened:
                e = run_epochs(loader, 1, expected)[0]
            rows.append(
                {
                    "format": fmt,
                    "num_workers": 0,
                    "persistent_workers": False,
                    "cache": "cold",
                    "pin_memory": pin,
                    **e,
                    "epoch": rnd,
                    "mib_per_s": mib_per_s(written[fmt]["bytes"], e["epoch_s"]),
                    "resident_after_evict": resident,
                    "metadata_dropped": metadata_dropped,
                    "files_opened": opened.n,
                }
            )
    return rows


def _dev_shm_bytes() -> int | None:
    """The size of /dev/shm here (what a worker's shared-memory batches can use), or None."""
    import os

    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def measure(p: Params) -> dict:
    """Everything the study measures on this machine (see the module docstring)."""
    p = p.prepared()
    dropped = unavailable_formats(p.formats)  # left out with the reason, not a crash midway
    if dropped:
        kept = [f for f in p.formats if f not in dropped]
        if not kept:
            raise ParameterError(f"formats: none can be written here ({dropped})")
        p = dataclasses.replace(p, formats=tuple(kept))
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
        "device_name": host.device_name(p.device),
        "usable_cpus": host.usable_cpus(),
        "corpus": {**expected, "bytes_of_text": int(sum(len(s["text"]) for s in samples))},
        "formats_dropped": dropped,
        "dev_shm_bytes": _dev_shm_bytes(),
    }
    rec["written"] = {
        fmt: write_format(fmt, samples, root, shard_samples=p.shard_samples) for fmt in p.formats
    }
    if p.tokenizer_rounds:
        from mfulab.studies.dataloader.text_job import tokenizer_probe

        rec["tokenizer"] = tokenizer_probe(
            [s["text"] for s in samples], vocab_size=p.tokenizer_vocab, rounds=p.tokenizer_rounds, seed=p.seed
        )
    del samples
    if p.disk_probe_mib:
        rec["disk"] = disk_probe(
            root, size_bytes=int(p.disk_probe_mib * MIB), random_reads=p.disk_random_reads, seed=p.seed
        )
    rec["sweep"] = loader_sweep(p, root, expected, rec["written"])
    if p.cold:
        rec["sweep"] += cold_rounds(p, root, expected, rec["written"])
    # B2's useful compute: the stall runs' model FLOPs at this machine's matmul ceiling
    import torch

    cal = calibration.get(
        p.calibration, device=p.device, parts=["matmul:fp32"], num_threads=torch.get_num_threads()
    )
    rec["ceiling"], rec["calibration"] = cal["matmul:fp32"], cal["_meta"]
    rec["stall"] = [stall_run(p, root, None)] + [stall_run(p, root, fmt) for fmt in p.formats]
    if p.stall_emulated_step_s:
        rec["stall"] += [
            stall_run(p, root, fmt, emulated_step_s=p.stall_emulated_step_s) for fmt in p.formats
        ]
    for run in rec["stall"]:  # each run carries the ceiling its useful compute is read against
        run["ceiling_flops_per_s"] = rec["ceiling"]["best_flops_per_s"]
    rec["checkpoint"] = checkpoint_spike(p, root)
    if p.contention_rounds and "json_files" in p.formats:
        rec["contention"] = contention_rounds(p, root)
    if p.tar_reader_rounds and {"json_files", "tar"} <= set(p.formats):
        from mfulab.studies.dataloader.tar_readers import reader_rounds

        rec["tar_readers"] = reader_rounds(root, rounds=p.tar_reader_rounds, seed=p.seed)
    if p.hiding_workers and "json_files" in p.formats:
        rec["hiding"] = hiding_rounds(p, root)
    if p.prefetch_factors:
        rec["prefetch"] = prefetch_rounds(p)
    if p.decode_images:
        from mfulab.studies.dataloader.image_job import decode_probe

        rec["image_decode"] = decode_probe(images=p.decode_images, rounds=p.decode_rounds, seed=p.seed)
    return rec
