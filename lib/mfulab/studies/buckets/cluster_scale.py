"""The simulator at cluster scale and the claims it answers: A6's two analytic rows (how far
the bucket size moves MFU at about a thousand cards; whether 20–40 MB is the sweet spot) and
B8 (7B, 25 → 50–100 MiB), each with the sensitivity table's count of the settings in which
its answer holds.

"The bucket size moves MFU by 5–8 points" is read as the spread max − min MFU over the caps
a practitioner plausibly sets (``stated.A6_PLAUSIBLE_CAPS_MIB``), with the whole grid's
spread and the best cap's gain over 25 MiB (DDP's default) beside it.
"""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.studies.buckets import model_error, sensitivity
from mfulab.studies.buckets.sensitivity import plausible_caps_text, spread_points
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB, gpt_simulation, model_layout
from mfulab.studies.buckets.stated import (
    A6_CARDS,
    A6_DISASTER_RATIO,
    A6_MFU_POINTS,
    A6_PER_TENSOR_CASE,
    A6_PLAUSIBLE_CAPS_MIB,
    A6_SMALL_CARDS,
    A_REPORTED_MFU,
    PER_TENSOR_CAP_MB,
    SCALE_GRAD_BYTES_PER_ELEM,
)
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.studykit.verdicts import Claim
from mfulab.units import MIB


def scale_table(records):
    """The simulator on every ``scale_presets`` model (smallest first), card count and cap, each
    model at its stated tensor parallelism (``stated.SCALE_TP``: the articles' layouts; DP =
    cards ÷ TP, a card count with fewer than two DP ranks left out), with the stated
    interconnect and all-reduce algorithm (the ``scale_*`` parameters) and A6's stated global
    batch (``sensitivity.stated_accumulation``). ``world_size`` is the
    cards, ``dp`` the data-parallel ranks."""
    import pandas as pd

    p = records["params"]
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB})
    setting = sensitivity.stated_setting(p, "a6")
    rows = []
    for name in sensitivity.by_size(p["scale_presets"]):
        tp = sensitivity.stated_tp(name)
        for cards in p["scale_world_sizes"]:
            if cards % tp == 0 and cards // tp >= 2:
                dp = cards // tp
                acc = sensitivity.stated_accumulation(dp, setting["micro_batch"])
                rows += gpt_simulation(
                    preset(name), n=dp, tp=tp, bucket_caps_mb=caps, accumulation=acc, **setting
                )
    return pd.DataFrame(rows).assign(device=setting["device"])


def per_tensor_table(records, cards: int = A6_CARDS):
    """A6's "one all-reduce per parameter tensor is a disaster" at the article's configuration
    (``stated.A6_PER_TENSOR_CASE``: its 13B at TP 8 on ``A6_CARDS`` cards, DP = cards / TP), with
    the stated interconnect: one bucket per tensor against the fastest cap of the grid, under
    NCCL's own choice per call (the faster of ring and tree: the stated case) and with the ring
    forced (``NCCL_ALGO=Ring``), whose per-call latency grows with the ranks; each at A6's stated
    global batch and at one micro-batch per step (the article states no batch). One row per
    (accumulation, algorithm): the all-reduce calls per step, both steps, and per-tensor ÷ best."""
    import pandas as pd

    p = records["params"]
    case = A6_PER_TENSOR_CASE
    dp = cards // case["tp"]
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, PER_TENSOR_CAP_MB})
    stated_setting = sensitivity.stated_setting(p, "a6")
    rows = []
    for acc in (sensitivity.stated_accumulation(dp, stated_setting["micro_batch"]), 1):
        for algorithm in ("best", "ring"):
            setting = {**stated_setting, "algorithm": algorithm}
            sim = pd.DataFrame(
                gpt_simulation(
                    preset(case["preset"]),
                    n=dp,
                    tp=case["tp"],
                    bucket_caps_mb=caps,
                    accumulation=acc,
                    **setting,
                )
            )
            per_tensor = sim[sim.bucket_cap_mb == PER_TENSOR_CAP_MB].iloc[0]
            best = sim[sim.bucket_cap_mb != PER_TENSOR_CAP_MB].sort_values("step_s").iloc[0]
            rows.append(
                {
                    "preset": case["preset"],
                    "tp": case["tp"],
                    "dp": dp,
                    "accumulation": acc,
                    "algorithm": sensitivity.algorithm_text(algorithm),
                    "stated": algorithm == stated_setting["algorithm"] and not rows,
                    "per_tensor_calls": int(per_tensor.buckets),
                    "per_tensor_step_s": float(per_tensor.step_s),
                    "best_cap_mib": float(best.bucket_cap_mb),
                    "best_step_s": float(best.step_s),
                    "slowdown": float(per_tensor.step_s / best.step_s),
                }
            )
    return pd.DataFrame(rows)


def a6_per_tensor_claim(table, small=None) -> list[Claim]:
    """Confirmed (analysis) when one all-reduce per tensor is at least ``A6_DISASTER_RATIO``×
    the fastest cap's step in every row (NCCL's own algorithm choice, the stated case, and the
    ring forced; A6's stated global batch and one micro-batch per step), refuted (analysis) when
    below in every row, analytic only when the algorithm or the batch decides (the article states
    neither). ``small``: the same table at article A's 32-card cluster (``A6_SMALL_CARDS``),
    printed beside the row, not voted (the sentence names no scale)."""
    if table.empty:
        return []
    stated = table[table.stated].iloc[0]
    beside = ""
    if small is not None and len(small):
        s0 = small.iloc[0]
        by_acc = "; ".join(
            f"at {acc} micro-batch(es) {', '.join(f'{x:.2f}×' for x in g.slowdown)}"
            for acc, g in small.groupby("accumulation", sort=False)
        )
        beside = (
            f"; beside it, not voted, article A's other 13B cluster (§2.1, {A6_SMALL_CARDS} cards, TP "
            f"{s0.tp} × DP {s0.dp}; NCCL's choice, ring): {by_acc}: the disaster, where it comes, comes "
            "with the DP width"
        )
    same_batch = table[table.accumulation == stated.accumulation]
    other = same_batch[~same_batch.stated].iloc[0]
    one = table[table.accumulation == 1]

    def decide(ratio: float) -> str:  # over the algorithms and batches the article leaves open
        return verdicts.over_scenarios(table.slowdown >= ratio)

    verdict = decide(A6_DISASTER_RATIO)
    # "a disaster" is our reading: the same rule at a milder and a harsher threshold
    at_other = (
        f"the verdict reads 'a disaster' as ≥ {A6_DISASTER_RATIO:g}× (our reading; "
        + "; ".join(
            f"read as ≥ {r:g}×, the row would read {verdicts.label(decide(r), verdicts.ANALYSIS)}"
            for r in (1.3, 2.0)
        )
        + ")"
    )
    return [
        Claim(
            "A6",
            "one all-reduce per parameter tensor is a disaster (the article's 13B at about a thousand cards, "
            "our choice of scale: the sentence names none)",
            f"simulator: {stated.preset} at TP {stated.tp} × DP {stated.dp}, {stated.accumulation} "
            f"micro-batches per step (A6's stated global batch), one bucket per tensor "
            f"({stated.per_tensor_calls} all-reduces per step) vs the fastest cap; a disaster read as "
            f"≥ {A6_DISASTER_RATIO:g}× the step; all-reduce: {stated.algorithm} (stated), the ring "
            "forced and one micro-batch per step beside it",
            verdict,
            f"per tensor {stated.per_tensor_step_s:.2f} s vs {stated.best_step_s:.2f} s at "
            f"{stated.best_cap_mib:g} MiB: {stated.slowdown:.2f}×; with the ring forced "
            f"{other.per_tensor_step_s:.2f} s vs {other.best_step_s:.2f} s at {other.best_cap_mib:g} MiB: "
            f"{other.slowdown:.2f}×"
            + (
                f"; at one micro-batch per step {', '.join(f'{x:.2f}×' for x in one.slowdown)} (NCCL's "
                "choice, ring)"
                if len(one) and stated.accumulation != 1
                else ""
            )
            + (
                "; the answer turns on inputs the article does not state: the all-reduce algorithm (the "
                "ring's per-call latency grows with the ranks, the tree's with their logarithm) or the "
                "global batch (more micro-batches, more compute for the same calls)"
                if verdict == "analytic only"
                else ""
            )
            + f"; {at_other}{beside}",
            basis=verdicts.ASSUMED,  # the sentence names no scale: a thousand cards is our choice
        )
    ]


def best_caps(scale_df):
    """Per (model, ranks), in the scale table's order: the fastest cap (``best_caps_mib``: with
    the caps tied with it), whether a best cap lies in the article's 20–40 MB, the MFU at
    25 MiB (DDP's default size), the best cap's gain over it (``gain_vs_25``, a fraction) and
    how far the cap moves MFU: max − min in points over the plausible caps
    (``spread_points``, ``A6_PLAUSIBLE_CAPS_MIB``) and over the whole grid
    (``spread_grid_points``)."""
    keys = ["preset", "world_size"]
    best = scale_df.loc[scale_df.groupby(keys, sort=False).step_s.idxmin()].set_index(keys)
    at_25 = scale_df[scale_df.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB].set_index(keys).mfu.rename("mfu_at_25")
    groups = scale_df.groupby(keys, sort=False)
    tied = groups.apply(
        lambda d: sensitivity.tied_best(dict(zip(d.bucket_cap_mb, d.step_s))), include_groups=False
    )
    mfu = groups.apply(lambda d: dict(zip(d.bucket_cap_mb, d.mfu)), include_groups=False)
    out = best.join(at_25).join(tied.rename("tied_caps")).join(mfu.rename("mfu_by_cap")).reset_index()
    out["gain_vs_25"] = out.mfu - out.mfu_at_25
    out["spread_points"] = out.mfu_by_cap.map(lambda m: spread_points(m, A6_PLAUSIBLE_CAPS_MIB))
    out["spread_grid_points"] = out.mfu_by_cap.map(spread_points)
    out["best_caps_mib"] = out.tied_caps.map(sensitivity.caps_label)
    out["in_20_40_mb"] = out.tied_caps.map(lambda caps: any(sensitivity.in_sweet_spot(c) for c in caps))
    out["sweet_spot"] = out.tied_caps.map(lambda caps: sensitivity.sweet_spot_status([caps]))
    return out.drop(columns=["tied_caps", "mfu_by_cap"])


def sweet_spot_text(big) -> str:
    """Where the best caps of ``big`` (rows of :func:`best_caps`) stand against 20–40 MB: the
    only best cap (``best``), one cap of a tie (``tied``: there the cap barely matters, which
    is no sweet spot), or outside."""
    lo, hi = sensitivity.sweet_spot_mib()
    caps = big.bucket_cap_mb
    best = list(big.preset[big.sweet_spot == "best"])
    tied = list(big.preset[big.sweet_spot == "tied"])
    if best or tied:
        parts = [f"20–40 MB is the only best cap for {', '.join(best)}"] if best else []
        if tied:
            span = big[big.sweet_spot == "tied"].best_caps_mib.iloc[0]
            parts.append(
                f"20–40 MB ties with every cap of {span} MiB for {', '.join(tied)}: there the cap barely "
                "matters, no sweet spot"
            )
        return "; ".join(parts)
    fitting = big[big.fits.astype(bool)] if "fits" in big else big
    caps = fitting.bucket_cap_mb if len(fitting) else caps
    which = "of the layouts that fit their cards " if len(fitting) < len(big) and len(fitting) else ""
    span = f"{caps.min():g} MiB" if caps.min() == caps.max() else f"{caps.min():g}–{caps.max():g} MiB"
    ratio_lo, ratio_hi = caps.min() / hi, caps.max() / lo
    ratio = f"{ratio_lo:.0f}–{ratio_hi:.0f}×" if round(ratio_lo) != round(ratio_hi) else f"{ratio_lo:.0f}×"
    rows = fitting if len(fitting) else big
    step_cut = (1 - rows.mfu_at_25 / rows.mfu).max()  # the best cap's shorter step against 25 MiB
    return (
        f"under the step model, the simulated best {which}({span}) is {ratio} the article's 20–40 MB, "
        f"its step at most {step_cut:.1%} shorter than at 25 MiB: a ranking well inside the step model's "
        f"±{SWITCH_MARGIN:.0%} (studykit.step_error), by a simulator whose error on this machine's "
        "measured sweep follows, so it does not settle where a sweet spot lies"
    )


def memory_text(big) -> str:
    """Which simulated layouts do not fit their card's memory (the step model's memory_terms):
    the simulator reads them as a view of the mechanism, not as runs that could happen."""
    over = big[~big.fits.astype(bool)]
    if not len(over):
        return ""
    sizes = ", ".join(f"{r.preset} at TP {r.tp} {r.memory_gib:.0f} GiB" for r in over.itertuples())
    return (
        f"; {'this layout does' if len(over) == 1 else 'these layouts do'} not fit the card's memory "
        f"({sizes} per device, DDP without ZeRO): {'it shows' if len(over) == 1 else 'they show'} "
        "the mechanism, not runs that could happen"
    )


def spread_text(big) -> str:
    """How far the cap moves MFU per model (rows of :func:`best_caps`) that fits its card, against
    the claim."""
    fitting = big[big.fits.astype(bool)] if "fits" in big else big
    big = fitting if len(fitting) else big
    grid = big.spread_grid_points
    return (
        f"the cap moves MFU by {big.spread_points.min():.1f}–{big.spread_points.max():.1f} points over "
        f"{plausible_caps_text()} ({grid.min():.1f}–{grid.max():.1f} over the whole grid), the best cap "
        f"beats 25 MiB by {big.gain_vs_25.min() * 100:.1f}–{big.gain_vs_25.max() * 100:.1f} (article: "
        f"{A6_MFU_POINTS[0]:g}–{A6_MFU_POINTS[1]:g} points from the bucket size)"
    )


def model_error_text(records) -> str:
    """One clause for each at-scale row: the answer is the model's alone (no published bucket-size
    measurement at that scale is used), with the simulator's worst RMS error on this machine's
    measured sweep, its caps held out of the fit where scored (``model_error.fit_table``; the
    notebook shows the table once, per mode, with the calibration's α spread)."""
    from mfulab.studies.buckets.model_error import fit_table

    fits = fit_table(records)
    if fits.empty:
        return ""
    held = fits.rms_error_held_out.dropna() if "rms_error_held_out" in fits else fits.rms_error_held_out
    worst = held.max() if len(held) else fits.rms_error_alpha_beta.max()
    which = "held out cap by cap" if len(held) else "with the calibration's α–β alone"
    return (
        "; model-only (no published bucket-size measurement at this scale): the simulator misses this "
        f"machine's measured sweep by up to {worst:.0%} RMS, {which} (the model-error table)"
    )


def _smallest_matrix_mib(name: str) -> float:
    """fp32 gradient MiB one rank holds of the model's smallest weight matrix, at its stated TP
    (each rank keeps 1/TP of every weight matrix)."""
    whole = min(k for n, k in model_layout(preset(name)) if "norm" not in n) * SCALE_GRAD_BYTES_PER_ELEM / MIB
    return whole / sensitivity.stated_tp(name)


def _big(best):
    cards = A6_CARDS if A6_CARDS in set(best.world_size) else int(best.world_size.max())
    return cards, best[best.world_size == cards]


def _a6_setting(records, cards: int, big) -> str:
    p = records["params"]
    setting = sensitivity.stated_setting(p, "a6")
    algorithm = sensitivity.algorithm_text(setting["algorithm"])
    layouts = ", ".join(f"{r.preset} TP {r.tp} × DP {r.dp}" for r in big.itertuples())
    return (
        f"simulator at {cards} {setting['device']} cards (article A's), each model at the articles' layout "
        f"({layouts}; pure data parallelism a sensitivity row), all-reduce: {algorithm} per call, "
        f"caps {p['scale_bucket_caps_mb']} MiB"
    )


def a6_spread_verdict(sens) -> str:
    """The article says the bucket size's effect on MFU "can reach" 5–8 points (可以达到) and names
    no model: a claim of possibility, ``verdicts.any_scenario`` over the scenarios, each answering
    with ``sensitivity.spread_answer`` (the modelled step ratio against the one 5 points needs,
    within the step model's margin for a switch, both ways alike). A row must be able to fail: at
    the MFU article A reports (``A_REPORTED_MFU``), above the highest MFU at which a spread of 5
    points is a step ratio beyond the margin (``model_error.best_mfu_to_decide``), no spread can
    say no, so a yes is no test either: analytic only there, whatever the scenarios say."""
    if A_REPORTED_MFU > model_error.best_mfu_to_decide(min(A6_MFU_POINTS)):
        return "analytic only"
    return verdicts.any_scenario(sensitivity.deciding(sens).a6_can_reach)


def _can_reach_names(deciding) -> list[str]:
    return [f"{r.assumption} {r.value}" for r in deciding.itertuples() if r.a6_can_reach is True]


def a6_spread_claim(records, best, sens) -> list[Claim]:
    if best.empty:
        return []
    cards, big = _big(best)
    lo, hi = A6_MFU_POINTS
    article = A6_PER_TENSOR_CASE["preset"]
    per_model = ", ".join(
        f"{r.preset}{' (the article’s 13B)' if r.preset == article else ''} {r.spread_points:.1f} "
        f"({r.spread_grid_points:.1f} over the grid; best vs 25 MiB +{r.gain_vs_25 * 100:.1f}; MFU at 25 MiB "
        f"{r.mfu_at_25:.0%})"
        for r in big.itertuples()
    )
    per_model += f" (article A: MFU above {A_REPORTED_MFU:.0%} on its 910B cluster)"
    deciding = sensitivity.deciding(sens)
    holds = int(deciding.a6_any_model_in_claim.sum())
    fails = [f"{r.assumption} {r.value}" for r in deciding.itertuples() if not r.a6_any_model_in_claim]
    return [
        Claim(
            "A6",
            "at about a thousand cards the bucket size's effect on MFU can reach 5–8 points",
            _a6_setting(records, cards, big)
            + f"; spread = max − min MFU over the caps {plausible_caps_text()}; a scenario says yes when "
            "some model's spread reaches 5 points as a step ratio beyond the step model's margin for a "
            "switch (a spread past 8 reaches 5–8), no when every model's falls short of 5 points even at the "
            "margin's top (a6_spread.spread_answer; the article names no model)",
            a6_spread_verdict(sens),
            f"spread in MFU points: {per_model}{memory_text(big)}; some model's spread lies in {lo:g}–{hi:g} "
            f"points in {holds} of {len(deciding)} scenarios (none under: {', '.join(fails) or 'none'}); the "
            "sentence says 'can reach' (可以达到), so one scenario decides: "
            f"{int((deciding.a6_can_reach == True).sum())} of {len(deciding)} say yes, "  # noqa: E712
            f"a spread beyond the step model's ±{SWITCH_MARGIN:.0%} as a step ratio"
            + (
                f" ({', '.join(yes)}: inputs the article does not state; the stated case says neither)"
                if (yes := _can_reach_names(deciding))
                else ""
            )
            + model_error.spread_reach_text(A_REPORTED_MFU)
            + model_error_text(records),
            basis=verdicts.ASSUMED,  # batch, models, DDP without ZeRO, NCCL for HCCL: read, not stated
        )
    ]


def a6_sweet_spot_claim(records, best, sens) -> list[Claim]:
    if best.empty:
        return []
    cards, big = _big(best)
    s = sensitivity.summary(sens)
    changed = f" (it changes under {', '.join(s['a6_changed'])})" if s["a6_changed"] else ""
    smallest = big.preset.iloc[0]
    per_model = ", ".join(f"{r.preset} {r.best_caps_mib} MiB" for r in big.itertuples())
    return [
        Claim(
            "A6",
            "20–40 MB buckets are the sweet spot",
            _a6_setting(records, cards, big) + "; the fastest caps (ties within 0.1% named)",
            sensitivity.sweet_spot_decision(sensitivity.deciding(sens).a6_20_40_mb),
            f"best caps: {per_model}; {sweet_spot_text(big)}; the smallest weight matrix of "
            f"{smallest} leaves each rank {_smallest_matrix_mib(smallest):.0f} MiB of fp32 gradient at TP "
            f"{sensitivity.stated_tp(smallest)}, so a 20–40 MB cap holds a few tensors per bucket"
            f"{memory_text(big)}; sensitivity: the answer to 'best cap "
            f"outside 20–40 MB?' is unchanged in {s['a6_same']} of {s['scenarios']} scenarios{changed}"
            + sensitivity.fitted_text(sens, "a6")
            + model_error_text(records),
            basis=verdicts.ASSUMED,  # batch, models, DDP without ZeRO, NCCL for HCCL: read, not stated
        )
    ]
