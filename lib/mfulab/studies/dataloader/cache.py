"""Page-cache control and file-open counting for the ``dataloader`` study.

- ``evict`` drops a file's pages from the page cache with ``posix_fadvise(DONTNEED)`` (no root
  needed); ``resident_fraction`` checks with ``mincore(2)`` that it took effect. Only data
  pages go: the kernel keeps dentries and inodes, so such an epoch re-reads every byte from the
  disk but not the directory entries and inodes, the lookups small files multiply.
- ``drop_metadata`` drops those too (``vm.drop_caches = 2``), where the process may write it
  (root, a writable ``/proc/sys``); it is system-wide, and says whether it happened.
- ``count_opens`` counts the files opened under a folder while it is active, from Python's
  ``open`` audit event (``builtins.open``, ``io.open``, ``os.open``; a reader that opens
  files in C++, such as Arrow's, is not seen).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys


def evict(paths, *, flush: bool = True) -> None:
    """Drop the files' pages from the page cache (``posix_fadvise(DONTNEED)``). Dirty pages
    cannot be dropped, so with ``flush`` each file is written to disk first (``fsync``); a
    file that was flushed once and not written since can skip it."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            if flush:
                os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_metadata(path: str = DROP_CACHES) -> bool:
    """Drop the kernel's clean directory entries and inodes, every file system's (``sync``, then
    ``2`` into ``vm.drop_caches``; the kernel documents it in Documentation/admin-guide/sysctl/
    vm.rst): the next open of each file looks it up on the disk again, as on a node that has not
    read the corpus. False, with nothing dropped, where the file cannot be written (not root, a
    read-only ``/proc/sys`` in a container)."""
    if not os.access(path, os.W_OK):
        return False
    os.sync()  # dirty inodes cannot be dropped
    try:
        with open(path, "w") as f:
            f.write("2\n")
    except OSError:
        return False
    return True


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


def sampled_resident_fraction(paths, samples: int = 20) -> float:
    """Mean resident fraction of up to ``samples`` files spread evenly over ``paths``."""
    paths = list(paths)
    picked = paths[:: max(1, len(paths) // samples)]
    return sum(resident_fraction(p) for p in picked) / len(picked) if picked else 0.0


class _OpenCounter:
    """The state of the one audit hook (hooks cannot be removed, so it is installed once and
    does nothing while no folder is watched)."""

    installed = False
    prefix: str | None = None
    count = 0

    @classmethod
    def hook(cls, event, args):
        if event != "open" or cls.prefix is None or not args:
            return
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)).startswith(
            cls.prefix
        ):
            cls.count += 1


class OpenCount:
    """What :func:`count_opens` yields: ``n``, the files opened so far under the folder."""

    def __init__(self):
        self.n = 0


@contextlib.contextmanager
def count_opens(folder):
    """Count the files opened (from Python, in this process) under ``folder`` inside the block."""
    if not _OpenCounter.installed:
        sys.addaudithook(_OpenCounter.hook)
        _OpenCounter.installed = True
    if _OpenCounter.prefix is not None:
        raise RuntimeError("count_opens does not nest")
    result = OpenCount()
    _OpenCounter.prefix, _OpenCounter.count = os.path.abspath(folder) + os.sep, 0
    try:
        yield result
    finally:
        result.n, _OpenCounter.prefix = _OpenCounter.count, None
