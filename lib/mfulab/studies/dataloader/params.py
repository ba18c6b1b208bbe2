"""Parameters of the ``dataloader`` study; the defaults are the laptop (``cpu``) profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...config import ParameterError, preset
from ...params import StudyParams, param

FORMATS = ("json_files", "jsonl", "tar", "memmap", "parquet")


@dataclass(frozen=True)
class Params(StudyParams):
    device: str = param("auto", "auto | cpu | cuda (cuda: pin_memory and non_blocking copies)")
    scratch_dir: str = param(
        "scratch/dataloader-corpus", "where the corpus is written (never under results/)"
    )
    n_samples: int = param(10000, "documents in the synthetic corpus", unit="samples", positive=True)
    mean_bytes: int = param(
        600, "mean document length (bytes = byte-level tokens)", unit="bytes", positive=True
    )
    length_sigma: float = param(0.8, "log-normal spread of the document lengths", positive=True)
    seed: int = param(0, "seed of the synthetic corpus")
    shard_samples: int = param(
        1000, "samples per tar shard / Parquet row group", unit="samples", positive=True
    )
    formats: tuple[str, ...] = param(
        list(FORMATS), f"storage formats written and read, from {', '.join(FORMATS)}"
    )
    batch_size: int = param(32, "samples per batch", unit="samples", positive=True)
    seq_len: int = param(256, "tokens per sequence after padding/truncation", unit="tokens", positive=True)
    num_workers: tuple[int, ...] = param([0, 2], "DataLoader worker counts of the sweep", unit="processes")
    prefetch_factor: int = param(2, "batches loaded ahead per worker", unit="batches", positive=True)
    epochs: int = param(
        3, "epochs per loader setting (the second and later measure a restart)", unit="epochs"
    )
    cold: bool = param(True, "also one epoch per format with its pages evicted from the page cache first")
    stall_steps: int = param(
        30, "training steps per loader in the stall measurement", unit="steps", positive=True
    )
    stall_preset: str = param(
        "tiny",
        "the model trained in the stall runs (a config.preset name; short steps make a slow loader visible)",
    )
    checkpoint_every: int = param(
        10, "B12: a synchronous checkpoint write every k steps (0: none)", unit="steps", non_negative=True
    )
    stall_emulated_step_s: float = param(
        0.005, "also stall runs whose step is a timed wait this long (0: none)", unit="s", non_negative=True
    )

    def check(self) -> None:
        self.require("epochs", self.epochs >= 2, "an integer ≥ 2 (the second epoch measures the restart)")
        self.require_choice("formats", FORMATS)
        self.require(
            "num_workers",
            len(self.num_workers) > 0 and all(w >= 0 for w in self.num_workers),
            "a non-empty list of non-negative integers",
        )
        self.require(
            "scratch_dir",
            "results" not in Path(self.scratch_dir).resolve().parts,
            "a folder outside results/ (the corpus is scratch, not a result)",
        )
        try:
            preset(self.stall_preset)
        except ParameterError as err:
            raise ParameterError(f"stall_preset: {err}") from None

    def prepare(self) -> None:
        self.resolve_device()
