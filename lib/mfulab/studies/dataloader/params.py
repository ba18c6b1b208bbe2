"""Parameters of the ``dataloader`` study; the defaults are the ``full`` profile (``cpu`` trims
some rounds)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfulab.analytic.config import preset
from mfulab.errors import ParameterError
from mfulab.measure.corpus import FORMATS
from mfulab.studykit import verdicts
from mfulab.studykit.params import StudyParams, calibration_param, param

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
# The raw figures above, each the cost of one file opened by one client (B11's analysis at the
# case study's job, ``training_gain.network_at_case_study``): Lustre stat 0.4 ms, Lustre create
# 2 ms, Aalto's older Lustre 13 ms per small file.
PUBLISHED_FILE_LATENCIES_S = (0.4e-3, 2e-3, 13e-3)
# Bytes of text per file when every sample is its own file: the article states none. This
# corpus's documents are ~600 B; 4 KiB and 64 KiB span a web page to a long document (our
# assumption; fewer bytes per file means more files per step, so 600 B is the hard case).
FILE_BYTES_GRID = (600, 4096, 65536)
# The small-file loader's workers before the case study's change (§5.2 step 4 raised them to 12
# together with tar shards; the count before is unstated): inline (0, PyTorch's default), a few,
# and the 12 it ended with.
SMALL_FILE_WORKERS = (0, 2, 4, 12)

# B11's cold ratio pits two resources against each other: the disk's latency (JSON files: one
# random read per file) and the CPU (tar: Python's tarfile parses every member). A neighbour's
# load slows one and not the other, so the ratio moves between fresh runs more than a ratio of
# two CPU-bound timings (timing.RUN_TO_RUN_DRIFT, 5%): 1.20× on the idle 2-core box and 1.02×
# with four runnable processes on its two cores, in two fresh runs while this study was built.
FORMAT_RATIO_DRIFT = 0.2

# B12's mechanism (``contention``): the reads beside a disk writer over the reads beside a
# memory writer, a ratio of a disk-bound and a CPU-bound reading like B11's cold ratio. An
# assumption (10%), not yet measured over fresh runs: the ratio is not a headline metric.
CONTENTION_DRIFT = 0.10

# B12's magnitude at the case study's scale (article B §5: a 7B model on 64 A100s, stated.py):
# the spike of a synchronous checkpoint is the bytes each node writes over its write bandwidth.
# - Bytes per parameter in a checkpoint: bf16 weights (2) and AdamW's fp32 master weights,
#   momentum and variance (4 + 4 + 4) = 14. ZeRO (Rajbhandari et al. 2020, §3.1) counts
#   2 + 2 + 12 bytes per parameter for mixed-precision Adam; the 2 bytes of gradients are not saved.
CKPT_BYTES_PER_PARAM = 14.0
# - 8 A100s per node (HGX/DGX A100), so 64 cards are 8 nodes; how the case study saved is not said:
#   8 writing nodes is a sharded checkpoint (each node writes its share: Megatron's distributed
#   optimizer, torch.distributed.checkpoint), 1 is one rank writing everything. Both are in the
#   table; sharded is the default because 7B × 16 B of training state (weights, gradients, AdamW)
#   does not fit one 80 GB A100: the state must have been sharded across the cards.
CKPT_GPUS_PER_NODE = 8
# - Write bandwidth per node: 3.8 GB/s, the rated sequential write of one PCIe 4.0 datacentre U.2
#   NVMe drive (Samsung PM1733/PM1735 U.2: 6.4 GB/s read, 3.8 GB/s write; Hardwareluxx, November
#   2019). A DGX A100 320GB carries 15 TB of NVMe data drives (4 × 3.84 TB U.2; Microway, "DGX A100
#   review"), the 640GB one (A100 80GB, the case study's cards) 30 TB (8 × 3.84 TB, NVIDIA's DGX
#   A100 datasheet): up to 8 × 3.8 = 30.4 GB/s striped; a shared parallel file system gives each
#   client a share of its aggregate, often less. Hence the sweep.
CKPT_WRITE_GB_PER_S = 3.8
CKPT_WRITE_SWEEP_GB_PER_S = (1.0, 2.0, 3.8, 7.6, 15.2, 30.4)
# PCIe 4.0 x16, one direction: 16 GT/s × 16 lanes × 128/130 (encoding) / 8 bits = 31.5 GB/s (PCI-SIG
# PCIe 4.0 base specification): the GPU → host copy an asynchronous checkpoint still waits for.
PCIE4_X16_GB_PER_S = 31.5


@dataclass(frozen=True)
class Params(StudyParams):
    device: str = param("auto", "auto | cpu | cuda (cuda: pin_memory and non_blocking copies)")
    calibration: str = calibration_param()
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
    drop_metadata: bool = param(
        True,
        "B11 cold rounds: also drop the kernel's cached directory entries and inodes before each "
        "epoch (vm.drop_caches = 2: root only, system-wide; elsewhere the data pages only)",
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
        20, "B12: interleaved rounds of a step with and without a synchronous checkpoint", unit="rounds"
    )
    checkpoint_batch_rows: int = param(
        1,
        "B12: sequences per step in the with/without-checkpoint A/B (a short step: does the write "
        "lengthen it, not the case study's ratio)",
        unit="sequences",
        positive=True,
    )
    fsync_probe_mib: int = param(
        64,
        "B12: bytes written and fsync-ed to measure this machine's write bandwidth",
        unit="MiB",
        positive=True,
    )
    ckpt_bytes_per_param: float = param(
        CKPT_BYTES_PER_PARAM,
        "B12 at the case study's scale: checkpoint bytes per parameter, bf16 weights + AdamW fp32 "
        "master, momentum, variance (source in params.py)",
        unit="bytes",
        positive=True,
    )
    ckpt_gpus_per_node: int = param(
        CKPT_GPUS_PER_NODE, "B12 at the case study's scale: A100s per node", unit="cards", positive=True
    )
    ckpt_save: str = param(
        "stated layout",
        "B12 at the case study's scale: how the checkpoint is written. 'stated layout': the article's "
        "ZeRO-2 + TP 4, the replicated bf16 weights written once by data-parallel rank 0's tensor-parallel "
        "group (one node), the optimizer shards by every card (DeepSpeed's ZeRO checkpoint; Megatron "
        "without fully parallel save); 'even': ckpt_writing_nodes nodes write equal shares (a fully "
        "parallel save)",
        choices=("stated layout", "even"),
    )
    ckpt_writing_nodes: int = param(
        8,
        "B12 at the case study's scale, ckpt_save = 'even': nodes that each write an equal share of the "
        "checkpoint (8: every node of the 64 cards; 1: one writer)",
        unit="nodes",
        positive=True,
    )
    ckpt_write_gb_per_s: float = param(
        CKPT_WRITE_GB_PER_S,
        "B12 at the case study's scale: write bandwidth per node (one PCIe 4.0 NVMe drive; sources in "
        "params.py)",
        unit="GB/s",
        positive=True,
    )
    ckpt_write_sweep_gb_per_s: tuple[float, ...] = param(
        list(CKPT_WRITE_SWEEP_GB_PER_S),
        "B12: write bandwidths per node of the sensitivity table",
        unit="GB/s",
    )
    disk_probe_mib: float = param(
        64,
        "B11: probe file written next to the corpus and read cold, sequentially and at random 4 KiB "
        "offsets, to characterise the disk (0: no probe)",
        unit="MiB",
        non_negative=True,
    )
    disk_random_reads: int = param(
        400, "B11: 4 KiB random reads of the disk probe", unit="reads", positive=True
    )
    contention_rounds: int = param(
        5,
        "B12's mechanism: rounds of cold reads of the small JSON files alone, beside a disk writer and "
        "beside a memory writer, in a shuffled order (0: not measured)",
        unit="rounds",
        non_negative=True,
    )
    contention_files: int = param(
        4000, "B12's mechanism: small JSON files read per condition and round", unit="files", positive=True
    )
    contention_chunk_mib: float = param(
        16, "B12's mechanism: bytes the writer writes between fsyncs", unit="MiB", positive=True
    )
    contention_drift: float = param(
        CONTENTION_DRIFT,
        "B12's mechanism: run-to-run drift assumed for the disk / memory writer ratio, on each side",
        unit="fraction",
        non_negative=True,
    )
    stall_emulated_step_s: float = param(
        0.005, "also stall runs whose step is a timed wait this long (0: none)", unit="s", non_negative=True
    )
    hiding_workers: tuple[int, ...] = param(
        [0, 1, 2, 4],
        "B11's network model checked: DataLoader worker counts reading the JSON files behind an "
        "injected per-file latency, with an emulated step (empty: not measured)",
        unit="processes",
    )
    hiding_latency_s: float = param(
        0.004,
        "B11's network model checked: latency injected before each file is read (a sleep: the core "
        "is free, as in a remote file system's round trip)",
        unit="s",
        positive=True,
    )
    hiding_batch: int = param(
        8, "B11's network model checked: samples (files) per batch", unit="samples", positive=True
    )
    hiding_step_s: float = param(
        0.024,
        "B11's network model checked: the emulated step (a timed wait); between the batch's opens "
        "with 1 worker and with 2, so one count shows a wait and the next hides it",
        unit="s",
        positive=True,
    )
    hiding_steps: int = param(
        12, "B11's network model checked: steps timed per run, after the warm-up", unit="steps", positive=True
    )
    hiding_warmup_steps: int = param(
        3,
        "B11's network model checked: steps left out at the start of each run (workers starting, the "
        "queue's first fill)",
        unit="steps",
        non_negative=True,
    )
    hiding_rounds: int = param(
        3, "B11's network model checked: rounds, every worker count once per round", unit="rounds"
    )
    prefetch_factors: tuple[int, ...] = param(
        [1, 2, 4, 8],
        "B11's prefetch_factor: the values compared, smallest and largest decide (empty: not measured)",
        unit="batches per worker",
    )
    prefetch_workers: int = param(
        2, "B11's prefetch_factor: DataLoader workers", unit="processes", positive=True
    )
    prefetch_batch: int = param(4, "B11's prefetch_factor: samples per batch", unit="samples", positive=True)
    prefetch_step_s: float = param(
        0.02, "B11's prefetch_factor: the emulated step (a timed wait)", unit="s", positive=True
    )
    prefetch_base_s: float = param(
        0.002, "B11's prefetch_factor, bursty loader: an ordinary batch's load time", unit="s", positive=True
    )
    prefetch_burst_s: float = param(
        0.12,
        "B11's prefetch_factor, bursty loader: a slow batch's load time (6 steps: hidden from 4 "
        "batches ahead per worker with 2 workers, by the model)",
        unit="s",
        positive=True,
    )
    prefetch_burst_every: int = param(
        8,
        "B11's prefetch_factor, bursty loader: one slow batch in this many (the mean load stays "
        "below the workers' time)",
        unit="batches",
        positive=True,
    )
    prefetch_uniform_s: float = param(
        0.06,
        "B11's prefetch_factor, uniformly slow loader: every batch's load time (above workers × step)",
        unit="s",
        positive=True,
    )
    prefetch_steps: int = param(
        48, "B11's prefetch_factor: steps timed per run, after the warm-up", unit="steps", positive=True
    )
    prefetch_warmup_steps: int = param(
        8,
        "B11's prefetch_factor: steps left out at the start of each run (the queue's first fill)",
        unit="steps",
        non_negative=True,
    )
    prefetch_rounds: int = param(
        3, "B11's prefetch_factor: rounds, every case × value once per round", unit="rounds", positive=True
    )
    decode_images: int = param(
        40,
        "B11's image job: JPEGs decoded and augmented per round on one core (0: not measured)",
        unit="images",
        non_negative=True,
    )
    decode_rounds: int = param(5, "B11's image job: rounds of the decode probe", unit="rounds", positive=True)
    tokenizer_vocab: int = param(
        8192,
        "B11's text job: vocabulary of the byte-level BPE trained on the corpus",
        unit="tokens",
        positive=True,
    )
    tokenizer_rounds: int = param(
        3,
        "B11's text job: timed passes of the BPE over the corpus, one thread (0: not measured)",
        unit="rounds",
    )
    tar_reader_rounds: int = param(
        5,
        "B11's tar readers apart (tar_readers): warm interleaved rounds of small files, webdataset, "
        "tarfile streaming and an indexed tar reader (0: not measured)",
        unit="rounds",
    )
    nonzero_share: float = param(
        verdicts.B2_PRESENT_SHARE,
        "B2: a category of step time counts as non-zero above this share of the run's time "
        "(the course's one floor for B2, as chapters 01 and 07; a batch taken from a Python list "
        "stays far below it)",
        unit="fraction",
        positive=True,
    )

    def predicted_peak_bytes(self) -> float | None:
        """The stall run trains ``stall_preset`` with AdamW in fp32 (``memory.step_peak_bytes``,
        SDPA attention) on one batch at a time; the loaders' own batches stay in host memory.
        ``None`` on a CPU."""
        if self.device == "cpu":
            return None
        from mfulab.analytic.config import preset
        from mfulab.analytic.memory import step_peak_bytes

        cfg = preset(self.stall_preset).with_(seq_len=self.seq_len, vocab_size=256)
        return step_peak_bytes(
            cfg, micro_batch=self.batch_size, activation_bytes_per_elem=4, attention="fused", optimizer=True
        )["total_bytes"]

    def check(self) -> None:
        self.require("epochs", self.epochs >= 2, "an integer ≥ 2 (the second epoch measures the restart)")
        self.require("cold_rounds", self.cold_rounds >= 2, "an integer ≥ 2 (an interval needs rounds)")
        self.require("checkpoint_rounds", self.checkpoint_rounds >= 2, "an integer ≥ 2")
        self.require(
            "contention_rounds",
            self.contention_rounds == 0 or self.contention_rounds >= 2,
            "0 (not measured) or an integer ≥ 2 (an interval needs rounds)",
        )
        self.require_choice("formats", FORMATS)
        self.require("hiding_rounds", self.hiding_rounds >= 1, "an integer ≥ 1")
        self.require(
            "prefetch_factors",
            not self.prefetch_factors
            or (len(set(self.prefetch_factors)) >= 2 and min(self.prefetch_factors) >= 1),
            "empty, or two or more distinct values ≥ 1 (the smallest and the largest are compared)",
        )
        self.require(
            "hiding_workers",
            all(w >= 0 for w in self.hiding_workers),
            "a list of non-negative integers (empty: not measured)",
        )
        self.require_non_negative("per_file_latency_sweep_s")
        self.require_positive("ckpt_write_sweep_gb_per_s")
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
