"""Five storage formats of a token corpus (``corpus``): a writer and a reader per format, the
torch Datasets around the readers, the collate function and ``make_loader``.

Formats (each with a writer and a reader yielding the same ``(key, tokens)`` samples):
``json_files`` (one JSON file per sample — the many-small-files case), ``jsonl`` (one file,
a line per sample), ``tar`` (webdataset tar shards), ``memmap`` (nanoGPT-style packed
uint16 tokens plus an offset index) and ``parquet`` (pyarrow, one row group per shard).

Errors: a malformed or truncated input raises :class:`DataError` naming the file (and the
line, offset, row group or sample key); nothing is skipped silently.

Every class here is defined at module level and pickles, so a ``DataLoader`` with worker
processes works under the ``spawn`` start method too (the macOS default, and the one to use
with CUDA), not only under ``fork``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.utils.data as tud

from mfulab.errors import ParameterError
from mfulab.measure.corpus import FORMATS, sample_checksum, tokenize


class DataError(RuntimeError):
    """A sample could not be read: the message names the file and where in it."""


TAR_MTIME = 0  # every tar member's modification time (an integer: no PAX header; see write_format)
FORMAT_PACKAGES = {"tar": "webdataset", "parquet": "pyarrow"}  # the formats an import away


def unavailable_formats(formats) -> dict[str, str]:
    """Each of ``formats`` whose writer/reader package is not installed, with the reason (a
    bare GPU image has neither webdataset nor pyarrow)."""
    import importlib.util

    def missing(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):  # a blocked import (sys.modules[module] = None)
            return True

    return {
        fmt: f"{FORMAT_PACKAGES[fmt]} is not installed"
        for fmt in formats
        if fmt in FORMAT_PACKAGES and missing(FORMAT_PACKAGES[fmt])
    }


# ---------------------------------------------------------------------------- writers
def write_format(fmt: str, samples, root: Path, *, shard_samples: int) -> dict:
    """Write ``samples`` in ``fmt`` under ``root/fmt``; returns files, bytes and seconds."""
    d = Path(root) / fmt
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    if fmt == "json_files":
        for s in samples:
            (d / f"{s['key']}.json").write_text(json.dumps(s))
    elif fmt == "jsonl":
        with open(d / "data.jsonl", "w") as f:
            for s in samples:
                f.write(json.dumps(s) + "\n")
    elif fmt == "tar":
        import webdataset as wds

        for start in range(0, len(samples), shard_samples):
            # an integer mtime: webdataset's default (the float time.time()) makes Python's tarfile
            # add a PAX header (two 512-B blocks) to every member, 1 KiB a sample on top of the
            # 512-B ustar header; GNU tar and an integer mtime write none (and the shards repeat)
            path = str(d / f"shard-{start // shard_samples:06d}.tar")
            with wds.TarWriter(path, mtime=TAR_MTIME) as sink:
                for s in samples[start : start + shard_samples]:
                    sink.write({"__key__": s["key"], "txt": s["text"]})
    elif fmt == "memmap":
        toks = [tokenize(s["text"]) for s in samples]
        lengths = np.array([len(t) for t in toks], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        np.concatenate(toks).astype(np.uint16).tofile(d / "tokens.bin")
        np.save(d / "index.npy", np.stack([offsets, lengths], axis=1))
        (d / "keys.json").write_text(json.dumps([s["key"] for s in samples]))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"key": [s["key"] for s in samples], "text": [s["text"] for s in samples]})
        pq.write_table(table, d / "data.parquet", row_group_size=shard_samples)
    else:
        raise ParameterError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    seconds = time.perf_counter() - t0
    files = [p for p in d.rglob("*") if p.is_file()]
    return {
        "format": fmt,
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "write_s": seconds,
    }


def format_files(fmt: str, root: Path) -> list[Path]:
    return sorted(p for p in (Path(root) / fmt).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- readers
def _worker_slice(items):
    info = tud.get_worker_info()
    return items if info is None else items[info.id :: info.num_workers]


class JsonFiles:
    """Map-style: one JSON file per sample."""

    def __init__(self, root):
        self.files = format_files("json_files", root)
        if not self.files:
            raise DataError(f"no JSON files under {Path(root) / 'json_files'}")

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path = self.files[i]
        try:
            s = json.loads(path.read_text())
            return s["key"], tokenize(s["text"])
        except FileNotFoundError:
            raise DataError(f"{path}: file is missing") from None
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DataError(f"{path}: malformed JSON sample ({err})") from None


class Jsonl:
    """Map-style: byte offsets of every line are indexed once, lines are read by seek.

    The file stays open, one handle per process: opened at the first read in each process
    (the DataLoader's workers each get their own, forked or spawned) and never pickled. A
    forked worker must not reuse its parent's handle: both would share one file offset, and a
    seek in one would move the other's read. Reopening the file for every sample would add an
    ``open``/``close`` per sample that the format does not need (and would count as a file
    opened per sample in the cold rounds)."""

    def __init__(self, root):
        self.path = Path(root) / "jsonl" / "data.jsonl"
        if not self.path.exists():
            raise DataError(f"{self.path}: file is missing")
        self.offsets = [0]
        with open(self.path, "rb") as f:
            for line in f:
                self.offsets.append(self.offsets[-1] + len(line))
        self.offsets.pop()
        self._file, self._pid = None, None

    def _handle(self):
        """This process's handle (opened here on first use, or again after a fork)."""
        if self._file is None or self._pid != os.getpid():
            try:
                self._file = open(self.path, "rb")
            except FileNotFoundError:
                raise DataError(f"{self.path}: file is missing") from None
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        """Close this process's handle (a forked copy of the parent's is left alone)."""
        f = getattr(self, "_file", None)  # absent when __init__ raised
        if f is not None and self._pid == os.getpid():
            f.close()
        self._file, self._pid = None, None

    def __del__(self):
        self.close()

    def __getstate__(self):
        return {**self.__dict__, "_file": None, "_pid": None}

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        f = self._handle()
        f.seek(self.offsets[i])
        line = f.readline()
        try:
            s = json.loads(line)
            return s["key"], tokenize(s["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DataError(
                f"{self.path}: malformed JSON at line {i + 1} (byte offset {self.offsets[i]}): {err}"
            ) from None


class Memmap:
    """Map-style: nanoGPT-style packed uint16 tokens with an (offset, length) index. Pickled
    (for a spawned worker) without the mapping, which the worker opens again."""

    def __init__(self, root):
        d = Path(root) / "memmap"
        for name in ("tokens.bin", "index.npy", "keys.json"):
            if not (d / name).exists():
                raise DataError(f"{d / name}: file is missing")
        self.path = d / "tokens.bin"
        self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r")
        self.index = np.load(d / "index.npy")
        self.keys = json.loads((d / "keys.json").read_text())
        end = int(self.index[-1].sum()) if len(self.index) else 0
        if end > len(self.tokens):
            raise DataError(
                f"{self.path}: truncated: the index needs {end} tokens, the file holds {len(self.tokens)}"
            )

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "tokens"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r")

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        off, n = self.index[i]
        return self.keys[i], np.array(self.tokens[off : off + n])


class TarShards:
    """Iterable: webdataset tar shards, split across DataLoader workers by shard."""

    def __init__(self, root):
        self.shards = [str(p) for p in format_files("tar", root)]
        if not self.shards:
            raise DataError(f"no tar shards under {Path(root) / 'tar'}")

    def __iter__(self):
        import webdataset as wds

        for shard in _worker_slice(self.shards):
            key = None
            try:
                # shards are already split across workers here, so webdataset must not split again
                for sample in wds.WebDataset(
                    shard,
                    shardshuffle=False,
                    handler=wds.reraise_exception,
                    empty_check=False,
                    workersplitter=None,
                    nodesplitter=None,
                ):
                    key = sample["__key__"]
                    yield key, tokenize(sample["txt"].decode("utf-8"))
            except Exception as err:  # tarfile.ReadError and friends: name the shard and the last good sample
                raise DataError(
                    f"{shard}: unreadable after sample {key!r} ({type(err).__name__}: {err})"
                ) from None


class ParquetRowGroups:
    """Iterable: pyarrow Parquet, split across DataLoader workers by row group."""

    def __init__(self, root):
        import pyarrow.parquet as pq

        self.path = Path(root) / "parquet" / "data.parquet"
        try:
            self.groups = pq.ParquetFile(self.path).num_row_groups
        except FileNotFoundError:
            raise DataError(f"{self.path}: file is missing") from None
        except Exception as err:
            raise DataError(f"{self.path}: not a readable Parquet file ({err})") from None

    def __iter__(self):
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(self.path)
        for g in _worker_slice(list(range(self.groups))):
            try:
                table = pf.read_row_group(g)
            except Exception as err:
                raise DataError(f"{self.path}: row group {g} unreadable ({err})") from None
            for key, text in zip(table.column("key").to_pylist(), table.column("text").to_pylist()):
                yield key, tokenize(text)


READERS = {
    "json_files": JsonFiles,
    "jsonl": Jsonl,
    "tar": TarShards,
    "memmap": Memmap,
    "parquet": ParquetRowGroups,
}


# ---------------------------------------------------------------------------- torch datasets
class MappedDataset(tud.Dataset):
    """A map-style reader (``__len__`` and ``__getitem__``) as a torch Dataset."""

    def __init__(self, reader):
        self.reader = reader

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, i):
        return self.reader[i]


class StreamedDataset(tud.IterableDataset):
    """An iterable reader (it splits its shards across workers itself) as a torch Dataset."""

    def __init__(self, reader):
        self.reader = reader

    def __iter__(self):
        return iter(self.reader)


def dataset(fmt: str, root):
    """A torch Dataset (map-style or iterable) reading ``fmt`` under ``root``."""
    if fmt not in READERS:
        raise ParameterError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    reader = READERS[fmt](root)
    return MappedDataset(reader) if hasattr(reader, "__getitem__") else StreamedDataset(reader)


class Collate:
    """Pad/truncate to ``seq_len`` into a LongTensor; carry the batch's count, checksum and
    token count (before truncation) for the integrity check."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len

    def __call__(self, batch):
        out = torch.zeros(len(batch), self.seq_len, dtype=torch.long)
        checksum, n_tokens = 0, 0
        for i, (key, toks) in enumerate(batch):
            checksum += sample_checksum(key, toks)
            n_tokens += len(toks)
            n = min(len(toks), self.seq_len)
            out[i, :n] = torch.from_numpy(toks[:n].astype(np.int64))
        return out, {"count": len(batch), "checksum": checksum, "tokens": n_tokens}


def make_loader(
    fmt,
    root,
    *,
    batch_size,
    seq_len,
    num_workers,
    prefetch_factor,
    persistent,
    pin_memory,
    multiprocessing_context=None,
):
    """A ``DataLoader`` over ``fmt``; ``multiprocessing_context`` ("fork", "spawn", ...) only
    matters with workers (None: the platform's default start method)."""
    kw = dict(
        batch_size=batch_size, num_workers=num_workers, collate_fn=Collate(seq_len), pin_memory=pin_memory
    )
    if num_workers > 0:
        kw.update(
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent,
            multiprocessing_context=multiprocessing_context,
        )
    return tud.DataLoader(dataset(fmt, root), **kw)
