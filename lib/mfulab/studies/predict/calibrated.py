"""Calibrate here, predict here: the step measured on this machine against the predictor fed by
this machine's calibration, operator class by operator class (``opprofile`` categories).

Two readings: from the calibration alone (square matmuls, a copy: what every study has), and
with the step's own ops timed alone at its shapes (``op_rates``: its GEMMs, memory-bound ops,
attention kernel and optimizer step) in place of the square-matmul fit, the copy bandwidth and
the flash share. The first says how far the calibration's two figures carry; the second, with
each op's own cost known, how the ops compose into a step.

The calibration's benchmarks are re-timed beside the step (``bench.calibration_now``) and the
first reading uses those: this box's matmul rate has moved 2.5× between hours, so a calibration
file measured in the morning says little of an evening's step. :func:`drift` puts the file's
figures beside the re-timed ones."""

from __future__ import annotations

import math

from mfulab.analytic import rates, step
from mfulab.analytic.config import TransformerConfig
from mfulab.analytic.flops import fused_attention_flops
from mfulab.studies.predict import op_rates

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


def _calibration(records: dict, *, now: bool = True) -> dict:
    """The calibration a reading uses: the benchmarks re-timed beside the step where the records
    have them (``now``), else the calibration file's."""
    if now and records.get("calibration_now"):
        src = records["calibration_now"]
        where = f"the calibration's benchmarks re-timed beside the step ({src['measured_at']})"
    else:
        src, where = records["calibration"], records["calibration"]["file"]
    return {
        "file": where,
        "device_name": records["device_name"],
        "matmul": src["matmul"],
        "bandwidth": src["bandwidth"],
    }


def drift(records: dict) -> dict | None:
    """The calibration file's matmul ceiling and copy bandwidth beside the same benchmarks
    re-timed beside the step, and the step the file alone predicts (None without a re-timing)."""
    now = records.get("calibration_now")
    if not now:
        return None
    cal = records["calibration"]
    from_file = prediction(records, calibration=_calibration(records, now=False))
    return {
        "file": cal["file"],
        "file_measured_at": cal["matmul"].get("measured_at"),
        "now_measured_at": now["measured_at"],
        "now_threads": now.get("num_threads"),
        "now_usable_cpus": now.get("usable_cpus"),
        "file_matmul_flops_per_s": cal["matmul"]["best_flops_per_s"],
        "now_matmul_flops_per_s": now["matmul"]["best_flops_per_s"],
        "file_copy_bytes_per_s": cal["bandwidth"]["plateau_bytes_per_s"],
        "now_copy_bytes_per_s": now["bandwidth"]["plateau_bytes_per_s"],
        "file_step_s": from_file["step_s"],
        "file_step_error": from_file["step_s"] / records["step"]["median_s"] - 1,
        # per class, so the file's step re-derives (the matmul class follows the fitted R∞ and t₀ of
        # the file's square matmuls, not its best ceiling alone)
        "file_classes_s": {term.removesuffix("_s"): from_file[term] for term in CLASSES},
    }


# the check scores the model only where the machine held still through the run: the interquartile
# range of the round-paired step errors no wider than the goal's half-width (15 points), so that a
# ±15% verdict on the medians is not one the rounds' spread could reverse (an assumption of ours)
PAIRED_IQR_LIMIT = 0.15


def paired_step_errors(records: dict) -> list[float] | None:
    """The first reading's step error round by round: round i's step against the step predicted
    from the calibration's benchmarks re-timed in round i (``timing.interleaved`` runs one block of
    each per round), so that a machine whose speed moves between rounds moves both sides. None
    where the records keep no per-round times (runs before ``bench.BENCHMARK_VERSION`` step 3)."""
    now, step_times = records.get("calibration_now"), records["step"].get("times_s")
    if not now or not step_times:
        return None
    mm_rows, copy = now["matmul"]["rows"], now["bandwidth"]["rows"][0]
    if not all("times_s" in r for r in [*mm_rows, copy]):
        return None
    errors = []
    for i, step_s in enumerate(step_times):
        rows_i = [{**r, "median_s": r["times_s"][i]} for r in mm_rows]
        calibration_i = {
            **_calibration(records),
            "matmul": {
                **now["matmul"],
                "rows": rows_i,
                "best_flops_per_s": max(r["flops"] / r["median_s"] for r in rows_i),
            },
            "bandwidth": {
                **now["bandwidth"],
                "plateau_bytes_per_s": copy["moved_bytes"] / copy["times_s"][i],
            },
        }
        errors.append(prediction(records, calibration=calibration_i)["step_s"] / step_s - 1)
    return errors


def paired_summary(records: dict) -> dict | None:
    """Median and quartiles of :func:`paired_step_errors`, and whether their spread lets the run
    score the model (``valid``: IQR ≤ :data:`PAIRED_IQR_LIMIT`)."""
    import numpy as np

    errors = paired_step_errors(records)
    if not errors:
        return None
    q1, median, q3 = (float(v) for v in np.percentile(errors, [25, 50, 75]))
    return {"median": median, "q1": q1, "q3": q3, "n": len(errors), "valid": q3 - q1 <= PAIRED_IQR_LIMIT}


def prediction(records: dict, *, calibration: dict | None = None, **assumptions) -> dict:
    """The predictor's step for the measured configuration, from the calibration file (or the
    ``calibration`` given: :func:`op_rate_reading`)."""
    p = records["params"]
    cfg = TransformerConfig(**records["config"])
    return step.step_time(
        cfg,
        n_devices=1,
        micro_batch=p["micro_batch"],
        global_batch=p["micro_batch"],
        device=None,
        calibration=calibration or _calibration(records),
        dtype=p["dtype"],
        attention="fused",
        dropout=False,
        **{**step_assumptions(p["dtype"]), **assumptions},
    )


def op_rate_reading(records: dict, base: dict) -> tuple[dict, dict] | None:
    """(calibration, assumptions) of the second reading, from the rates the step's ops reached
    alone (``records["op_rates"]``); ``base`` is the first reading's prediction:

    - matmul: R∞ and t₀ fitted to the step's own GEMMs (``op_rates.gemm_rows``) instead of
      square ones;
    - elementwise: the model's memory-bound bytes (from ``base``, at the copy bandwidth; the
      embedding lookup's ~2% priced alike) over the timed ops' seconds;
    - attention: the model's attention FLOPs (forward + 2.5× backward of the causal half) over
      the timed kernel's seconds, less the launch t₀ the model adds to each kernel (an infinite
      rate where the launches alone reach the timed seconds);
    - optimizer: ``optimizer_bytes_per_param`` scaled so that the term is the timed AdamW step
      (the bytes per parameter the eager optimizer would move at the copy bandwidth).

    None where the records have no op timings (older runs)."""
    ops = records.get("op_rates")
    if not ops:
        return None
    cal = _calibration(records)
    copy_bytes_per_s = cal["bandwidth"]["plateau_bytes_per_s"]
    memory_bound_s = op_rates.step_seconds(ops, ("norms", "activation", "residual", "loss"))
    attention_s = op_rates.step_seconds(ops, ("attention",))
    cfg, p = TransformerConfig(**records["config"]), records["params"]
    kernel = fused_attention_flops(
        heads_in_batch=p["micro_batch"] * cfg.n_heads, seq_len=cfg.seq_len, head_dim=cfg.head_dim
    )
    attention_flops = (kernel["forward_flops"] + kernel["backward_flops"]) * cfg.n_layers
    source = "predict's op_rates, this run"
    calibration = {
        **cal,
        "elementwise": {
            "bytes_per_s": base["memory_bound_s"] * copy_bytes_per_s / memory_bound_s,
            "source": source,
        },
    }
    rows = op_rates.gemm_rows(ops)
    if rows:  # records from before the GEMMs were timed keep the square-matmul fit
        calibration["matmul"] = {
            "dtype": p["dtype"],
            "best_flops_per_s": max(r["flops"] / r["median_s"] for r in rows),
            "rows": rows,
        }
    # the model charges each attention kernel (forward, backward) a launch t₀ beside its FLOPs, so
    # the kernel's rate is what the timed seconds leave after the launches. Where the launches alone
    # reach the timed seconds (a t₀ fitted on a busy machine), no rate matches: the term is the
    # launches alone, above the timed kernel, and the error column shows it
    launches_s = 2 * cfg.n_layers * rates.fit_matmul(calibration["matmul"]["rows"])[1]
    kernel_s = attention_s - launches_s
    attention_rate = attention_flops / kernel_s if kernel_s > 0 else math.inf
    calibration["attention"] = {"flops_per_s": attention_rate, "source": source}
    assumptions = {}
    if op_rates.OPTIMIZER in ops:
        timed_s = ops[op_rates.OPTIMIZER]["median_s"]
        assumptions["optimizer_bytes_per_param"] = EAGER_ADAMW_BYTES_PER_PARAM * timed_s / base["optimizer_s"]
    return calibration, assumptions


def measured_classes(records: dict) -> dict:
    """Seconds per category in the profiled steps, scaled to the timed median step."""
    prof = records["op_profile"]
    steps = prof["steps"]
    wall = sum(s["wall_s"] for s in steps)
    scale = records["step"]["median_s"] / (wall / len(steps))
    return {c: scale * sum(s["categories_s"][c] for s in steps) / len(steps) for c in prof["categories"]}


# the memory-bound ops the step model prices (``step_terms``: norms, the activation, the residual
# add, the loss, the embedding lookup and its scatter-add), by profiler op name; the autograd
# engine's wrappers (``...Backward0``, ``evaluate_function``) and views are bookkeeping
PRICED_ELEMENTWISE = r"gelu|layer_norm|log_softmax|nll_loss|cross_entropy|^aten::add$|embedding|index_select"
BOOKKEEPING = r"Backward0|evaluate_function|AccumulateGrad|detach|view|expand|reshape|as_strided|empty|select"


def unpriced_elementwise(records: dict, top: int = 4) -> dict:
    """The memory-bound class's ops that no term of the step model prices (the bias gradients'
    ``sum``, gradient buffers' ``fill_``, ``copy_``, in-place adds), self seconds per step scaled
    to the timed median step as :func:`measured_classes` does: ``{"total_s", "ops": [(name, s)]}``."""
    import re
    from collections import Counter

    prof = records["op_profile"]
    steps = prof["steps"]
    scale = records["step"]["median_s"] / (sum(s["wall_s"] for s in steps) / len(steps))
    seconds = Counter()
    for step_ in steps:
        for op in step_.get("ops_self_s", []):
            name = op["name"]
            if op["category"] != "norm / elementwise" or re.search(PRICED_ELEMENTWISE, name):
                continue
            if re.search(BOOKKEEPING, name):
                continue
            seconds[name] += scale * op["self_s"] / len(steps)
    return {"total_s": sum(seconds.values()), "ops": seconds.most_common(top)}


def comparison(records: dict, **assumptions):
    """Predicted vs measured seconds per class, the rest, and the whole step: ``predicted_s`` /
    ``error`` from the calibration alone, ``predicted_op_rates_s`` / ``error_op_rates`` with the
    ops' own rates (NaN where the records have none)."""
    import numpy as np
    import pandas as pd

    pred = prediction(records, **assumptions)
    reading = op_rate_reading(records, pred)
    pred_ops = (
        prediction(records, calibration=reading[0], **{**assumptions, **reading[1]}) if reading else None
    )
    meas = measured_classes(records)

    def row(label, term, measured_s):
        second = pred_ops[term] if pred_ops else np.nan
        return {
            "class": label,
            "predicted_s": pred[term],
            "measured_s": measured_s,
            "predicted_op_rates_s": second,
        }

    rows = [row(term.removesuffix("_s"), term, sum(meas[c] for c in cats)) for term, cats in CLASSES.items()]
    covered = {c for cats in CLASSES.values() for c in cats}
    rest = sum(v for c, v in meas.items() if c not in covered)
    rows.append(row("everything else (data, idle, other ops; predicted: data_s)", "data_s", rest))
    rows.append(row("step", "step_s", records["step"]["median_s"]))
    df = pd.DataFrame(rows)
    df["error"] = df.predicted_s / df.measured_s - 1
    df["error_op_rates"] = df.predicted_op_rates_s / df.measured_s - 1
    return df


def drift_text(records) -> str:
    """The calibration file beside the benchmarks re-timed with the step, and the step the file
    alone predicts, per class (markdown)."""
    d = drift(records)
    if d is None:
        return "This run did not re-time the calibration: both readings use the calibration file."
    return (
        f"The calibration file ({d['file']}, measured {d['file_measured_at']}) has a matmul ceiling of "
        f"{d['file_matmul_flops_per_s'] / 1e9:.0f} GFLOP/s and a copy bandwidth of "
        f"{d['file_copy_bytes_per_s'] / 1e9:.1f} GB/s; the same benchmarks re-timed beside the step "
        f"({d['now_measured_at']}{_threads(d)}) reach "
        f"**{d['now_matmul_flops_per_s'] / 1e9:.0f} GFLOP/s** and "
        f"**{d['now_copy_bytes_per_s'] / 1e9:.1f} GB/s**. A shared machine's speed moves between hours: "
        f"the file alone predicts {d['file_step_s'] * 1e3:.0f} ms ({d['file_step_error']:+.0%}"
        + (
            ": " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in d["file_classes_s"].items()) + " ms"
            if d.get("file_classes_s")
            else ""
        )
        + "), a "
        "miss that says when the calibration was taken, not how the model prices a step. Both readings "
        "below use the re-timed figures."
    )


def _threads(d) -> str:
    if d.get("now_threads") is None:
        return ""
    return f", {d['now_threads']} torch threads on {d['now_usable_cpus']} usable cores"
