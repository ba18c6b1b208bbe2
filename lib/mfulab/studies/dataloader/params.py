"""Parameters of the ``dataloader`` study; the defaults are the laptop (``cpu``) profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...config import ParameterError, preset
from ...params import StudyParams, param

FORMATS = ("json_files", "jsonl", "tar", "memmap", "parquet")

# B11's per-file latency on a network or parallel file system: an assumption, not a measurement
# (this box reads a local ext4 disk). Each file opened costs metadata round trips (lookup,
# open, getattr) and a first read before any byte arrives. Published single-client figures:
# - Lustre, MDtest with one thread: ~2,000 stat/s (0.5 ms) and ~500 creates/s (2 ms) per
#   operation (Dell Storage for HPC with Intel EE for Lustre, white paper, Figure 12);
# - Lustre, stat of files in a 20,000-file directory: just below 2,500 files/s (0.4 ms)
#   (lustre-discuss, "Large directory performance", September 2010);
# - Aalto Triton's Lustre: 512-byte files moved at 0.04 MB/s, ≈ 13 ms per file
#   (scicomp.aalto.fi/triton/usage/smallfiles, pre-2016 system).
# With W loader workers opening files concurrently the latency overlaps: read the parameter as
# the effective latency (raw latency / W while the metadata server keeps up), hence a sweep
# that starts at 0.1 ms.
PER_FILE_LATENCY_S = 1e-3
PER_FILE_LATENCY_SWEEP_S = (0.0, 1e-4, 5e-4, 1e-3, 2e-3, 5e-3)

# B11's cold ratio pits two resources against each other: the disk's latency (JSON files: one
# random read per file) and the CPU (tar: Python's tarfile parses every member). A neighbour's
# load slows one and not the other, so the ratio moves between fresh runs more than a ratio of
# two CPU-bound timings (timing.RUN_TO_RUN_DRIFT, 5%): 1.20× on the idle 2-core box and 1.02×
# with four runnable processes on its two cores, in two fresh runs while this study was built.
FORMAT_RATIO_DRIFT = 0.2


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
    seed: int = param(0, "seed of the synthetic corpus and of the interleaving orders")
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
        2,
        "warm epochs per loader setting, interleaved across settings (the second measures a restart)",
        unit="epochs",
    )
    cold: bool = param(True, "also the cold rounds: every format's pages evicted before each of its epochs")
    cold_rounds: int = param(
        6,
        "B11: rounds of cold epochs, each reading every format once (num_workers=0) in a shuffled order",
        unit="rounds",
    )
    per_file_latency_s: float = param(
        PER_FILE_LATENCY_S,
        "B11: assumed latency added per file opened on a network or parallel file system "
        "(sources in params.py)",
        unit="s",
        non_negative=True,
    )
    format_ratio_drift: float = param(
        FORMAT_RATIO_DRIFT,
        "B11: run-to-run drift assumed for the cold tar / JSON files ratio, on each side of its "
        "interval (disk latency against CPU time; measured spread in params.py)",
        unit="fraction",
        non_negative=True,
    )
    per_file_latency_sweep_s: tuple[float, ...] = param(
        list(PER_FILE_LATENCY_SWEEP_S), "B11: per-file latencies of the sensitivity table", unit="s"
    )
    stall_steps: int = param(
        20, "training steps per loader in the stall measurement", unit="steps", positive=True
    )
    stall_preset: str = param(
        "tiny",
        "the model trained in the stall runs (a config.preset name; short steps make a slow loader visible)",
    )
    checkpoint_every: int = param(
        5,
        "a synchronous checkpoint write every k steps of the real-compute stall runs (B2's 'other'; 0: none)",
        unit="steps",
        non_negative=True,
    )
    checkpoint_rounds: int = param(
        10, "B12: interleaved rounds of a step with and without a synchronous checkpoint", unit="rounds"
    )
    stall_emulated_step_s: float = param(
        0.005, "also stall runs whose step is a timed wait this long (0: none)", unit="s", non_negative=True
    )
    nonzero_share: float = param(
        0.001,
        "B2: a category of step time counts as non-zero above this share of the run's time "
        "(a batch taken from a Python list stays below it)",
        unit="fraction",
        positive=True,
    )

    def check(self) -> None:
        self.require("epochs", self.epochs >= 2, "an integer ≥ 2 (the second epoch measures the restart)")
        self.require("cold_rounds", self.cold_rounds >= 2, "an integer ≥ 2 (an interval needs rounds)")
        self.require("checkpoint_rounds", self.checkpoint_rounds >= 2, "an integer ≥ 2")
        self.require_choice("formats", FORMATS)
        self.require_non_negative("per_file_latency_sweep_s")
        self.require("nonzero_share", self.nonzero_share < 1, "a fraction in (0, 1)")
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
