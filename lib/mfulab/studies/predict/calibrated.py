"""Calibrate here, predict here: the step measured on this machine against the predictor fed by
this machine's calibration, operator class by operator class (``opprofile`` categories)."""

from __future__ import annotations

from mfulab.analytic import step
from mfulab.analytic.config import TransformerConfig

# predictor term -> the measured categories it stands for
CLASSES = {
    "matmul_s": ("matmul",),
    "attention_s": ("attention core",),
    "memory_bound_s": ("norm / elementwise",),
    "optimizer_s": ("optimizer",),
}


# torch.optim.AdamW's single-tensor path (torch/optim/adam.py ``_single_tensor_adam``, the one
# CPU tensors take), bytes per fp32 parameter, pass by pass: param.mul_ (weight decay) 2, exp_avg
# .lerp_(grad) 3, exp_avg_sq.mul_ 2, .addcmul_(grad, grad) 3, sqrt 2, / bias correction 2,
# .add_(eps) 2, param.addcdiv_ 4: 20 passes of 4 bytes. Under autocast the parameters, their
# gradients and the moments stay fp32: the same count.
EAGER_ADAMW_BYTES_PER_PARAM = 20 * 4


def step_assumptions(dtype: str) -> dict:
    """The measured step's own precision and optimizer: fp32 keeps activations, messages and
    gradients in 4 bytes; the optimizer is eager fp32 AdamW at any dtype
    (:data:`EAGER_ADAMW_BYTES_PER_PARAM`, not the fused mixed-precision Adam of the default)."""
    out = {"optimizer_bytes_per_param": EAGER_ADAMW_BYTES_PER_PARAM}
    if dtype == "fp32":
        out |= {"bytes_per_elem": 4, "grad_bytes_per_elem": 4}
    return out


def prediction(records: dict, **assumptions) -> dict:
    """The predictor's step for the measured configuration, from the calibration file."""
    p = records["params"]
    cfg = TransformerConfig(**records["config"])
    return step.step_time(
        cfg,
        n_devices=1,
        micro_batch=p["micro_batch"],
        global_batch=p["micro_batch"],
        device=None,
        calibration={
            "file": records["calibration"]["file"],
            "device_name": records["device_name"],
            "matmul": records["calibration"]["matmul"],
            "bandwidth": records["calibration"]["bandwidth"],
        },
        dtype=p["dtype"],
        attention="fused",
        dropout=False,
        **{**step_assumptions(p["dtype"]), **assumptions},
    )


def measured_classes(records: dict) -> dict:
    """Seconds per category in the profiled steps, scaled to the timed median step."""
    prof = records["op_profile"]
    steps = prof["steps"]
    wall = sum(s["wall_s"] for s in steps)
    scale = records["step"]["median_s"] / (wall / len(steps))
    return {c: scale * sum(s["categories_s"][c] for s in steps) / len(steps) for c in prof["categories"]}


def comparison(records: dict, **assumptions):
    """Predicted vs measured seconds per class, the rest, and the whole step."""
    import pandas as pd

    pred = prediction(records, **assumptions)
    meas = measured_classes(records)
    rows = []
    for term, cats in CLASSES.items():
        rows.append(
            {
                "class": term.removesuffix("_s"),
                "predicted_s": pred[term],
                "measured_s": sum(meas[c] for c in cats),
            }
        )
    covered = {c for cats in CLASSES.values() for c in cats}
    rows.append(
        {
            "class": "everything else (data, idle, other ops; predicted: data_s)",
            "predicted_s": pred["data_s"],
            "measured_s": sum(v for c, v in meas.items() if c not in covered),
        }
    )
    rows.append({"class": "step", "predicted_s": pred["step_s"], "measured_s": records["step"]["median_s"]})
    df = pd.DataFrame(rows)
    df["error"] = df.predicted_s / df.measured_s - 1
    return df
