"""Parameters of the ``mfu`` study; the defaults are the laptop (``cpu``) profile."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import ATTENTION_IMPLS, preset
from mfulab.studykit import verdicts
from mfulab.studykit.params import DTYPES, OneDevice, PresetModel, StudyParams, calibration_param, param


@dataclass(frozen=True)
class Params(OneDevice, PresetModel, StudyParams):
    preset: str = param("cpu-small", "the model trained in the measured run (a config.preset name)")
    seq_len: int = param(256, "tokens per sequence", unit="tokens", positive=True)
    micro_batch: int = param(8, "sequences per step", unit="sequences", positive=True)
    steps: int = param(20, "measured steps after warm-up", unit="steps", positive=True)
    warmup_steps: int = param(
        3,
        "steps left out of the steady state (still part of the job's wall clock)",
        unit="steps",
        non_negative=True,
    )
    device: str = param("auto", "auto | cpu | cuda")
    dtype: str = param("fp32", "fp32 | bf16 | fp16 (autocast); also the matmul ceiling's dtype")
    attn_impl: str = param("sdpa", "sdpa | naive")
    profile_steps: int = param(
        3,
        "steps profiled by torch.profiler after the timed run (operator breakdown and trace)",
        unit="steps",
        positive=True,
    )
    trace_max_bytes: int = param(
        2_000_000,
        "cap on the exported trace (gzipped Chrome/Perfetto JSON); deeper ops are dropped past it",
        unit="bytes",
        positive=True,
    )
    ceiling_probe_every: int = param(
        5,
        "the calibration's best matmul is timed again in the training process before the job, "
        "after every this many steps and after the job, off the job's clock: the headline's "
        "denominator (0: before and after only)",
        unit="steps",
        non_negative=True,
    )
    wait_steps: int = param(
        5,
        "steps of the waits demo (the run again without and with a sleeping loader; 0: none)",
        unit="steps",
        non_negative=True,
    )
    wait_over_compute: float = param(
        0.5,
        "the waits demo's loader sleeps this many times the run's median compute time per step",
        unit="× compute time",
        positive=True,
    )
    sweep_d_models: tuple[int, ...] = param(
        [128, 256, 512],
        "the shape sweep's widths, at the run's seq_len (the tokens per step and the head width kept)",
        unit="d_model",
        positive=True,
    )
    sweep_seq_lens: tuple[int, ...] = param(
        [1024, 2048],
        "the shape sweep's sequence lengths, at the preset's d_model (the tokens per step kept: fewer "
        "sequences)",
        unit="tokens",
        positive=True,
    )
    sweep_profile_steps: int = param(2, "steps profiled per shape of the sweep", unit="steps", positive=True)
    num_threads: int = param(0, "torch threads (0: torch's default)", unit="threads", non_negative=True)
    calibration: str = calibration_param()
    b2_present_share: float = param(
        verdicts.B2_PRESENT_SHARE,
        "B2: a category counts as present in the run when it takes at least this share of the job's "
        "wall clock (a smaller one costs under 1% of the job's MFU: too small to show as a loss)",
        unit="fraction of the wall clock",
        positive=True,
    )
    convention_presets: tuple[str, ...] = param(
        ["gpt2-124m", "gpt2-1.5b", "llama2-7b", "llama2-70b", "gpt3-175b"],
        "presets of the FLOPs-convention table",
    )
    convention_seq_lens: tuple[int, ...] = param(
        [512, 1024, 2048, 4096, 8192, 32768],
        "sequence lengths of the FLOPs-convention table",
        unit="tokens",
        positive=True,
    )

    def check(self) -> None:
        preset(self.preset)
        for name in self.convention_presets:
            preset(name)
        self.require(
            "convention_presets", len(self.convention_presets) > 0, "a non-empty list of preset names"
        )
        self.require("b2_present_share", self.b2_present_share < 1, "a fraction of the wall clock below 1")
        head_width = preset(self.preset).d_model // preset(self.preset).n_heads
        self.require(
            "sweep_d_models",
            all(d % head_width == 0 for d in self.sweep_d_models),
            f"multiples of the preset's head width {head_width}",
        )
        self.require_choice("dtype", DTYPES)
        self.require_choice("attn_impl", tuple(ATTENTION_IMPLS))

    def predicted_peak_bytes(self) -> float:
        """The training step with AdamW (``memory.step_peak_bytes``): autocast keeps the
        activations in the low precision, fp32 keeps them in 4 bytes."""
        from mfulab.analytic.memory import step_peak_bytes

        return step_peak_bytes(
            self.model_config(),
            micro_batch=self.micro_batch,
            activation_bytes_per_elem=4 if self.dtype == "fp32" else 2,
            attention=ATTENTION_IMPLS[self.attn_impl],
            optimizer=True,
        )["total_bytes"]
