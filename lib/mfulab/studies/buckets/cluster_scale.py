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
from mfulab.studies.buckets import sensitivity
from mfulab.studies.buckets.sensitivity import plausible_caps_text, spread_points
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB, gpt_simulation, model_layout
from mfulab.studies.buckets.stated import (
    A6_CARDS,
    A6_DISASTER_RATIO,
    A6_MFU_POINTS,
    A6_PER_TENSOR_CASE,
    A6_PLAUSIBLE_CAPS_MIB,
    B8_STATED,
    PER_TENSOR_CAP_MB,
)
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim
from mfulab.units import MIB


def scale_table(records):
    """The simulator on every ``scale_presets`` model (smallest first), card count and cap, each
    model at its stated tensor parallelism (``stated.SCALE_TP``: the articles' layouts; DP =
    cards ÷ TP, a card count with fewer than two DP ranks left out), with the stated
    interconnect and all-reduce algorithm (the ``scale_*`` parameters). ``world_size`` is the
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
                rows += gpt_simulation(preset(name), n=cards // tp, tp=tp, bucket_caps_mb=caps, **setting)
    return pd.DataFrame(rows).assign(device=setting["device"])


def per_tensor_table(records):
    """A6's "one all-reduce per parameter tensor is a disaster" at the article's configuration
    (``stated.A6_PER_TENSOR_CASE``: its 13B at TP 8 on ``A6_CARDS`` cards, DP = cards / TP), with
    the stated interconnect: one bucket per tensor against the fastest cap of the grid, under
    NCCL's own choice per call (the faster of ring and tree: the stated case) and with the ring
    forced (``NCCL_ALGO=Ring``), whose per-call latency grows with the ranks. One row per
    algorithm: the all-reduce calls per step, both steps, and per-tensor ÷ best."""
    import pandas as pd

    p = records["params"]
    case = A6_PER_TENSOR_CASE
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, PER_TENSOR_CAP_MB})
    rows = []
    for algorithm in ("best", "ring"):
        setting = {**sensitivity.stated_setting(p, "a6"), "algorithm": algorithm}
        sim = pd.DataFrame(
            gpt_simulation(
                preset(case["preset"]),
                n=A6_CARDS // case["tp"],
                tp=case["tp"],
                bucket_caps_mb=caps,
                **setting,
            )
        )
        per_tensor = sim[sim.bucket_cap_mb == PER_TENSOR_CAP_MB].iloc[0]
        best = sim[sim.bucket_cap_mb != PER_TENSOR_CAP_MB].sort_values("step_s").iloc[0]
        rows.append(
            {
                "preset": case["preset"],
                "tp": case["tp"],
                "dp": A6_CARDS // case["tp"],
                "algorithm": sensitivity.algorithm_text(algorithm),
                "stated": algorithm == sensitivity.stated_setting(p, "a6")["algorithm"],
                "per_tensor_calls": int(per_tensor.buckets),
                "per_tensor_step_s": float(per_tensor.step_s),
                "best_cap_mib": float(best.bucket_cap_mb),
                "best_step_s": float(best.step_s),
                "slowdown": float(per_tensor.step_s / best.step_s),
            }
        )
    return pd.DataFrame(rows)


def a6_per_tensor_claim(table) -> list[Claim]:
    """Confirmed (analysis) when one all-reduce per tensor is at least ``A6_DISASTER_RATIO``×
    the fastest cap's step under NCCL's own algorithm choice (stated) and with the ring forced,
    refuted (analysis) when below under both, analytic only when the algorithm decides (the
    article does not state it)."""
    if table.empty:
        return []
    stated = table[table.stated].iloc[0]
    other = table[~table.stated].iloc[0]
    disaster = table.slowdown >= A6_DISASTER_RATIO
    verdict = "confirmed" if disaster.all() else "refuted" if not disaster.any() else "analytic only"
    return [
        Claim(
            "A6",
            "one all-reduce per parameter tensor is a disaster (the article's 13B at about a thousand cards)",
            f"simulator: {stated.preset} at TP {stated.tp} × DP {stated.dp}, one bucket per tensor "
            f"({stated.per_tensor_calls} all-reduces per step) vs the fastest cap; a disaster read as "
            f"≥ {A6_DISASTER_RATIO:g}× the step; all-reduce: {stated.algorithm} (stated), the ring "
            "forced beside it",
            verdict,
            f"per tensor {stated.per_tensor_step_s:.2f} s vs {stated.best_step_s:.2f} s at "
            f"{stated.best_cap_mib:g} MiB: {stated.slowdown:.2f}×; with the ring forced "
            f"{other.per_tensor_step_s:.2f} s vs {other.best_step_s:.2f} s at {other.best_cap_mib:g} MiB: "
            f"{other.slowdown:.2f}×"
            + (
                "; the answer turns on the all-reduce algorithm, which the article does not state (the "
                "ring's per-call latency grows with the ranks, the tree's with their logarithm)"
                if verdict == "analytic only"
                else ""
            ),
            basis=verdicts.ANALYSIS,
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
    return (
        f"the simulated best ({caps.min():g}–{caps.max():g} MiB) is {caps.min() / hi:.0f}–"
        f"{caps.max() / lo:.0f}× the article's 20–40 MB: it contradicts the sweet spot at the articles' "
        "layouts"
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
    """How far the cap moves MFU per model (rows of :func:`best_caps`), against the claim."""
    grid = big.spread_grid_points
    return (
        f"the cap moves MFU by {big.spread_points.min():.1f}–{big.spread_points.max():.1f} points over "
        f"{plausible_caps_text()} ({grid.min():.1f}–{grid.max():.1f} over the whole grid), the best cap "
        f"beats 25 MiB by {big.gain_vs_25.min() * 100:.1f}–{big.gain_vs_25.max() * 100:.1f} (article: "
        f"{A6_MFU_POINTS[0]:g}–{A6_MFU_POINTS[1]:g} points from the bucket size)"
    )


def _smallest_matrix_mib(name: str) -> float:
    """bf16 gradient MiB one rank holds of the model's smallest weight matrix, at its stated TP
    (each rank keeps 1/TP of every weight matrix)."""
    whole = min(k for n, k in model_layout(preset(name)) if "norm" not in n) * 2 / MIB
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
    """Refuted (analytically) when the spread over the plausible caps stays below the claim's
    lower end for every model in every scenario of the sensitivity table; otherwise analytic
    only (the simulator's answer depends on its assumptions)."""
    return "analytic only" if sens.a6_spread_reaches_claim.any() else "refuted"


def a6_spread_claim(records, best, sens) -> list[Claim]:
    if best.empty:
        return []
    cards, big = _big(best)
    s = sensitivity.summary(sens)
    lo = A6_MFU_POINTS[0]
    per_model = ", ".join(
        f"{r.preset} {r.spread_points:.1f} ({r.spread_grid_points:.1f} over the grid; best vs 25 MiB "
        f"+{r.gain_vs_25 * 100:.1f})"
        for r in big.itertuples()
    )
    stated_reaches = bool((big.spread_points >= lo).any())
    reaching = ", ".join(s["a6_spread_reaching"]) or "none"
    over_grid = big[big.spread_grid_points >= lo].preset.tolist()
    grid = (
        f"; over the whole grid only {', '.join(over_grid)} reach{'es' if len(over_grid) == 1 else ''} it, "
        f"through the caps past {A6_PLAUSIBLE_CAPS_MIB[1]:g} MiB (a few buckets whose all-reduce starts late)"
        if not stated_reaches and over_grid
        else ""
    )
    return [
        Claim(
            "A6",
            "at about a thousand cards the bucket size moves MFU by 5–8 points",
            _a6_setting(records, cards, big)
            + f"; spread = max − min MFU over the caps {plausible_caps_text()}",
            a6_spread_verdict(sens),
            f"spread in MFU points: {per_model}{memory_text(big)}; in the stated setting the spread over "
            f"{plausible_caps_text()} reaches the article's {lo:g}–{A6_MFU_POINTS[1]:g} points for "
            f"{', '.join(big.preset[big.spread_points >= lo]) or 'no model'}{grid}; sensitivity: the spread "
            f"reaches {lo:g} points "
            f"in {len(s['a6_spread_reaching'])} of {s['scenarios']} scenarios: {reaching}",
            basis=verdicts.ANALYSIS,
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
            "analytic only",
            f"best caps: {per_model}; {sweet_spot_text(big)}; the smallest weight matrix of "
            f"{smallest} leaves each rank {_smallest_matrix_mib(smallest):.0f} MiB of bf16 gradient at TP "
            f"{sensitivity.stated_tp(smallest)}, so a 20–40 MB cap holds a few tensors per bucket"
            f"{memory_text(big)}; sensitivity: the answer to 'best cap "
            f"outside 20–40 MB?' is unchanged in {s['a6_same']} of {s['scenarios']} scenarios{changed}"
            + sensitivity.fitted_text(sens, "a6"),
            basis=verdicts.ANALYSIS,
        )
    ]


def b8_table(records):
    """B8's case on article B's cards (``scale_device``): the 7B of ``scale_presets`` at its stated
    TP on ``B8_STATED['ranks']`` cards, every cap of the grid plus 25, 50 and 100 MiB."""
    import pandas as pd

    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return pd.DataFrame()
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, *B8_STATED["better_caps_mb"]})
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    setting = sensitivity.stated_setting(p, "b8")
    return pd.DataFrame(
        gpt_simulation(preset(seven_b[0]), n=cards // tp, tp=tp, bucket_caps_mb=caps, **setting)
    )


def b8_claims(records, scale, sens) -> list[Claim]:
    if scale.empty:
        return []
    s7 = scale[scale.preset.str.contains("7b")]
    if not len(s7):
        return []
    n7 = B8_STATED["ranks"] if B8_STATED["ranks"] in set(s7.world_size) else int(s7.world_size.max())
    d = s7[s7.world_size == n7].set_index("bucket_cap_mb")
    base = B8_STATED["default_cap_mb"]
    caps = [c for c in (base, *B8_STATED["better_caps_mb"]) if c in d.index]
    if base not in caps or len(caps) < 2:
        return []
    gain = max(d.loc[c, "mfu"] for c in caps if c != base) - d.loc[base, "mfu"]
    fits = bool(d.loc[base, "fits"])
    tp, dp = int(d.loc[base, "tp"]), int(d.loc[base, "dp"])
    memory = (
        ""
        if fits
        else f" (TP {tp} DDP without ZeRO does not fit the card: {d.loc[base, 'memory_gib']:.0f} GiB per "
        "device)"
    )
    stated_outcome = sensitivity.b8_outcome(gain, d.loc[base, "mfu"])
    s = sensitivity.summary(sens)
    changed = f" (it changes under {', '.join(s['b8_changed'])})" if s["b8_changed"] else ""
    setting = sensitivity.stated_setting(records["params"], "b8")
    algorithm = sensitivity.algorithm_text(setting["algorithm"])
    return [
        Claim(
            "B8",
            "for a 7B model, bucket_cap_mb 25 → 50–100 MB helped: fewer calls, still early enough",
            f"simulator, 7B on {n7} {setting['device']} cards at article B's TP {tp} × DP {dp}, DDP's "
            f"buckets, all-reduce: {algorithm} per call",
            "analytic only",
            "MFU at 25 / 50 / 100 MiB: "
            + " / ".join(f"{d.loc[c, 'mfu']:.1%}" for c in caps)
            + f"; best 50–100 MiB vs 25: {gain * 100:+.2f} points ({stated_outcome}){memory}. Article B's "
            "case runs ZeRO-2, whose gradient buckets DDP's bucket_cap_mb does not set (DeepSpeed: "
            "reduce_bucket_size): priced as DDP, as the claim's sentence states; sensitivity: "
            "the same "
            f"outcome in {s['b8_same']} of {s['scenarios']} scenarios{changed}"
            + sensitivity.fitted_text(sens, "b8"),
            basis=verdicts.ANALYSIS,
        )
    ]
