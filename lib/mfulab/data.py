"""Study ``dataloader``: the same synthetic corpus in five storage formats, read through
``torch.utils.data.DataLoader`` under several settings, cold and warm, and fed to a training
loop to measure the data stall.

Formats (each with a writer and a reader yielding the same samples):
``json_files`` (one JSON file per sample — the many-small-files case), ``jsonl`` (one file,
a line per sample), ``tar`` (webdataset tar shards), ``memmap`` (nanoGPT-style packed
uint16 tokens plus an offset index) and ``parquet`` (pyarrow, one row group per shard).

Integrity: every sample has a CRC-32 of its key and tokens; a reader's epoch sums them
(order-independent) and must reproduce the corpus's count and sum for every worker count.
Errors: a malformed or truncated input raises :class:`DataError` naming the file (and the
line, offset, row group or sample key); nothing is skipped silently.

Cold cache: ``evict`` asks the kernel to drop a file's pages (``posix_fadvise(DONTNEED)``,
no root needed) and ``resident_fraction`` checks with ``mincore`` that it took effect.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import time
import zlib
from pathlib import Path

import numpy as np

from . import verdicts as claims_mod
from . import hardware
from .verdicts import Claim
from .config import ParameterError, check_param_names, require_positive_int

STUDY = "dataloader"
BENCHMARK_VERSION = {"loader": 1, "stall": 1}
FORMATS = ("json_files", "jsonl", "tar", "memmap", "parquet")
PARAMS = {
    "device": "auto|cpu|cuda", "scratch_dir": "folder for the corpus (not results/)",
    "n_samples": "positive int", "mean_bytes": "positive int", "length_sigma": "positive number",
    "seed": "int", "shard_samples": "positive int", "formats": f"list from {FORMATS}",
    "batch_size": "positive int", "seq_len": "positive int", "num_workers": "list of non-negative ints",
    "prefetch_factor": "positive int", "epochs": "int ≥ 2", "cold": "bool",
    "stall_steps": "positive int", "stall_preset": "preset name", "checkpoint_every": "non-negative int",
    "stall_emulated_step_s": "non-negative number (0: no emulated-compute stall runs)",
}


class DataError(RuntimeError):
    """A sample could not be read: the message names the file and where in it."""


# ---------------------------------------------------------------------------- corpus
def _vocabulary(rng) -> list[str]:
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    weights = np.linspace(2.0, 0.2, len(letters))
    weights /= weights.sum()
    return ["".join(rng.choice(letters, size=int(rng.integers(2, 9)), p=weights)) for _ in range(5000)]


def synthetic_corpus(*, n_samples: int, mean_bytes: int, length_sigma: float, seed: int) -> list[dict]:
    """Deterministic documents: words drawn (Zipf-like) from a seeded vocabulary, lengths
    log-normal with the given mean (bytes) and sigma, as web text roughly is."""
    rng = np.random.default_rng(seed)
    words = _vocabulary(rng)
    ranks = np.arange(1, len(words) + 1)
    p = (1 / ranks) / (1 / ranks).sum()
    mu = np.log(mean_bytes) - length_sigma**2 / 2
    lengths = np.maximum(8, rng.lognormal(mu, length_sigma, n_samples)).astype(int)
    out = []
    for i, n_bytes in enumerate(lengths):
        picked = rng.choice(len(words), size=max(1, n_bytes // 5), p=p)
        text = " ".join(words[j] for j in picked)[:n_bytes]
        out.append({"key": f"{i:08d}", "text": text})
    return out


def tokenize(text: str) -> np.ndarray:
    """Byte-level tokens (no download, vocabulary 256), stored as uint16 like nanoGPT's bins."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def sample_checksum(key: str, tokens: np.ndarray) -> int:
    return zlib.crc32(np.asarray(tokens, dtype=np.uint16).tobytes(), zlib.crc32(key.encode()))


def corpus_checksum(samples) -> dict:
    return {"count": len(samples),
            "checksum": int(sum(sample_checksum(s["key"], tokenize(s["text"])) for s in samples))}


# ---------------------------------------------------------------------------- writers
def estimate_bytes(samples) -> int:
    return int(sum(len(s["text"]) + 40 for s in samples))


def check_free_space(root: Path, needed_bytes: int) -> None:
    """Refuse to write when the scratch folder's disk lacks room for every format (×2 margin)."""
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if free < 2 * needed_bytes:
        raise ParameterError(f"scratch_dir {root} has {free / 2**20:.0f} MiB free; writing the corpus in every "
                             f"format needs about {2 * needed_bytes / 2**20:.0f} MiB")


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
            with wds.TarWriter(str(d / f"shard-{start // shard_samples:06d}.tar")) as sink:
                for s in samples[start:start + shard_samples]:
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
    return {"format": fmt, "files": len(files), "bytes": sum(p.stat().st_size for p in files), "write_s": seconds}


def format_files(fmt: str, root: Path) -> list[Path]:
    return sorted(p for p in (Path(root) / fmt).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- readers
def _worker_slice(items):
    import torch.utils.data as tud

    info = tud.get_worker_info()
    return items if info is None else items[info.id::info.num_workers]


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
    """Map-style: byte offsets of every line are indexed once, lines are read by seek."""

    def __init__(self, root):
        self.path = Path(root) / "jsonl" / "data.jsonl"
        if not self.path.exists():
            raise DataError(f"{self.path}: file is missing")
        self.offsets = [0]
        with open(self.path, "rb") as f:
            for line in f:
                self.offsets.append(self.offsets[-1] + len(line))
        self.offsets.pop()

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        with open(self.path, "rb") as f:
            f.seek(self.offsets[i])
            line = f.readline()
        try:
            s = json.loads(line)
            return s["key"], tokenize(s["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DataError(f"{self.path}: malformed JSON at line {i + 1} (byte offset {self.offsets[i]}): {err}") from None


class Memmap:
    """Map-style: nanoGPT-style packed uint16 tokens with an (offset, length) index."""

    def __init__(self, root):
        d = Path(root) / "memmap"
        for name in ("tokens.bin", "index.npy", "keys.json"):
            if not (d / name).exists():
                raise DataError(f"{d / name}: file is missing")
        self.tokens = np.memmap(d / "tokens.bin", dtype=np.uint16, mode="r")
        self.index = np.load(d / "index.npy")
        self.keys = json.loads((d / "keys.json").read_text())
        end = int(self.index[-1].sum()) if len(self.index) else 0
        if end > len(self.tokens):
            raise DataError(f"{d / 'tokens.bin'}: truncated: the index needs {end} tokens, the file holds {len(self.tokens)}")

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        off, n = self.index[i]
        return self.keys[i], np.array(self.tokens[off:off + n])


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
                for sample in wds.WebDataset(shard, shardshuffle=False, handler=wds.reraise_exception,
                                             empty_check=False, workersplitter=None, nodesplitter=None):
                    key = sample["__key__"]
                    yield key, tokenize(sample["txt"].decode("utf-8"))
            except Exception as err:  # tarfile.ReadError and friends: name the shard and the last good sample
                raise DataError(f"{shard}: unreadable after sample {key!r} ({type(err).__name__}: {err})") from None


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


READERS = {"json_files": JsonFiles, "jsonl": Jsonl, "tar": TarShards, "memmap": Memmap, "parquet": ParquetRowGroups}


def dataset(fmt: str, root):
    """A torch Dataset (map-style or iterable) reading ``fmt`` under ``root``."""
    import torch.utils.data as tud

    if fmt not in READERS:
        raise ParameterError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    reader = READERS[fmt](root)
    if hasattr(reader, "__getitem__"):
        class Mapped(tud.Dataset):
            def __len__(self):
                return len(reader)

            def __getitem__(self, i):
                return reader[i]
        return Mapped()

    class Streamed(tud.IterableDataset):
        def __iter__(self):
            return iter(reader)
    return Streamed()


class Collate:
    """Pad/truncate to ``seq_len`` into a LongTensor; carry the batch's count, checksum and
    token count (before truncation) for the integrity check."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len

    def __call__(self, batch):
        import torch

        out = torch.zeros(len(batch), self.seq_len, dtype=torch.long)
        checksum, n_tokens = 0, 0
        for i, (key, toks) in enumerate(batch):
            checksum += sample_checksum(key, toks)
            n_tokens += len(toks)
            n = min(len(toks), self.seq_len)
            out[i, :n] = torch.from_numpy(toks[:n].astype(np.int64))
        return out, {"count": len(batch), "checksum": checksum, "tokens": n_tokens}


def make_loader(fmt, root, *, batch_size, seq_len, num_workers, prefetch_factor, persistent, pin_memory):
    import torch.utils.data as tud

    kw = dict(batch_size=batch_size, num_workers=num_workers, collate_fn=Collate(seq_len), pin_memory=pin_memory)
    if num_workers > 0:
        kw.update(prefetch_factor=prefetch_factor, persistent_workers=persistent)
    return tud.DataLoader(dataset(fmt, root), **kw)


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
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
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


# ---------------------------------------------------------------------------- measurements
def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
        out.append({"epoch": e, "first_batch_s": first, "epoch_s": wall, "samples": count, "tokens": tokens,
                    "samples_per_s": count / wall, "tokens_per_s": tokens / wall,
                    "intact": count == expected["count"] and checksum == expected["checksum"]})
    return out


def loader_sweep(p: dict, root: Path, expected: dict, written: dict) -> list[dict]:
    """Every format × worker count (× persistent workers when > 0), warm cache, plus one cold
    epoch per format at ``num_workers=0`` with its eviction verified."""
    from .timing import progress

    pin = p["device"] == "cuda"
    points = [(fmt, w, pers) for fmt in p["formats"] for w in p["num_workers"]
              for pers in ((False, True) if w > 0 else (False,))]
    rows = []
    for fmt, workers, persistent in progress(points, "loader sweep"):
        loader = make_loader(fmt, root, batch_size=p["batch_size"], seq_len=p["seq_len"], num_workers=workers,
                             prefetch_factor=p["prefetch_factor"], persistent=persistent, pin_memory=pin)
        cpu0 = _cpu_seconds()
        epochs = run_epochs(loader, p["epochs"], expected)
        del loader
        cpu = _cpu_seconds() - cpu0
        for e in epochs:
            rows.append({"format": fmt, "num_workers": workers, "persistent_workers": persistent, "cache": "warm",
                         "pin_memory": pin, **e, "mb_per_s": written[fmt]["bytes"] / 2**20 / e["epoch_s"],
                         "cpu_s_all_epochs": cpu})
    if p["cold"]:
        for fmt in p["formats"]:
            files = format_files(fmt, root)
            evict(files)
            sample = files[:: max(1, len(files) // 20)]
            resident = float(np.mean([resident_fraction(f) for f in sample]))
            loader = make_loader(fmt, root, batch_size=p["batch_size"], seq_len=p["seq_len"], num_workers=0,
                                 prefetch_factor=p["prefetch_factor"], persistent=False, pin_memory=pin)
            e = run_epochs(loader, 1, expected)[0]
            rows.append({"format": fmt, "num_workers": 0, "persistent_workers": False, "cache": "cold",
                         "pin_memory": pin, **e, "mb_per_s": written[fmt]["bytes"] / 2**20 / e["epoch_s"],
                         "cpu_s_all_epochs": None, "resident_after_evict": resident})
    return rows


def stall_run(p: dict, root: Path, fmt: str | None, *, emulated_step_s: float = 0.0) -> dict:
    """Train the reference model on batches from ``fmt`` (or pre-loaded in memory when None):
    per step, the time blocked waiting for the batch and the compute time. With
    ``emulated_step_s`` the step is a timed wait instead (an accelerator-speed step: time
    passes, no core is busy), with ``num_workers=0`` so that loading sits inside the step."""
    import torch

    from .config import preset
    from .timing import synchronize
    from .model import GPT

    device = p["device"]
    cfg = preset(p["stall_preset"]).with_(seq_len=p["seq_len"], vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg, attn_impl="sdpa").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    workers = 0 if emulated_step_s else max(p["num_workers"])
    if fmt is None:
        loader = make_loader(p["formats"][0], root, batch_size=p["batch_size"], seq_len=p["seq_len"], num_workers=0,
                             prefetch_factor=p["prefetch_factor"], persistent=False, pin_memory=False)
        cached = [b for b, _ in loader][: p["stall_steps"] + 1]
        batches = iter(cached * (1 + p["stall_steps"] // max(len(cached), 1)))
    else:
        loader = make_loader(fmt, root, batch_size=p["batch_size"], seq_len=p["seq_len"], num_workers=workers,
                             prefetch_factor=p["prefetch_factor"], persistent=True, pin_memory=device == "cuda")
        batches = (b for b, _ in _forever(loader))
    steps, ckpt = [], Path(root) / "checkpoint.pt"
    for i in range(p["stall_steps"]):
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
        checkpoint = bool(p["checkpoint_every"] and fmt is None and not emulated_step_s
                          and (i + 1) % p["checkpoint_every"] == 0)
        if checkpoint:
            torch.save(model.state_dict(), ckpt)  # synchronous write inside the step (B12)
            with open(ckpt, "rb") as f:
                os.fsync(f.fileno())
        t3 = time.perf_counter()
        steps.append({"step": i, "wait_s": t1 - t0, "compute_s": t2 - t1, "checkpoint": checkpoint,
                      "checkpoint_s": t3 - t2 if checkpoint else 0.0, "step_s": t3 - t0})
    return {"format": fmt or "in-memory", "num_workers": 0 if fmt is None else workers,
            "compute": "emulated compute" if emulated_step_s else "real compute", "steps": steps}


def _forever(loader):
    while True:
        yield from loader


def measure(params: dict) -> dict:
    import torch

    p = validate(params)
    root = Path(p["scratch_dir"]).resolve()
    samples = synthetic_corpus(n_samples=p["n_samples"], mean_bytes=p["mean_bytes"], length_sigma=p["length_sigma"],
                               seed=p["seed"])
    check_free_space(root, estimate_bytes(samples) * len(p["formats"]))
    expected = corpus_checksum(samples)
    rec = {"study": STUDY, "params": p, "device": p["device"], "benchmark_version": BENCHMARK_VERSION,
           "device_name": torch.cuda.get_device_name(0) if p["device"] == "cuda" else hardware.cpu_model(),
           "cpu_count": os.cpu_count(), "corpus": {**expected, "bytes_of_text": int(sum(len(s["text"]) for s in samples))}}
    rec["written"] = {fmt: write_format(fmt, samples, root, shard_samples=p["shard_samples"]) for fmt in p["formats"]}
    del samples
    rec["sweep"] = loader_sweep(p, root, expected, rec["written"])
    rec["stall"] = [stall_run(p, root, None)] + [stall_run(p, root, fmt) for fmt in p["formats"]]
    if p["stall_emulated_step_s"]:
        rec["stall"] += [stall_run(p, root, fmt, emulated_step_s=p["stall_emulated_step_s"]) for fmt in p["formats"]]
    return rec


def validate(params: dict) -> dict:
    check_param_names(params, PARAMS)
    p = dict(params)
    for name in ("n_samples", "mean_bytes", "shard_samples", "batch_size", "seq_len", "prefetch_factor", "stall_steps"):
        require_positive_int(name, p[name])
    require_positive_int("checkpoint_every", p["checkpoint_every"], allow_zero=True)
    if not (isinstance(p["epochs"], int) and p["epochs"] >= 2):
        raise ParameterError("epochs must be an integer ≥ 2 (the second epoch measures the restart)")
    if not (isinstance(p["length_sigma"], (int, float)) and p["length_sigma"] > 0):
        raise ParameterError(f"length_sigma must be a positive number, got {p['length_sigma']!r}")
    if not p["formats"] or any(f not in FORMATS for f in p["formats"]):
        raise ParameterError(f"formats must be a non-empty list from {', '.join(FORMATS)}; got {p['formats']!r}")
    if not p["num_workers"] or any(not (isinstance(w, int) and w >= 0) for w in p["num_workers"]):
        raise ParameterError(f"num_workers must be a list of non-negative integers, got {p['num_workers']!r}")
    if not (isinstance(p["stall_emulated_step_s"], (int, float)) and p["stall_emulated_step_s"] >= 0):
        raise ParameterError("stall_emulated_step_s must be a non-negative number")
    if not isinstance(p["cold"], bool):
        raise ParameterError("cold must be true or false")
    scratch = Path(str(p["scratch_dir"]))
    if "results" in scratch.resolve().parts:
        raise ParameterError("scratch_dir must not be under results/: the corpus is scratch, not a result")
    from .config import preset

    preset(p["stall_preset"])
    p["device"] = hardware.resolve_device(p["device"])
    return p


# ---------------------------------------------------------------------------- analysis
def sweep_table(records):
    import pandas as pd

    return pd.DataFrame(records["sweep"])


def written_table(records):
    import pandas as pd

    return pd.DataFrame(records["written"].values())


def stall_table(records):
    import pandas as pd

    rows = []
    for run in records["stall"]:
        steps = run["steps"][1:]  # the first step includes the loader start-up
        wait = sum(s["wait_s"] for s in steps)
        total = sum(s["step_s"] for s in steps)
        rows.append({"loader": run["format"], "compute": run["compute"], "num_workers": run["num_workers"],
                     "steps": len(steps),
                     "stall_fraction": wait / total, "median_wait_s": float(np.median([s["wait_s"] for s in steps])),
                     "median_step_s": float(np.median([s["step_s"] for s in steps])),
                     "first_step_wait_s": run["steps"][0]["wait_s"]})
    return pd.DataFrame(rows)


def throughput(records, fmt: str, workers: int, persistent: bool = False):
    """Per-epoch samples/s (warm) of one setting, as a Timing-like summary of epoch times per sample."""
    from .timing import summarize

    rows = [r for r in records["sweep"] if r["format"] == fmt and r["num_workers"] == workers
            and r["persistent_workers"] == persistent and r["cache"] == "warm"]
    return summarize([r["epoch_s"] / r["samples"] for r in rows], label=f"{fmt}/{workers}")


def claims(records) -> list[Claim]:
    from .timing import compare_timings

    out = []
    fmts = records["params"]["formats"]
    if "tar" in fmts and "json_files" in fmts:
        c = compare_timings(throughput(records, "json_files", 0), throughput(records, "tar", 0))
        best_workers = max(records["params"]["num_workers"],
                           key=lambda w: 1 / throughput(records, "tar", w).median_s)
        out.append(Claim(
            "B11", "tar shards (webdataset) instead of many small files give ≥5% throughput; 8–16 workers help",
            f"warm epochs, num_workers=0, {records['corpus']['count']} samples; worker counts "
            f"{records['params']['num_workers']} on {records['cpu_count']} cores",
            claims_mod.verdict_from_interval(c.ratio_lo, c.ratio_hi, threshold=1.05),
            f"tar / json files throughput {c.ratio:.2f}× [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] (epochs as samples); "
            f"best worker count for tar here: {best_workers} (8–16 workers need 8–16 spare cores; this box has "
            f"{records['cpu_count']})"))
    st = stall_table(records)
    mem_stall = st[st.loader == "in-memory"].stall_fraction.iloc[0]
    for compute, d in st[st.loader != "in-memory"].groupby("compute"):
        worst = d.loc[d.stall_fraction.idxmax()]
        shows = worst.stall_fraction > 0.05 and mem_stall < 0.02
        out.append(Claim(
            "B2", "data wait shows up as time at the start of each step (1.5 s in the case study)",
            f"per-step wait for the next batch, {compute} ({'a timed wait of ' + str(records['params']['stall_emulated_step_s']) + ' s, ' if compute.startswith('emulated') else ''}"
            f"num_workers={int(worst.num_workers)}), per loader vs in-memory",
            "confirmed" if shows else "inconclusive on this machine",
            f"stall: in-memory {mem_stall:.1%}, worst {worst.loader} {worst.stall_fraction:.1%} of step time (median wait "
            f"{worst.median_wait_s * 1e3:.1f} ms at the start of a {worst.median_step_s * 1e3:.0f} ms step); thresholds 5% and 2%"))
    mem = next(r for r in records["stall"] if r["format"] == "in-memory")
    if any(s["checkpoint"] for s in mem["steps"]):
        steps = [s["step_s"] for s in mem["steps"][1:]]
        spikes = [s["step_s"] for s in mem["steps"][1:] if s["checkpoint"]]
        calm = [s["step_s"] for s in mem["steps"][1:] if not s["checkpoint"]]
        ratio = float(np.median(spikes) / np.median(calm)) if spikes and calm else float("nan")
        out.append(Claim(
            "B12", "synchronous checkpoint writes cause periodic step-time spikes",
            f"synchronous torch.save + fsync every {records['params']['checkpoint_every']} steps (in-memory loader)",
            "confirmed" if ratio > 1.2 else "inconclusive on this machine",
            f"steps with a write take {ratio:.2f}× the median of the others ({len(spikes)} of {len(steps)} steps); "
            "threshold 1.2×; a background write would move this off the step"))
    return out


def headline_metrics(records) -> dict:
    sw = sweep_table(records)
    return {"device": records["device"], "device_name": records["device_name"], "corpus": records["corpus"],
            "written": records["written"], "all_epochs_intact": bool(sw.intact.all()),
            "throughput": sw.groupby(["format", "num_workers", "persistent_workers", "cache"]).samples_per_s
            .median().reset_index().to_dict(orient="records"),
            "stall": stall_table(records).to_dict(orient="records"),
            "claims": claims_mod.records(claims(records))}


# ---------------------------------------------------------------------------- figures
def plot_throughput(records):
    import matplotlib.pyplot as plt
    import seaborn as sns

    sw = sweep_table(records)
    sw = sw.assign(setting=[f"{'cold' if c == 'cold' else w} {'(persistent)' if pers else ''}".strip()
                            for c, w, pers in zip(sw.cache, sw.num_workers, sw.persistent_workers)])
    fig, ax = plt.subplots(figsize=(8, 4))
    sns.barplot(data=sw, x="format", y="samples_per_s", hue="setting", errorbar=("pi", 50), ax=ax)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (median of epochs, bars: IQR)")
    ax.set_xlabel("")
    best = sw[sw.cache == "warm"].groupby("format").samples_per_s.median()
    ax.set_title(f"{best.idxmax()} reads {best.max() / best.min():.0f}× faster than {best.idxmin()} (workers: number)")
    ax.legend(fontsize=7, title="num_workers / cache")
    return fig


def plot_stall(records):
    """Per-step timeline (wait, compute, checkpoint) per loader; real and emulated compute
    in separate panels (their time scales differ by orders of magnitude)."""
    import matplotlib.pyplot as plt

    groups = {}
    for run in records["stall"]:
        groups.setdefault(run["compute"], []).append(run)
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 0.4 * len(records["stall"]) + 2), squeeze=False)
    for ax, (compute, runs) in zip(axes[:, 0], groups.items()):
        for i, run in enumerate(runs):
            steps = run["steps"]
            starts = np.cumsum([0] + [s["step_s"] for s in steps[:-1]])
            for t0, s in zip(starts, steps):
                ax.barh(i, s["wait_s"] * 1e3, left=t0 * 1e3, color="C3")
                ax.barh(i, s["compute_s"] * 1e3, left=(t0 + s["wait_s"]) * 1e3, color="C0")
                if s["checkpoint_s"]:
                    ax.barh(i, s["checkpoint_s"] * 1e3, left=(t0 + s["wait_s"] + s["compute_s"]) * 1e3, color="C2")
        ax.set_yticks(range(len(runs)))
        ax.set_yticklabels([f"{r['format']} ({r['num_workers']} workers)" for r in runs], fontsize=8)
        ax.set_title(compute, fontsize=9)
    axes[-1, 0].set_xlabel("time (ms): red = waiting for data, blue = compute, green = checkpoint write")
    fig.suptitle("When data arrives relative to each training step", fontweight="bold")
    fig.tight_layout()
    return fig
