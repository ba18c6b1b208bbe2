"""The measured run of the ``mfu`` study taken apart: the job's time split into B2's four
categories, global / local / steady-state MFU against each denominator, the waterfall of lost
FLOP/s, and why global and steady-state MFU differ (either way).

Every function reads the plain records of ``bench.measure`` (here or from another machine).
"""

from __future__ import annotations

from mfulab.analytic import devices, flops
from mfulab.analytic.config import TransformerConfig
from mfulab.errors import ParameterError
from mfulab.studykit import verdicts

HEADLINE_CONVENTION = "palm"
EXACT = "mask-aware exact"  # the model's work: flops.exact_matmul_flops_per_token(mask="causal")

# what this run times under B2's useful compute and each of its four losses
# (studykit.verdicts.B2_USEFUL, B2_CATEGORIES)
B2_TIMED = dict(
    zip(
        (verdicts.B2_USEFUL, *verdicts.B2_CATEGORIES),
        (
            "model FLOPs (mask-aware exact count) at the measured matmul ceiling",
            "forward + backward + optimizer beyond that (kernels below the ceiling)",
            "collective waits (none in one process)",
            "next batch to the device",
            "start-up, loss read-back, untimed loop overhead (no checkpoint, throttling or pinning here)",
        ),
    )
)


def cpu_isa_peak(records: dict) -> dict:
    """A CPU's datasheet-style denominator built from its ISA (``devices.cpu_peak_flops_per_s``)
    for the cores the run's threads used (its threads, at most the physical cores), with the
    sensitivity to the one assumption the count rests on (FMA units per core) and the clock the
    measured ceiling implies; or why there is none (fp32 only: CPUs' bf16 units differ by ISA)."""
    isa, dtype = records.get("cpu_isa") or {}, records["params"]["dtype"]
    why = (
        "these records predate the ISA reading (no cpu_isa)"
        if not isa
        else f"a CPU's ISA peak is fp32 only (its {dtype} units differ by ISA)"
        if dtype != "fp32"
        else "/proc/cpuinfo gave no clock or no core count"
        if not isa.get("reported_clock_hz") or not isa.get("physical_cores")
        else None
    )
    if why:
        return {
            "flops_per_s": None,
            "source": None,
            "why_none": f"no ISA peak: {why}; the measured matmul ceiling is the denominator",
        }
    cores = min(records["num_threads"], isa["physical_cores"])
    width, width_why = devices.cpu_fma_width_checked(
        isa["matmul_flags"],
        vendor=isa["vendor"],
        cpu_family=isa["cpu_family"],
        cpu_model=isa.get("cpu_model_number"),
        cores=cores,
        measured_flops_per_s=records["ceiling"]["best_flops_per_s"],
    )
    clock_hz, units = isa["reported_clock_hz"], devices.CPU_FMA_UNITS_PER_CORE
    peak = devices.cpu_peak_flops_per_s(cores=cores, clock_hz=clock_hz, fma_width_bits=width)
    lanes = width // 32
    flops_per_cycle = peak / (cores * clock_hz)
    return {
        "flops_per_s": peak,
        "source": f"this CPU's ISA: {cores} cores × {clock_hz / 1e9:.3g} GHz "
        f"({isa.get('clock_source') or 'reported'}) × {units} FMA units "
        f"× {lanes} fp32 lanes ({width}-bit) × 2 FLOPs ({devices.CPU_FMA_SOURCE})"
        + (f"; FMA width: {width_why}" if width_why else ""),
        "why_none": None,
        "dtype": dtype,
        "cores": cores,
        "clock_hz": clock_hz,
        "fma_width_bits": width,
        "fma_width_corrected_because": width_why,
        "fma_units_per_core": units,
        "one_fma_unit_flops_per_s": devices.cpu_peak_flops_per_s(
            cores=cores, clock_hz=clock_hz, fma_width_bits=width, fma_units_per_core=1
        ),
        "clock_implied_by_ceiling_hz": records["ceiling"]["best_flops_per_s"] / (cores * flops_per_cycle),
    }


def peak_label(records: dict) -> str:
    """What the top denominator is called: a GPU's datasheet peak, a CPU's ISA peak."""
    return "datasheet peak" if records["device"] == "cuda" else "ISA peak"


def datasheet_peak(records: dict) -> dict:
    """The datasheet denominator for the run's device and dtype (a CPU's from its ISA,
    :func:`cpu_isa_peak`), or why there is none."""
    if records["device"] != "cuda":
        return cpu_isa_peak(records)
    dtype = records["params"]["dtype"]
    try:
        spec = devices.device_spec(records["device_name"])
        return {
            "flops_per_s": devices.peak_flops_per_s(spec.key, dtype),
            "source": spec.source,
            "device_key": spec.key,
            "dtype": dtype,
            "why_none": None,
        }
    except ParameterError as err:
        return {"flops_per_s": None, "source": None, "why_none": str(err)}


def run_ceiling(records: dict) -> dict:
    """The matmul ceiling this run divides by: the median of the probes timed in the training
    process, interleaved with its steps (``bench.train_run``), where the run has them, else the
    calibration's figure (records measured before the probes existed). The calibration's figure is
    kept beside it: the gap between the two is the device's, not the step's."""
    import numpy as np

    calibrated = records["ceiling"]["best_flops_per_s"]
    probes = [p["flops_per_s"] for p in records["train"].get("ceiling_probes") or []]
    if not probes:
        return {
            "flops_per_s": calibrated,
            "source": "calibration",
            "calibrated_flops_per_s": calibrated,
            "lo_flops_per_s": calibrated,
            "hi_flops_per_s": calibrated,
            "probes": 0,
        }
    return {
        "flops_per_s": float(np.median(probes)),
        "source": "in-process",
        "calibrated_flops_per_s": calibrated,
        "lo_flops_per_s": min(probes),
        "hi_flops_per_s": max(probes),
        "probes": len(probes),
    }


def breakdown(records: dict, *, convention: str = HEADLINE_CONVENTION, ceiling: dict | None = None) -> dict:
    """Job-level time split (B2's four categories) and global vs local MFU.

    Global MFU: model FLOPs of every step / (wall clock of the whole job × peak).
    Local MFU: the same FLOPs / (time inside forward+backward+optimizer × peak).
    Steady-state numbers use the median step after warm-up. The datasheet (or ISA) peak is a
    denominator only where it is at least the measured ceiling (``peak_below_ceiling_flops_per_s``
    keeps one that is not, for the text that says why it is not used). The ceiling is the one
    timed in the training process (:func:`run_ceiling`; ``ceiling``: another run's, for the waits
    demo's runs, which are not probed).
    """
    import numpy as np

    cfg = TransformerConfig(**records["config"])
    tr = records["train"]
    rows = tr["rows"]
    flops_per_step = flops.flops_per_token(cfg, convention=convention) * tr["tokens_per_step"]
    model_flops = flops_per_step * len(rows)
    compute_s = sum(r["compute_s"] for r in rows)
    data_s = sum(r["data_s"] for r in rows)
    other_s = sum(r["other_s"] for r in rows)
    loop_overhead_s = sum(r["period_s"] - r["data_s"] - r["compute_s"] - r["other_s"] for r in rows)
    wall_s = tr["job_wall_s"]
    startup_readback_s = tr["setup_s"] + other_s
    steady_periods_s = [r["period_s"] for r in rows if not r["warmup"]]
    steady_period_s = float(np.median(steady_periods_s))
    steady_compute_s = float(np.median([r["compute_s"] for r in rows if not r["warmup"]]))
    run = run_ceiling(records) if ceiling is None else ceiling
    ceiling, calibrated = run["flops_per_s"], run["calibrated_flops_per_s"]
    sheet = datasheet_peak(records)
    # a peak is a denominator only if it bounds what the device measurably does: a CPU's ISA
    # peak at the kernel's reported clock can sit below the matmul ceiling (the cores turbo
    # higher), and an MFU over it would overstate; the ceiling is then the top denominator
    peak_bounds_ceiling = sheet["flops_per_s"] is not None and sheet["flops_per_s"] >= max(
        ceiling, calibrated
    )
    out = {
        "convention": convention,
        "flops_per_step": flops_per_step,
        "model_flops": model_flops,
        "job_wall_s": wall_s,
        "compute_s": compute_s,
        "data_s": data_s,
        "communication_s": 0.0,
        "startup_readback_s": startup_readback_s,
        "setup_s": tr["setup_s"],
        "other_s": other_s,
        "loop_overhead_s": loop_overhead_s,
        "unaccounted_s": wall_s - compute_s - data_s - startup_readback_s,
        "global_flops_per_s": model_flops / wall_s,
        "local_flops_per_s": model_flops / compute_s,
        "steady_step_s": steady_period_s,
        "steady_step_q1_s": float(np.percentile(steady_periods_s, 25)),
        "steady_step_q3_s": float(np.percentile(steady_periods_s, 75)),
        "steady_tokens_per_s": tr["tokens_per_step"] / steady_period_s,
        "steady_flops_per_s": flops_per_step / steady_period_s,
        "steady_local_flops_per_s": flops_per_step / steady_compute_s,
        "ceiling_flops_per_s": ceiling,
        "ceiling_source": run["source"],
        "calibrated_ceiling_flops_per_s": calibrated,
        "datasheet_flops_per_s": sheet["flops_per_s"] if peak_bounds_ceiling else None,
        "peak_below_ceiling_flops_per_s": None if peak_bounds_ceiling else sheet["flops_per_s"],
    }
    for denom_name, denom in (("ceiling", ceiling), ("datasheet", out["datasheet_flops_per_s"])):
        for kind in ("global", "local", "steady", "steady_local"):
            out[f"{kind}_mfu_vs_{denom_name}"] = out[f"{kind}_flops_per_s"] / denom if denom else None
    return out


def b2_category_seconds(records: dict) -> dict[str, float]:
    """The job's wall clock as B2's useful compute and four losses (seconds; they sum to the
    wall): the compute phases split at the measured ceiling (``verdicts.b2_compute_split``), the
    useful part the model's work by the mask-aware exact count (a causal query counts only the
    keys it sees), not the headline convention's more generous count."""
    b = breakdown(records)
    model_work_flops = b["model_flops"] / exact_count_ratio(records, b["convention"])  # mask-aware exact
    compute = verdicts.b2_compute_split(b["compute_s"], model_work_flops, b["ceiling_flops_per_s"])
    return {
        **compute,
        "communication wait": b["communication_s"],
        "data wait": b["data_s"],
        "scheduling waste": b["startup_readback_s"] + b["unaccounted_s"],
    }


def exact_count_ratio(records: dict, convention: str = HEADLINE_CONVENTION) -> float:
    """The headline convention's FLOPs per token over the mask-aware exact count of the run's
    model (``flops.exact_matmul_flops_per_token``, causal: a query counts only the keys it sees):
    an MFU under the convention divided by it is the MFU under the exact count (1 for
    :data:`EXACT` itself)."""
    if convention == EXACT:
        return 1.0
    cfg = TransformerConfig(**records["config"])
    headline_flops = flops.flops_per_token(cfg, convention=convention)
    return headline_flops / flops.exact_matmul_flops_per_token(cfg, mask="causal")


def exact_breakdown(records: dict, b: dict | None = None) -> dict:
    """``breakdown`` with the model's work counted by the mask-aware exact count instead of the
    headline convention: every model-FLOPs figure and MFU divided by ``exact_count_ratio``, the
    times and denominators unchanged (the waterfalls draw it, so that their slow operators match
    B2's split)."""
    b = breakdown(records) if b is None else b
    ratio = exact_count_ratio(records, b["convention"])
    fixed = ("ceiling_", "calibrated_", "datasheet_", "peak_below_")
    scaled = {
        k: v / ratio
        for k, v in b.items()
        if v is not None
        and (k in ("flops_per_step", "model_flops") or "_mfu_vs_" in k or k.endswith("_flops_per_s"))
        and not k.startswith(fixed)
    }
    return {**b, **scaled, "convention": EXACT}


def b2_split(records: dict, *, present_share: float):
    """B2's useful compute and four losses with their share of the wall; a loss is ``present``
    when its share is above zero and at least ``present_share`` (a loss below it is too small for
    this run to show); useful compute is not a loss (``present`` is left empty)."""
    import pandas as pd

    seconds = b2_category_seconds(records)
    wall_s = records["train"]["job_wall_s"]
    df = pd.DataFrame(
        [
            {"category": k, "what_is_timed": B2_TIMED[k], "seconds": v, "share_of_wall": v / wall_s}
            for k, v in seconds.items()
        ]
    )
    loss = df.category != verdicts.B2_USEFUL
    present = loss & (df.share_of_wall > 0) & (df.share_of_wall >= present_share)
    # blank for useful compute: the flag says whether a loss shows, and useful compute is none
    df["present"] = present.astype(object).where(loss, None)
    return df


def global_vs_steady(records: dict):
    """Why global and steady-state MFU differ, as an exact product of three factors.

    global / steady = (Σ step periods / wall) × (mean measured step / mean of all steps)
                      × (median measured step / mean measured step):
    start-up before the first step only lowers global; warm-up steps lower it when they are
    slower than the measured ones and raise it when they are faster (nothing to compile or
    autotune, and a machine that slows down during the run); and the steady figure is a
    *median* while global is a *mean*, so a few fast steps (median above mean) raise global.
    """
    import numpy as np
    import pandas as pd

    tr = records["train"]
    all_periods_s = np.array([r["period_s"] for r in tr["rows"]])
    steady_periods_s = np.array([r["period_s"] for r in tr["rows"] if not r["warmup"]])
    factors = [
        ("steps' share of the job wall (start-up excluded)", all_periods_s.sum() / tr["job_wall_s"]),
        ("mean measured step / mean of all steps (warm-up)", steady_periods_s.mean() / all_periods_s.mean()),
        ("median / mean of the measured steps", float(np.median(steady_periods_s)) / steady_periods_s.mean()),
    ]
    keys = ["startup", "warmup", "median_over_mean"]
    df = pd.DataFrame([{"key": k, "factor": name, "value": float(v)} for k, (name, v) in zip(keys, factors)])
    b = breakdown(records)
    df.loc[len(df)] = {
        "key": "product",
        "factor": "product = global MFU / steady-state MFU",
        "value": b["global_flops_per_s"] / b["steady_flops_per_s"],
    }
    return df.set_index("key")


def global_vs_steady_note(factors) -> str:
    """The factors of ``global_vs_steady`` in words (markdown), naming the one that moves
    global MFU most away from steady-state MFU in this run."""
    import math

    v = factors.value
    warm = 1 / v["warmup"] - 1  # mean of all steps / mean of the measured steps − 1
    words = {
        "startup": f"start-up before the first step ({1 - v['startup']:.1%} of the wall clock)",
        "warmup": f"the warm-up steps (they make the mean step {abs(warm):.1%} "
        f"{'longer' if warm > 0 else 'shorter'})",
        "median_over_mean": f"the median measured step against their mean ({v['median_over_mean'] - 1:+.1%})",
    }
    largest = max(words, key=lambda k: abs(math.log(v[k])))
    product = v["product"]
    return (
        f"Global MFU is {'above' if product > 1 else 'below'} steady-state MFU here "
        f"({product - 1:+.1%}); the largest factor is {words[largest]}. The others: "
        + "; ".join(words[k] for k in words if k != largest)
        + "."
    )


def at_scale_goodput(factors) -> dict:
    """This run's global ÷ steady factors (``global_vs_steady``) with the factor a large job adds and
    this run cannot show: the share of the wall clock kept through failures and restarts, published
    for Llama 3 405B (``stated.LLAMA3_GOODPUT``: at least 0.90). At that job's failure rate global ÷
    steady lies between this run's product × 0.90 (``global_over_steady_at_llama3_failure_rate``)
    and the product itself."""
    from mfulab.studies.mfu.stated import LLAMA3_GOODPUT as g

    kept = g["effective_training_time_at_least"]
    here = float(factors.value["product"])
    return {
        "this_run_global_over_steady": here,
        "failures_and_restarts_kept_at_least": kept,
        "global_over_steady_at_llama3_failure_rate": here * kept,
        "interruptions_per_day": g["interruptions"] / g["snapshot_days"],
        "snapshot_days": g["snapshot_days"],
        "interruptions": g["interruptions"],
        "unexpected_interruptions": g["unexpected_interruptions"],
    }


def at_scale_goodput_note(factors, steady_mfu: float) -> str:
    """One paragraph (markdown): what this run's steady MFU becomes once a large job's failures are
    counted, with the published figure and its source."""
    a = at_scale_goodput(factors)
    return (
        f"**At a cluster's scale** global MFU also pays for failures and restarts, which one process "
        f"never meets. Llama 3 405B's pre-training saw {a['interruptions']} job interruptions in a "
        f"{a['snapshot_days']}-day snapshot (about {a['interruptions_per_day']:.1f} a day; "
        f"{a['unexpected_interruptions']} of them unexpected) and kept more than "
        f"{a['failures_and_restarts_kept_at_least']:.0%} of its time training (Dubey et al. 2024, "
        f"§3.3.4). That is a fourth factor of global ÷ steady, between "
        f"{a['failures_and_restarts_kept_at_least']:.2f} and 1 at that failure rate: "
        f"this run's steady MFU of {steady_mfu:.1%} with its own factors "
        f"({a['this_run_global_over_steady']:.3f}) and that job's failure rate would report a global MFU "
        f"between {steady_mfu * a['global_over_steady_at_llama3_failure_rate']:.1%} and "
        f"{steady_mfu * a['this_run_global_over_steady']:.1%}. Checkpoint stalls are a fifth (chapter 06, "
        "B12)."
    )


def waterfall_top(records: dict, b: dict) -> tuple[tuple[str, float], list[tuple[str, float]]]:
    """Both waterfalls' first bar and the losses down to the ceiling the run divides by: the
    device's peak where it bounds the ceiling (then *ceiling below* it), else the ceiling itself,
    timed in the training process where the run has it. A calibration timed on another day is no
    loss of this job: where it differs, the chapter says so beside the waterfall, not in it."""
    ceiling = b["ceiling_flops_per_s"]
    name = (
        "matmul ceiling (this process)" if b["ceiling_source"] == "in-process" else "measured matmul ceiling"
    )
    start, losses = (name, ceiling), []
    if b["datasheet_flops_per_s"]:
        peak = peak_label(records)
        start = (peak, b["datasheet_flops_per_s"])
        losses.append((f"ceiling below {peak}", b["datasheet_flops_per_s"] - ceiling))
    return start, losses


def waterfall_losses(records: dict, b: dict | None = None) -> dict:
    """FLOP/s from the top denominator down to the achieved global model FLOP/s.

    ceiling − local = *slow operators* (kernels below the matmul ceiling: small shapes,
    non-matmul ops, launch overhead); local − global = local × (wall − compute) / wall splits
    exactly, in proportion to time, into *communication wait* (zero here: one process), *data
    wait*, *start-up + loss read-back* (building the model before the first step, reading the
    loss back and bookkeeping after each) and *untimed loop overhead* (the rest of each step's
    period). The last two are what this run has of B2's "scheduling waste" (its checkpoint
    stalls, throttled cards and CPU pinning have no counterpart in one process). ``b``: the run's
    :func:`breakdown`, where the caller has it.
    """
    b = breakdown(records) if b is None else b
    local, wall = b["local_flops_per_s"], b["job_wall_s"]
    start, losses = waterfall_top(records, b)
    losses += [
        ("slow operators", b["ceiling_flops_per_s"] - local),
        ("communication wait", local * b["communication_s"] / wall),
        ("data wait", local * b["data_s"] / wall),
        ("start-up + loss read-back", local * b["startup_readback_s"] / wall),
        ("untimed loop overhead", local * b["unaccounted_s"] / wall),
    ]
    return {
        "start": start,
        "losses": losses,
        "end": ("achieved (global)", b["global_flops_per_s"]),
        "residual_flops_per_s": start[1] - sum(v for _, v in losses) - b["global_flops_per_s"],
    }
