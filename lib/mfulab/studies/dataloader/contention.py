"""B12's mechanism as the case study tells it (article B §5.3): the checkpoint write "blocked the
background IO path and took the DataLoader's disk bandwidth". Measured as that: cold reads of
the small-file loader's files (open, read, parse each JSON file; their pages evicted first, and
their directory entries and inodes where ``drop_metadata`` may) in interleaved rounds, under
three conditions:

- ``alone``;
- ``disk writer``: beside a process that writes and ``fsync``-s chunks to the same disk, as a
  checkpoint does (a background checkpoint writes the same bytes, only the step no longer
  waits for them);
- ``memory writer``: the same process writing into memory (``/dev/shm``), which costs the
  readers the writer's CPU time but no disk, paced at the disk writer's own rate (timed alone
  before the rounds) so that both writers copy the same bytes per second.

The disk's part of the slowdown is the reads beside the disk writer over the reads beside the
memory writer, paired by round; the memory writer over ``alone`` is the CPU's part.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mfulab.errors import ParameterError
from mfulab.measure.timing import Timing, compare_timings, summarize
from mfulab.studies.dataloader.cache import drop_metadata, evict
from mfulab.studies.dataloader.params import CONTENTION_DRIFT, Params
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import MB, MIB

ALONE, DISK, MEMORY = "alone", "disk writer", "memory writer"
SHM = Path("/dev/shm")

# The writer: writes a random chunk and fsync-s it, again and again (starting over past
# ``limit`` bytes so the file stays bounded), at most ``rate`` bytes/s (0: as fast as it can),
# until SIGTERM; then prints the bytes it wrote. It says "ready" once its first chunk is on the
# disk, so the reads start with the writing underway.
_WRITER = r"""
import os, signal, sys, time
path, chunk, limit, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
buf, total, size = os.urandom(chunk), 0, 0
with open(path, "wb", buffering=0) as f:
    while not stop:
        if total == chunk:
            print("ready", flush=True)
            t0 = time.perf_counter()
        if size >= limit:
            f.seek(0)
            f.truncate()
            size = 0
        if rate and total > chunk:  # paced: the chunks after the first at most `rate` bytes/s
            time.sleep(max(0.0, (total - chunk) / rate - (time.perf_counter() - t0)))
        f.write(buf)
        os.fsync(f.fileno())
        total, size = total + chunk, size + chunk
print(total, flush=True)
"""


def _read_files(paths) -> float:
    """Seconds to open, read and parse every JSON file, one after another (num_workers=0)."""
    import json

    t0 = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            json.loads(f.read())
    return time.perf_counter() - t0


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _file_bound(folder: Path, chunk_bytes: int) -> int:
    """Bytes the writer's file may grow to in ``folder``: 64 chunks, at most half its free space
    (a container's /dev/shm can be 64 MB); 0 where not even one chunk fits."""
    st = os.statvfs(folder)
    chunks = min(64, st.f_bavail * st.f_frsize // 2 // chunk_bytes)
    return int(chunks * chunk_bytes)


def _reads_beside_writer(paths, target: Path, chunk_bytes: int, rate: float = 0.0) -> tuple[float, int]:
    """The reads while a writer process writes into ``target`` at most ``rate`` bytes/s (0: as
    fast as it can): (seconds, bytes it wrote then). Without ``paths``, one second of writing
    alone (the disk writer's own rate)."""
    bound = max(_file_bound(target.parent, chunk_bytes), chunk_bytes)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(target), str(chunk_bytes), str(bound), str(rate)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if writer.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the checkpoint writer did not start (exit code {writer.poll()})")
        seconds = _read_files(paths) if paths else _sleep(1.0)
        writer.terminate()
        out, _ = writer.communicate(timeout=60)
        return seconds, int(out.split()[-1]) - chunk_bytes  # the first chunk went before the reads
    finally:
        if writer.poll() is None:  # Ctrl-C or an error: the writer does not outlive the run
            writer.kill()
            writer.wait()
        target.unlink(missing_ok=True)


def contention_rounds(p: Params, root: Path) -> dict:
    """``p.contention_rounds`` rounds of the three conditions in a shuffled order (the same
    JSON files each time); per read: the condition, the round, seconds, the bytes the writer
    wrote during it. The memory writer is left out where ``/dev/shm`` cannot be written."""
    import numpy as np

    from mfulab.measure.dataformats import format_files
    from mfulab.measure.timing import progress

    paths = format_files("json_files", root)[: p.contention_files]
    chunk = int(p.contention_chunk_mib * MIB)
    if not _file_bound(root, chunk):
        raise ParameterError(
            f"contention_chunk_mib: {p.contention_chunk_mib} MiB do not fit twice on {root}'s disk"
        )
    targets = {DISK: root / "contention-checkpoint.bin"}
    if SHM.is_dir() and os.access(SHM, os.W_OK) and _file_bound(SHM, chunk):
        targets[MEMORY] = SHM / f"mfulab-contention-{os.getpid()}.bin"
    conditions = [ALONE, *targets]
    seconds, written = _reads_beside_writer([], targets[DISK], chunk)  # the disk writer alone
    rates = {DISK: 0.0, MEMORY: written / seconds}  # the memory writer paced at the disk's rate
    rng = np.random.default_rng(p.seed + 2)
    evict(paths, flush=True)  # once: clean pages can be dropped before every read below
    rows, dropped = [], []
    for rnd in progress(range(p.contention_rounds), "reads beside a checkpoint write"):
        for i in rng.permutation(len(conditions)):
            condition = conditions[i]
            evict(paths, flush=False)
            dropped.append(p.drop_metadata and drop_metadata())
            if condition == ALONE:
                seconds, written = _read_files(paths), 0
            else:
                seconds, written = _reads_beside_writer(paths, targets[condition], chunk, rates[condition])
            rows.append({"condition": condition, "round": rnd, "seconds": seconds, "written_bytes": written})
    return {
        "files": len(paths),
        "chunk_bytes": chunk,
        "memory_writer_pace_bytes_per_s": rates[MEMORY],
        "metadata_dropped": bool(dropped) and all(dropped),
        "rows": rows,
    }


# ---------------------------------------------------------------------------- analysis
def timings(records) -> dict[str, Timing]:
    """Seconds of each condition's reads, paired by round."""
    rows = sorted(records["contention"]["rows"], key=lambda r: r["round"])
    present = [c for c in (ALONE, DISK, MEMORY) if any(r["condition"] == c for r in rows)]
    return {
        c: summarize([r["seconds"] for r in rows if r["condition"] == c], label=c, paired=True)
        for c in present
    }


def contention_table(records):
    """Per condition: median seconds of the reads, µs per file, the slowdown over ``alone`` and
    the writer's median MB/s during the reads (MB = 1e6 bytes)."""
    import pandas as pd

    c = records["contention"]
    t = timings(records)
    rows = []
    for condition, timing in t.items():
        mine = [r for r in c["rows"] if r["condition"] == condition]
        rates = sorted(r["written_bytes"] / r["seconds"] / MB for r in mine)
        rows.append(
            {
                "condition": condition,
                "median_s": timing.median_s,
                "us_per_file": timing.median_s / c["files"] * 1e6,
                "over_alone": timing.median_s / t[ALONE].median_s,
                "writer_MB_per_s": rates[len(rates) // 2],
            }
        )
    return pd.DataFrame(rows)


def disk_over_reference(records):
    """The reads' time beside the disk writer over beside the memory writer (alone where there is
    no /dev/shm), paired, widened by ``contention_drift``: the ratio B12's rows read."""
    t = timings(records)
    reference = MEMORY if MEMORY in t else ALONE
    drift = records["params"].get("contention_drift", CONTENTION_DRIFT)
    return compare_timings(t[DISK], t[reference], run_to_run_drift=drift)


def b12_mechanism(records) -> Claim:
    """*Shown* (a toy regime: one local disk, a few MB of reads) when the reads beside the disk
    writer are slower than beside the memory writer, the paired interval above 1; *not shown*
    below 1; inconclusive otherwise. Without ``/dev/shm`` the reference is ``alone``, and the
    writer's CPU share is not separated (the evidence says so)."""
    c = records["contention"]
    t = timings(records)
    reference = MEMORY if MEMORY in t else ALONE
    disk = disk_over_reference(records)  # ratio: disk / reference
    drift = disk.run_to_run_drift
    table = contention_table(records).set_index("condition")
    cpu_part = (
        f"the memory writer alone costs the reads {table.over_alone[MEMORY]:.2f}× (its CPU share)"
        if MEMORY in t
        else "no /dev/shm here: the writer's CPU share is not separated"
    )
    metadata = "directory entries and inodes dropped too" if c["metadata_dropped"] else "inodes cached"
    return Claim(
        "B12",
        "a concurrent checkpoint write slows the DataLoader's reads from the same disk (the case study's "
        "cause of its spikes, §5.3: it took the loader's disk bandwidth)",
        f"cold reads of {c['files']} small JSON files (pages evicted, {metadata}), alone and beside a "
        f"process writing and fsync-ing {c['chunk_bytes'] / MIB:g} MiB chunks to the same disk or to memory, "
        f"{len(t[DISK].times_s)} interleaved rounds",
        verdicts.verdict_from_interval(disk.ratio_lo, disk.ratio_hi, threshold=1.0),
        f"reads beside the disk writer take {disk.ratio:.2f}× [{disk.ratio_lo:.2f}, {disk.ratio_hi:.2f}] "
        f"their time {'beside the memory writer' if reference == MEMORY else 'alone'} (widened by "
        f"±{drift:.0%}); {cpu_part}; the writer put "
        f"{table.writer_MB_per_s[DISK]:.0f} MB/s on the disk meanwhile"
        + (_pace_text(c, table) if MEMORY in t else "")
        + ". What a slow-down shows is I/O contention of some kind: these reads are small and bound by "
        "latency, and a disk writer also costs the kernel's writeback and the disk's interrupts, which "
        "this run does not separate from the bandwidth the claim names. A background checkpoint writes the "
        "same bytes to the same disk: it takes the wait out of the step, not the disk from the loader, "
        "unless it writes elsewhere (the article's own recipe, §4.2, writes to local NVMe and uploads in the "
        "background: a loader reading from a network file system then shares no disk with it) "
        "(tables/contention.csv)",
        basis=verdicts.TOY,
    )


def _pace_text(c: dict, table) -> str:
    """How closely the memory writer's bytes matched the disk writer's (older records: unpaced)."""
    pace = c.get("memory_writer_pace_bytes_per_s")
    memory = table.writer_MB_per_s[MEMORY]
    if not pace:
        return f" (the memory writer {memory:.0f} MB/s: the two writers are not matched)"
    return (
        f" (the memory writer {memory:.0f} MB/s, paced at the disk writer's {pace / MB:.0f} MB/s timed alone "
        f"before the rounds: {memory / table.writer_MB_per_s[DISK]:.2f}× its bytes during the reads)"
    )


def contention_spike_text(records) -> str:
    """B12's size read as §5.3 states its cause, the write taking the loader's disk bandwidth, as a
    sensitivity: a loader whose reads hold the step for ``wait`` adds wait · (ratio − 1) when they
    slow by ``ratio``, so the article's 3 s needs ratio = 1 + 3 s / wait: with all of §5.1's 1.5 s
    exposed, or only the 0.3 s the step fell at §5.2's loader change (the spikes came on day ten,
    after it). This run's contention factor is set beside them as a toy, deciding neither reading.
    Empty without the contention records."""
    if "contention" not in records:
        return ""
    from mfulab.studies.dataloader.stated import B2_STATED, B12_STATED
    from mfulab.studies.dataloader.training_gain import case_study_gain

    ratio = disk_over_reference(records).ratio
    wait_s, sync_s = B2_STATED["case_study_wait_s"], B12_STATED["sync_spike_s"]
    c = case_study_gain()
    exposed_after_s = c["step_before_s"] - c["step_after_s"]  # at most what the step fell at step 4
    return (
        f". Read as §5.3 states its cause, the write taking the loader's disk bandwidth over several steps "
        f"(几步明显变慢), as a sensitivity: {sync_s:g} s needs the loader's reads "
        f"{1 + sync_s / wait_s:.0f}× slower if all of §5.1's {wait_s:g} s wait was still exposed, "
        f"{1 + sync_s / exposed_after_s:.0f}× if only the {exposed_after_s:.1f} s the step fell at the "
        f"loader change was (the spikes came on day ten, after it). This box's toy (small cold JSON files on "
        f"one virtio disk, not the tar shards the case study read by then) slowed {ratio:.2f}× beside a "
        "writer: a toy factor, not a measure of an NVMe array under a checkpoint, so it decides neither "
        "reading. Both slowdowns assume reads on the step's critical path (an inline loader); the "
        "article's 12 prefetching workers, 48 batches ahead, hide any slowdown smaller than their "
        "headroom over the step (one loader process here reads tens of times what a rank needs, §3), "
        "so under its own DataLoader the stated cause needs far more. An asynchronous write to the same "
        "disk would leave such contention where it was; §4.2's "
        "recipe writes to local NVMe and uploads in the background, off the loader's disk"
    )
