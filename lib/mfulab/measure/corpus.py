"""A synthetic text corpus for training-data studies: documents, byte-level tokens, checksums,
the storage formats it is written in (``FORMATS``; writers and readers in ``dataformats``) and
the scratch-space check before writing it.

Integrity: every sample has a CRC-32 of its key and tokens; a reader's epoch sums them
(order-independent) and must reproduce the corpus's count and sum for every worker count.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import numpy as np

from mfulab.errors import ParameterError
from mfulab.units import MIB

# the storage formats (``dataformats``): many small files, one file, tar shards, packed tokens, Parquet
FORMATS = ("json_files", "jsonl", "tar", "memmap", "parquet")


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
    return {
        "count": len(samples),
        "checksum": int(sum(sample_checksum(s["key"], tokenize(s["text"])) for s in samples)),
    }


def estimate_bytes(samples) -> int:
    return int(sum(len(s["text"]) + 40 for s in samples))


def check_free_space(root: Path, needed_bytes: int) -> None:
    """Refuse to write when the scratch folder's disk lacks room for every format (×2 margin)."""
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if free < 2 * needed_bytes:
        raise ParameterError(
            f"scratch_dir {root} has {free / MIB:.0f} MiB free; writing the corpus in "
            f"every format needs about {2 * needed_bytes / MIB:.0f} MiB"
        )
