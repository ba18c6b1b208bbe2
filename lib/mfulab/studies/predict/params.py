"""Parameters of the ``predict`` study; the defaults are the laptop (``cpu``) profile: the
published runs are pure arithmetic, the measured step is the mfu study's reference step."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.analytic.config import preset
from mfulab.studykit.params import DTYPES, OneDevice, PresetModel, StudyParams, calibration_param, param


@dataclass(frozen=True)
class Params(OneDevice, PresetModel, StudyParams):
    device: str = param("auto", "auto | cpu | cuda: where the calibrated step is measured")
    dtype: str = param(
        "fp32", "fp32 | bf16 | fp16 (autocast) of the measured step and its matmul calibration"
    )
    calibration: str = calibration_param()
    preset: str = param("cpu-small", "the model of the step measured here (a config.preset name)")
    seq_len: int = param(256, "its tokens per sequence", unit="tokens", positive=True)
    micro_batch: int = param(8, "its sequences per step", unit="sequences", positive=True)
    steps: int = param(15, "timed steps after warm-up", unit="steps", positive=True)
    warmup_steps: int = param(3, "steps before timing", unit="steps", positive=True)
    profile_steps: int = param(3, "steps profiled for the operator-class split", unit="steps", positive=True)
    num_threads: int = param(0, "torch threads (0: torch's default)", unit="threads", non_negative=True)
    published_runs: str = param(
        "studies/predict/published_runs.yaml", "the published runs (relative to the repository)"
    )
    fit_grid: tuple[float, ...] = param(
        [0.5, 1.0, 0.0025], "matmul_share_of_mamf searched from, to, step", unit="fraction", positive=True
    )
    row_error_goal: float = param(
        0.15, "each row within this |error| of its published figure", unit="fraction"
    )
    median_error_goal: float = param(0.08, "median |error| over the rows at most", unit="fraction")

    def predicted_peak_bytes(self) -> float | None:
        """The calibrated training step with AdamW and SDPA attention (``memory.step_peak_bytes``):
        autocast keeps the activations in the low precision. ``None`` on a CPU."""
        if self.device == "cpu":
            return None
        from mfulab.analytic.memory import step_peak_bytes

        return step_peak_bytes(
            self.model_config(),
            micro_batch=self.micro_batch,
            activation_bytes_per_elem=4 if self.dtype == "fp32" else 2,
            attention="fused",
            optimizer=True,
        )["total_bytes"]

    def check(self) -> None:
        preset(self.preset)
        self.require_choice("dtype", DTYPES)
        lo, hi, step = (self.fit_grid + (0, 0, 0))[:3]
        self.require(
            "fit_grid",
            len(self.fit_grid) == 3 and 0 < lo < hi <= 1 and step < hi - lo,
            "[from, to, step] within (0, 1]",
        )
