"""Parameters of the ``anatomy`` study; the defaults are the laptop (``cpu``) profile: 2 ranks
on gloo, the reference GPT with byte-level tokens, a corpus written in scratch space."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfulab.analytic.config import preset
from mfulab.measure.corpus import FORMATS
from mfulab.studykit import verdicts
from mfulab.studykit.params import DTYPES, PresetModel, StudyParams, calibration_param, param


@dataclass(frozen=True)
class Params(PresetModel, StudyParams):
    preset: str = param("cpu-small", "the model trained (a config.preset name; vocabulary set to 256 bytes)")
    seq_len: int = param(128, "tokens per sequence", unit="tokens", positive=True)
    micro_batch: int = param(4, "sequences per rank per step", unit="sequences", positive=True)
    nproc: int = param(2, "ranks of the DDP job (at least 2)", unit="ranks", positive=True)
    device: str = param("auto", "auto | cpu | cuda (gloo on CPU, NCCL on CUDA)")
    dtype: str = param("fp32", "fp32 | bf16 | fp16 (autocast)")
    n_samples: int = param(3000, "documents in the synthetic corpus", unit="samples", positive=True)
    mean_bytes: int = param(600, "mean document length (bytes = tokens)", unit="bytes", positive=True)
    scratch_dir: str = param("scratch/anatomy-corpus", "where the corpus is written (never under results/)")
    naive_format: str = param("json_files", "the naive rung's storage format (many small files)")
    good_format: str = param("memmap", "the format the 'format + workers' knob switches to")
    good_workers: int = param(
        1, "DataLoader workers per rank once the knob is on", unit="workers", positive=True
    )
    naive_bucket_cap_mb: float = param(
        0.0,
        "DDP bucket cap of the naive rung; 0: article B's 25 MiB scaled to this model's gradient "
        "bytes, so that it has the article's bucket count (ladder.article_bucket_caps_mib)",
        unit="MiB",
    )
    good_bucket_cap_mb: float = param(
        0.0,
        "DDP bucket cap once the buckets knob is on (with gradient_as_bucket_view and static_graph, "
        "as article B §5.2's step 2); 0: its 50 MiB scaled the same way",
        unit="MiB",
    )
    compile: bool = param(
        False, "the 'fused attention' knob also runs torch.compile (off on CPU: cold compile)"
    )
    block_steps: int = param(
        4,
        "steps per block of one rung in a round; each block writes one checkpoint, after step "
        "max(1, block_steps // 2) of the block",
        unit="steps",
        positive=True,
    )
    pin_ranks: bool = param(
        True,
        "on CPU, each rank (its threads, its loader workers) pinned to its own core, as each GPU is its "
        "rank's own: a rank waiting in an all-reduce cannot lend its core to the others",
    )
    straggler_block_steps: int = param(
        8,
        "B13: steps per block of the straggler's blocks (the straggler on in every second one; no "
        "checkpoint in them: a write beside the steps is noise to a paired difference)",
        unit="steps",
        positive=True,
    )
    checkpoint_every_blocks: int = param(
        1,
        "write the block's checkpoint in one block of every this many (1: every block); the node "
        "profile writes fewer: 8 ranks × 56 blocks of a 1 GB model and its AdamW state is ~450 GB",
        unit="blocks",
        positive=True,
    )
    checkpoint_ranks: str = param(
        "all", "which ranks write the checkpoint: all | rank0 (rank 0 alone, as a data-parallel job saves)"
    )
    rounds: int = param(6, "interleaved rounds (every rung runs one block per round)", unit="rounds")
    leave_one_out: bool = param(
        True, "also time the last rung without each knob (the leave-one-out attribution of B15's gain)"
    )
    warmup_steps: int = param(
        2, "steps per rung before the rounds (left out)", unit="steps", non_negative=True
    )
    profile_steps: int = param(
        4, "steps of the naive rung profiled by torch.profiler", unit="steps", positive=True
    )
    trace_max_bytes: int = param(
        3_000_000, "cap on each rank's exported trace (gzipped)", unit="bytes", positive=True
    )
    straggler_slowdown: float = param(
        0.08,
        "B13: the straggler rank's injected delay, as a share of the step without it: the article's "
        "throttled card (1410 → 1200 MHz: 8% per step); a spin before its forward on every second "
        "step of its blocks, the steps between its paired baseline",
        unit="fraction of a step",
        positive=True,
    )
    b2_present_share: float = param(
        verdicts.B2_PRESENT_SHARE,
        "B2: a category counts as present when it takes at least this share of the step (the "
        "course's one floor for B2, as chapters 01 and 06)",
        unit="fraction",
    )
    timeout_s: float = param(900.0, "time limit of the torchrun job", unit="s", positive=True)
    seed: int = param(0, "seed of the round orders (the same on every rank)")
    calibration: str = calibration_param()

    def check(self) -> None:
        preset(self.preset)
        self.require("nproc", self.nproc >= 2, "at least 2: one rank has no all-reduce to wait for")
        self.require_choice("dtype", DTYPES)
        self.require_choice("naive_format", FORMATS)
        self.require_choice("good_format", FORMATS)
        self.require_choice("checkpoint_ranks", ("all", "rank0"))
        self.require("rounds", self.rounds >= 3, "at least 3 (a paired interval needs several rounds)")
        self.require("naive_bucket_cap_mb", self.naive_bucket_cap_mb >= 0, "a size in MiB (0: scaled)")
        self.require("good_bucket_cap_mb", self.good_bucket_cap_mb >= 0, "a size in MiB (0: scaled)")
        self.require("b2_present_share", 0 < self.b2_present_share < 1, "a fraction between 0 and 1")
        self.require("straggler_slowdown", self.straggler_slowdown < 5, "a share of a step below 5")
        self.require(
            "scratch_dir",
            "results" not in Path(self.scratch_dir).resolve().parts,
            "a folder outside results/ (the corpus is scratch, not a result)",
        )

    def prepare(self) -> None:
        from mfulab.measure.launch import check_world_size

        self.resolve_device()
        self.require_dtype_on_device()
        check_world_size(self.nproc, self.device)

    def model_config(self):
        return PresetModel.model_config(self, vocab_size=256)  # the byte-level corpus's vocabulary

    def predicted_peak_bytes(self) -> float | None:
        """Per GPU: every rung's trainer stays resident (the rounds interleave the rungs), each
        with fp32 weights, gradients, AdamW's two moments and DDP's bucket copy of the gradients,
        4 + 4 + 8 + 4 bytes per parameter; one step at a time adds its activations and logits,
        at worst the first rung's, with naive attention (``memory.step_peak_bytes``). ``None`` on
        the host's gloo ranks (no device memory)."""
        if self.device == "cpu":
            return None
        from mfulab.analytic.flops import param_count
        from mfulab.analytic.memory import step_peak_bytes
        from mfulab.studies.anatomy.ladder import LADDER

        cfg = self.model_config()
        resident_trainer_bytes = (4 + 4 + 8 + 4) * param_count(cfg)
        worst_step_bytes = step_peak_bytes(
            cfg,
            micro_batch=self.micro_batch,
            activation_bytes_per_elem=4 if self.dtype == "fp32" else 2,
            attention="naive",
            optimizer=True,
            gradient_copies=1,  # DDP's buckets
        )["total_bytes"]
        resident = (len(LADDER) - 1) * (2 if self.leave_one_out else 1)  # the rungs, the leave-one-outs
        return resident * resident_trainer_bytes + worst_step_bytes
