"""The operator-level split of the ``mfu`` study's step (``records["op_profile"]``, measured by
:mod:`mfulab.measure.opprofile`): categories per profiled step, the kernel breakdown, the waterfall
built from the measured categories, the 6N check and the published MFU figures beside ours.
"""

from __future__ import annotations

from mfulab.measure import opprofile
from mfulab.studies.mfu.stated import PUBLISHED_MFU
from mfulab.studies.mfu.time_split import (
    breakdown,
    datasheet_peak,
    exact_count_ratio,
    peak_label,
    waterfall_top,
)

# the compute categories whose time is set against the ideal step (model FLOPs at the ceiling)
IDEAL_CATEGORIES = ("matmul", "attention core")


def category_flops_per_step(records: dict) -> dict[str, float]:
    """The model's work per step in the two categories that do it, by the mask-aware exact count:
    the weight GEMMs (6 · N_matmul per token: forward 2, backward 4) and the attention core (what
    a causal kernel computes, forward and backward: the exact count less the GEMMs)."""
    from mfulab.analytic import flops
    from mfulab.analytic.config import TransformerConfig

    cfg = TransformerConfig(**records["config"])
    tokens = records["train"]["tokens_per_step"]
    gemm_flops = 6 * flops.matmul_param_count(cfg) * tokens
    exact_flops = flops.exact_matmul_flops_per_token(cfg, mask="causal") * tokens
    return {"matmul": gemm_flops, "attention core": exact_flops - gemm_flops}


def category_table(records: dict):
    """Each operator category: seconds per profiled step (median over the steps), its share of
    the profiled steps' wall time, the same share of the timed run's steady step, and for the two
    categories that do the model's work (``category_flops_per_step``) the FLOP/s they reach in it,
    against the measured ceiling."""
    import numpy as np
    import pandas as pd

    prof = records["op_profile"]
    shares = opprofile.category_shares(prof)
    b = breakdown(records)
    steady_s, ceiling = b["steady_step_s"], b["ceiling_flops_per_s"]
    work = category_flops_per_step(records)
    rows = []
    for c in prof["categories"]:
        seconds = shares[c] * steady_s
        rate = work[c] / seconds if c in work and seconds > 0 else None
        rows.append(
            {
                "category": c,
                "median_s_per_profiled_step": float(np.median([s["categories_s"][c] for s in prof["steps"]])),
                "share_of_profiled_steps": shares[c],
                "estimated_s_in_steady_step": seconds,
                "model_flops_per_step": work.get(c),
                "achieved_flops_per_s": rate,
                "share_of_ceiling": rate / ceiling if rate else None,
            }
        )
    return pd.DataFrame(rows)


def profile_check(records: dict) -> dict:
    """The split's bookkeeping: per step, the categories' sum against the step's wall time by
    ``perf_counter``; the profiled step against the timed run's steady step (profiler overhead)."""
    prof = records["op_profile"]
    worst = max(abs(sum(s["categories_s"].values()) / s["perf_counter_s"] - 1) for s in prof["steps"])
    profiled_s = sorted(s["wall_s"] for s in prof["steps"])[len(prof["steps"]) // 2]
    return {
        "worst_sum_vs_wall": worst,
        "profiled_step_s": profiled_s,
        "steady_step_s": breakdown(records)["steady_step_s"],
        "profiled_over_steady": profiled_s / breakdown(records)["steady_step_s"],
    }


def operator_waterfall_losses(records: dict, shares: dict | None = None, *, b: dict | None = None) -> dict:
    """FLOP/s from the top denominator down to the achieved steady-state and global FLOP/s, the
    losses taken from the measured categories.

    With F the model FLOPs of a step, C the ceiling and T the steady step, the ideal step is
    T* = F / C and the loss C − F/T splits in proportion to where the excess time T − T* went:
    the matmul + attention time beyond T* ("compute below the ceiling"), and each other category's
    whole time (norm / elementwise, optimizer, data, communication, other ops, idle). Each
    category's time in the steady step is its share of the profiled steps × T (a profiled step's
    seconds differ from a timed one's, by the profiler's overhead and the machine's speed between
    the two phases; its shares are used, not its seconds). Steady → global is the rest of the job:
    start-up, warm-up steps, the spread of the steps (``time_split.global_vs_steady``). ``b``: the
    run's ``breakdown``, where the caller has it.
    """
    b = breakdown(records) if b is None else b
    shares = shares or opprofile.category_shares(records["op_profile"])
    ceiling, steady_s = b["ceiling_flops_per_s"], b["steady_step_s"]
    ideal_s = b["flops_per_step"] / ceiling
    excess = {
        "compute below the ceiling (matmul + attention)": sum(shares[c] for c in IDEAL_CATEGORIES) * steady_s
        - ideal_s
    }
    for c in records["op_profile"]["categories"]:
        if c not in IDEAL_CATEGORIES and (shares[c] > 0 or c == "communication"):
            excess[c if c != "idle" else "idle (outside every op)"] = shares[c] * steady_s
    total_loss = ceiling - b["steady_flops_per_s"]
    excess_s = steady_s - ideal_s
    start, losses = waterfall_top(records, b)
    losses += [(name, total_loss * t / excess_s) for name, t in excess.items()]
    losses.append(("start-up, warm-up, step spread", b["steady_flops_per_s"] - b["global_flops_per_s"]))
    return {
        "start": start,
        "losses": losses,
        "subtotal_after": list(excess)[-1],
        "end": ("achieved (global)", b["global_flops_per_s"]),
        "ideal_step_s": ideal_s,
        "residual_flops_per_s": start[1] - sum(v for _, v in losses) - b["global_flops_per_s"],
    }


def largest_losses(records: dict, b: dict | None = None) -> dict:
    """The two largest operator losses of the waterfall (pooled over the profiled steps), and
    whether the first is the largest in every profiled step taken alone (``clear``): a loss is
    named the largest only when the steps agree."""
    pooled = operator_waterfall_losses(records, b=b)["losses"]
    first, second = sorted(pooled, key=lambda kv: -kv[1])[:2]
    per_step = []
    for step in records["op_profile"]["steps"]:
        shares = {c: t / step["wall_s"] for c, t in step["categories_s"].items()}
        losses = operator_waterfall_losses(records, shares, b=b)["losses"]
        per_step.append(max(losses, key=lambda kv: kv[1])[0])
    return {"first": first, "second": second, "clear": all(name == first[0] for name in per_step)}


def six_n_check(records: dict):
    """The 6N derivation against the FLOP counter (naive attention, every matmul visible):
    forward ≈ 2 FLOPs per multiply-add × N_matmul, backward ≈ 2 × forward (input gradients +
    weight gradients), and the attention matmuls on top."""
    import pandas as pd

    from mfulab.analytic import flops
    from mfulab.analytic.config import TransformerConfig

    cfg = TransformerConfig(**records["config"])
    fc = records["flop_count"]
    n_matmul = flops.matmul_param_count(cfg)
    attention = flops.attention_flops_per_token(cfg)  # 12·L·H·Q·T: forward 4, backward 8
    rows = [
        ("forward, counted", fc["naive_forward_flops_per_token"], "2·N_matmul + 4·L·H·Q·T (attention)"),
        ("backward, counted", fc["naive_backward_flops_per_token"], "4·N_matmul + 8·L·H·Q·T"),
        (
            "forward, 2·N_matmul + attention",
            2 * n_matmul + attention / 3,
            "a multiply-add (2 FLOPs) per weight",
        ),
        (
            "backward, 4·N_matmul + attention",
            4 * n_matmul + 2 * attention / 3,
            "input grads 2N + weight grads 2N",
        ),
    ]
    df = pd.DataFrame(rows, columns=["quantity", "flops_per_token", "formula"])
    df.loc[len(df)] = (
        "backward / forward, counted",
        fc["naive_backward_flops_per_token"] / fc["naive_forward_flops_per_token"],
        "2 when every FLOP is a matmul",
    )
    return df


def published_table(records: dict):
    """Published MFU figures with their sources and conventions, and this run beside them."""
    import pandas as pd

    def figure(r):
        mfu = f"{r['mfu']:.1%}" if "mfu_hi" not in r else f"{r['mfu']:.0%}–{r['mfu_hi']:.0%}"
        kind = r.get("kind", "MFU")
        return f"{mfu} {kind}" + (f"; {r['hfu']:.1%} HFU" if r.get("hfu") else "")

    b = breakdown(records)
    denominator = peak_label(records) if b["datasheet_flops_per_s"] else "measured matmul ceiling (no peak)"
    rows = [
        {"system": r["system"], "figure": figure(r), "convention": r["convention"], "source": r["source"]}
        for r in PUBLISHED_MFU
    ]
    figure = f"{b['steady_mfu_vs_datasheet'] or b['steady_mfu_vs_ceiling']:.1%} MFU"
    convention = f"{b['convention']} model FLOPs, steady step, over the {denominator}"
    isa = datasheet_peak(records) if records["device"] != "cuda" else {}
    if isa.get("flops_per_s") and records["ceiling"]["best_flops_per_s"] > isa["flops_per_s"]:
        # the ISA peak at the reported clock is below what the cores reach: a published-style MFU
        # over it overstates; the measured ceiling bounds the real peak from below
        figure = f"≤ {b['steady_mfu_vs_ceiling']:.1%} MFU"
        convention = (
            f"{b['convention']} model FLOPs, steady step, over the measured matmul ceiling: the ISA peak at "
            f"the reported {isa['clock_hz'] / 1e9:.2f} GHz is below the ceiling (the cores run at ≥ "
            f"{isa['clock_implied_by_ceiling_hz'] / 1e9:.2f} GHz), so the true peak is unknown and the "
            f"MFU over it at most this ({b['steady_flops_per_s'] / isa['flops_per_s']:.1%} over the "
            "reported-clock peak, an overstatement)"
        )
    exact = exact_count_ratio(records, b["convention"])
    convention += f"; {b['steady_mfu_vs_ceiling'] / exact:.1%} over the ceiling by the mask-aware exact count"
    rows.append(
        {
            "system": f"for contrast, not comparable with the rows above: this run, "
            f"{records['params']['preset']} on {records['device_name']}",
            "figure": figure,
            "convention": convention,
            "source": "measured here",
        }
    )
    return pd.DataFrame(rows)


# the profile's categories beside the one step model's terms (``analytic.step``)
PROJECTED_TERMS = {
    "matmul": "matmul_s",
    "attention core": "attention_s",
    "norm / elementwise": "memory_bound_s",
    "optimizer": "optimizer_s",
}
PROJECTION_DEVICES = ("a100", "h100-sxm")


def gpu_projection(records: dict):
    """The measured step's share of time per category beside the same model and batch priced on
    GPUs by the course's one step model (``analytic.step.step_time``, one device, standard and
    fused attention): a projection, not a measurement. The CPU's ratio of compute to memory
    bandwidth is far below a GPU's, so its shares do not carry over: the GEMMs' share falls and
    the memory-bound ops' rises on a GPU. Each column's shares sum to 1 over the four terms
    (the profile's other and idle time, the model's zero terms left out)."""
    import pandas as pd

    from mfulab.analytic import step
    from mfulab.analytic.config import TransformerConfig

    cfg = TransformerConfig(**records["config"])
    micro_batch = records["train"]["micro_batch"]
    shares = opprofile.category_shares(records["op_profile"])
    measured = {c: shares.get(c, 0.0) for c in PROJECTED_TERMS}
    columns = {"this CPU (measured)": {c: v / sum(measured.values()) for c, v in measured.items()}}
    exact_flops_per_step = sum(category_flops_per_step(records).values())
    mfu = {"this CPU (measured)": None}
    for device in PROJECTION_DEVICES:
        for attention in ("naive", "fused"):
            t = step.step_time(
                cfg,
                n_devices=1,
                tp=1,
                global_batch=micro_batch,
                micro_batch=micro_batch,
                device=device,
                attention=attention,
            )
            terms = {c: t[key] for c, key in PROJECTED_TERMS.items()}
            name = f"{device}, {'standard' if attention == 'naive' else 'fused'} attention (model)"
            columns[name] = {c: v / sum(terms.values()) for c, v in terms.items()}
            mfu[name] = exact_flops_per_step / t["step_s"] / t["peak_flops_per_s"]
    table = pd.DataFrame(columns)
    table.loc["MFU (exact count, of the peak)"] = pd.Series(mfu)
    return table
