"""The disk under the corpus, characterised before B11's cold rounds are read against it: which
block device it is (from ``/sys``) and two cold readings of a probe file written next to the
corpus, its pages evicted before each (``cache.evict``):

- sequential read bandwidth, 1 MiB reads front to back (what a tar shard's reader does);
- 4 KiB random-read latency, ``pread`` at random 4 KiB-aligned offsets one after another (what
  opening and reading each small file costs at least, once its metadata is found).

Units: MB/s = 1e6 bytes per second; latencies in µs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mfulab.studies.dataloader.cache import evict
from mfulab.units import MB, MIB

BLOCK_BYTES = 4096
SEQUENTIAL_READ_BYTES = MIB


def block_device(path) -> dict:
    """The block device holding ``path``: its name, model, driver, whether the kernel flags it
    rotational (a virtual disk often is, whatever is behind it), and its size; ``name`` None
    where ``/sys`` does not tell (an overlay or network file system)."""
    dev = os.stat(path).st_dev
    sys_dir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not sys_dir.exists():
        return {"name": None, "model": None, "driver": None, "rotational": None, "size_bytes": None}
    sys_dir = sys_dir.resolve()
    disk = sys_dir.parent if (sys_dir / "partition").exists() else sys_dir  # a partition's disk

    def read(rel):
        try:
            return (disk / rel).read_text().strip()
        except OSError:
            return None

    rotational, sectors = read("queue/rotational"), read("size")
    try:  # the driver names what a model string does not: virtio_blk, nvme, sd
        driver = (disk / "device" / "driver").resolve().name
    except OSError:
        driver = None
    return {
        "name": disk.name,
        "model": read("device/model") or read("device/name"),
        "driver": driver,
        "rotational": None if rotational is None else rotational == "1",
        "size_bytes": None if sectors is None else int(sectors) * 512,  # /sys counts 512-byte sectors
    }


def probe(root: Path, *, size_bytes: int, random_reads: int, seed: int = 0) -> dict:
    """Write a ``size_bytes`` probe file in ``root`` (fsync), then read it cold twice: front to
    back in 1 MiB reads (MB/s), and ``random_reads`` 4 KiB reads at random aligned offsets (µs
    each: median and 90th percentile). The file is removed afterwards."""
    import numpy as np

    rng = np.random.default_rng(seed)
    path = Path(root) / "disk-probe.bin"
    try:
        with open(path, "wb") as f:
            f.write(rng.integers(0, 256, size_bytes, dtype=np.uint8).tobytes())
            f.flush()
            os.fsync(f.fileno())
        evict([path], flush=False)
        fd = os.open(path, os.O_RDONLY)
        try:
            t0 = time.perf_counter()
            while os.read(fd, SEQUENTIAL_READ_BYTES):
                pass
            sequential_s = time.perf_counter() - t0
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            offsets = rng.integers(0, size_bytes // BLOCK_BYTES, random_reads) * BLOCK_BYTES
            latencies_us = []
            for offset in offsets:
                t0 = time.perf_counter()
                os.pread(fd, BLOCK_BYTES, int(offset))
                latencies_us.append((time.perf_counter() - t0) * 1e6)
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)
    return {
        "device": block_device(root),
        "probe_bytes": size_bytes,
        "sequential_MB_per_s": size_bytes / sequential_s / MB,
        "random_reads": random_reads,
        "random_4k_median_us": float(np.median(latencies_us)),
        "random_4k_p90_us": float(np.percentile(latencies_us, 90)),
    }


def describe(records) -> str:
    """One sentence for the notebook and B11's evidence (empty without a probe)."""
    d = records.get("disk")
    if not d:
        return ""
    dev = d["device"]
    kind = {True: "flagged rotational", False: "flagged non-rotational", None: "not flagged"}[
        dev["rotational"]
    ]
    what = ", ".join(x for x in (dev["model"], dev.get("driver") and f"driver {dev['driver']}", kind) if x)
    name = f"{dev['name']} ({what})" if dev["name"] else "device unknown"
    virtual = "virtio" in (dev.get("driver") or "") or "virtio" in (dev["name"] or "")
    return (
        f"the disk: {name}; cold, {d['sequential_MB_per_s']:.0f} MB/s sequential (1 MiB reads of "
        f"{d['probe_bytes'] / MIB:.0f} MiB) and {d['random_4k_median_us']:.0f} µs per 4 KiB random read "
        f"(median of {d['random_reads']}; 90th percentile {d['random_4k_p90_us']:.0f} µs)"
        + (
            ". A virtual disk: the host below it may still cache what this machine evicted, so 'cold' "
            "means cold inside this machine, not a cold device (a bare NVMe or a network file system "
            "would read slower)"
            if virtual
            else ""
        )
    )
