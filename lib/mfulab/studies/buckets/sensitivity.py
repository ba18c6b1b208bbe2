"""How the simulator's answers to A6 and B8 move with its assumed inputs (issue §4): per-step
latency between nodes, the interconnect (NVLink for every rank, InfiniBand NDR between nodes),
the GEMMs' share of MAMF, tensor/pipeline sharding of the gradients, gradient accumulation and the
all-reduce algorithm (the faster of ring and tree per call, or ring only) — one input
varied at a time from the stated setting (``stated.SENSITIVITY``) — and the simulator's own
error: the per-bucket overhead fitted to this machine's measured sweep (``model_error``)."""

from __future__ import annotations

from mfulab.analytic import rates
from mfulab.analytic.config import preset
from mfulab.analytic.flops import param_count
from mfulab.studies.buckets import model_error
from mfulab.studies.buckets.a6_spread import spread_answer, spread_in_claim  # noqa: F401 (re-exported)
from mfulab.studies.buckets.b6_scale import article_bound
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB, gpt_simulation
from mfulab.studies.buckets.stated import (
    A6_CARDS,
    A6_GLOBAL_BATCH_SEQUENCES,
    A6_MFU_POINTS,
    A6_PER_TENSOR_CASE,
    A6_PLAUSIBLE_CAPS_MIB,
    A6_SWEET_SPOT_BYTES,
    B8_ARTICLE,
    B8_STATED,
    B8_STEP2_EXPLAINED_SHARE,
    B8_VISIBLE_SHARE,
    B8_VISIBLE_TAIL_CUT,
    PROBE_LINKS,
    SCALE_GRAD_BYTES_PER_ELEM,
    SCALE_TP,
    SENSITIVITY,
    STATED_TP_FALLBACK,
)
from mfulab.studykit import verdicts
from mfulab.units import GB, MIB

# Simulated steps closer than this (relative) are a tie: the simulator is exact, but no
# measurement resolves 0.1% of a step, and when the all-reduce hides behind the backward pass
# every cap gives the same step (only the last bucket, the embedding, is exposed).
TIE_TOLERANCE = 1e-3
FITTED = "fitted per-bucket overhead"
NCCL_LATENCY_FIELDS = (
    "nccl_base_latency_s",
    "alpha_intra_s",
    "alpha_inter_s",
    "tree_alpha_intra_s",
    "tree_alpha_inter_s",
)  # the scenario carrying the simulator's model error


def tied_best(step_by_cap: dict) -> list[float]:
    """The caps whose simulated step is within :data:`TIE_TOLERANCE` of the fastest."""
    fastest = min(step_by_cap.values())
    return sorted(c for c, s in step_by_cap.items() if s <= fastest * (1 + TIE_TOLERANCE))


def caps_label(caps) -> str:
    """``200`` for one best cap, ``1–200`` for a tie from 1 to 200 MiB."""
    return f"{caps[0]:g}" if len(caps) == 1 else f"{caps[0]:g}–{caps[-1]:g}"


def sweet_spot_status(tied_per_model) -> str:
    """Where 20–40 MB stands among the best caps of several models: ``best`` (a model's only
    best cap lies in it), ``tied`` (it lies in a tie: there the cap barely matters) or
    ``outside``."""
    if any(len(caps) == 1 and in_sweet_spot(caps[0]) for caps in tied_per_model):
        return "best"
    if any(in_sweet_spot(c) for caps in tied_per_model for c in caps):
        return "tied"
    return "outside"


def sweet_spot_mib() -> tuple[float, float]:
    """The article's 20–40 MB in MiB (bucket_cap_mb's unit)."""
    return tuple(b / MIB for b in A6_SWEET_SPOT_BYTES)


def in_sweet_spot(cap_mib: float) -> bool:
    lo, hi = sweet_spot_mib()
    return lo <= cap_mib <= hi


def spread_points(mfu_by_cap: dict, caps_mib: tuple[float, float] | None = None) -> float:
    """How far the bucket size moves MFU: max − min MFU (in points) over the caps of
    ``mfu_by_cap`` within ``caps_mib`` (inclusive; ``None``: every cap)."""
    lo, hi = caps_mib or (0.0, float("inf"))
    mfus = [m for c, m in mfu_by_cap.items() if lo <= c <= hi]
    return (max(mfus) - min(mfus)) * 100


def plausible_caps_text() -> str:
    lo, hi = A6_PLAUSIBLE_CAPS_MIB
    return f"{lo:g}–{hi:g} MiB"


def by_size(names) -> list[str]:
    """Model names ordered by parameter count (smallest first)."""
    return sorted(names, key=lambda name: param_count(preset(name)))


def stated_setting(p: dict, claim: str = "b8") -> dict:
    """The simulator's stated setting, from the study's ``scale_*`` parameters, on the cards of
    ``claim``'s article: ``a6_device`` (article A's 910B) for A6, ``scale_device`` (article B's
    A100) for B8."""
    device = p.get("a6_device", p["scale_device"]) if claim == "a6" else p["scale_device"]
    return {
        "device": device,
        "matmul_share_of_mamf": p["scale_matmul_share_of_mamf"],
        "micro_batch": p["scale_micro_batch"],
        "algorithm": p["scale_algorithm"],
        "grad_bytes_per_elem": SCALE_GRAD_BYTES_PER_ELEM,
    }


def stated_accumulation(dp: int, micro_batch: int, pp: int = 1) -> int:
    """Micro-batches per step for A6's stated global batch (``stated.A6_GLOBAL_BATCH_SEQUENCES``)
    on ``dp`` ranks: at least one, and at least the pipeline's ``pp`` stages (1F1B)."""
    return max(1, pp, A6_GLOBAL_BATCH_SEQUENCES // (dp * micro_batch))


def b8_scenario(s: dict, name: str) -> dict:
    """Scenario ``s`` as B8 runs it: article B's own run (``stated.B8_ARTICLE``) wherever ``s``
    does not vary it: global batch 512 sequences at the article's micro-batch (assumed 1), so each
    DP rank accumulates 512 ÷ (DP × micro-batch) micro-batches (at least the pipeline's stages),
    and one 200 Gb/s port per node shared by its 8 GPUs."""
    setting = dict(s["setting"])
    out = dict(s)
    if s["assumption"] != "interconnect":
        setting["network_bytes_per_s"] = B8_ARTICLE["network_bytes_per_s"]
    if s["assumption"] != "accumulation":
        setting["micro_batch"] = B8_ARTICLE["micro_batch"]
        _, dp = _layout(name, B8_STATED["ranks"], s)
        out["accumulation"] = max(s["pp"], B8_ARTICLE["global_batch"] // (dp * setting["micro_batch"]))
    out["setting"] = setting
    return out


def b8_stated_text() -> str:
    a = B8_ARTICLE
    return (
        f"B8 at article B's run: global batch {a['global_batch']} sequences, micro-batch {a['micro_batch']} "
        f"(assumed), one 200 Gb/s port per node ({a['network_bytes_per_s'] / GB:.3g} GB/s per GPU)"
    )


def algorithm_text(algorithm: str) -> str:
    return {"best": "faster of NCCL's ring and tree", "ring": "ring only"}[algorithm]


def scenarios(p: dict, overhead: dict | None = None) -> list[dict]:
    """``[{"assumption", "value", "setting", "tp", "pp", "accumulation"}]``: the stated setting
    first, then one input varied at a time; last, with ``overhead``
    (``model_error.carried_overhead``), the stated setting plus the per-bucket overhead fitted
    to this machine's sweep (the simulator's model error here, as if a cluster paid it)."""
    base = stated_setting(p)
    # TP None: each model at its stated TP; accumulation None: A6's stated global batch
    plain = {"tp": None, "pp": 1, "accumulation": None}
    a6_device = stated_setting(p, "a6")["device"]
    stated = (
        f"A6 on {a6_device}, B8 on {base['device']} (devices.yaml links, NCCL latencies), GEMMs at "
        f"{base['matmul_share_of_mamf']:g} of MAMF, {algorithm_text(base['algorithm'])}, fp32 gradients; "
        + b8_stated_text()
    )
    out = [{"assumption": "stated", "value": stated, "setting": base, **plain}]
    if a6_device != base["device"]:  # A6 on the other article's cards
        value = f"A6 on {base['device']} (article B's cards)"
        out.append(
            {"assumption": "cards", "value": value, "setting": base, **plain, "a6_device": base["device"]}
        )
    stated_latencies = rates.Assumptions()
    for scale in SENSITIVITY["nccl_latency_scale"]:
        setting = {**base, **{name: scale * getattr(stated_latencies, name) for name in NCCL_LATENCY_FIELDS}}
        value = f"NCCL's latencies × {scale:g} (base, ring and tree steps)"
        out.append({"assumption": "latency per step", "value": value, "setting": setting, **plain})
    for name, (link, alpha) in SENSITIVITY["links"].items():
        setting = {**base, "network_bytes_per_s": link}
        value = f"{name}: {link / GB:.3g} GB/s per GPU"
        if alpha is not None:
            setting["alpha_inter_s"] = alpha
            value += f", {alpha * 1e6:g} µs"
        out.append({"assumption": "interconnect", "value": value, "setting": setting, **plain})
    for share in SENSITIVITY["matmul_share_of_mamf"]:
        setting = {**base, "matmul_share_of_mamf": share}
        out.append({"assumption": "GEMM share of MAMF", "value": f"{share:g}", "setting": setting, **plain})
    for tp, pp in SENSITIVITY["sharding"]:
        # 1F1B needs at least pp micro-batches per step (parallel.check_pipeline)
        value = "pure data parallelism (TP 1)" if tp == pp == 1 else f"TP {tp} × PP {pp}"
        value += f", {pp} micro-batches" if pp > 1 else ""
        row = {"assumption": "gradient sharding", "value": value, "setting": base, **plain}
        out.append({**row, "tp": tp, "pp": pp})
    for acc in SENSITIVITY["accumulation"]:
        out.append(
            {
                "assumption": "accumulation",
                "value": f"{acc} micro-batch{'es' if acc > 1 else ''} per step",
                "setting": base,
                **plain,
                "accumulation": acc,
            }
        )
    for nbytes in SENSITIVITY["grad_bytes_per_elem"]:
        setting = {**base, "grad_bytes_per_elem": nbytes}
        value = "bf16 (--grad-reduce-in-bf16)" if nbytes == 2 else f"{nbytes} bytes per gradient"
        out.append({"assumption": "gradient reduction", "value": value, "setting": setting, **plain})
    for algorithm in SENSITIVITY["algorithm"]:
        setting = {**base, "algorithm": algorithm}
        value = algorithm_text(algorithm)
        out.append({"assumption": "all-reduce algorithm", "value": value, "setting": setting, **plain})
    if overhead:
        o = overhead["per_bucket_overhead_s"]
        where = {False: "on the backward's path (as fitted)", True: "on the backward and the channel"}
        for on_channel, text in where.items():
            value = f"{o * 1e6:.0f} µs per bucket {text}; {overhead['mode']} compute"
            setting = {**base, "per_bucket_overhead_s": o, "overhead_on_channel": on_channel}
            out.append({"assumption": FITTED, "value": value, "setting": setting, **plain})
    return out


def stated_tp(name: str) -> int:
    """The tensor parallelism model ``name`` runs at in the stated setting (``stated.SCALE_TP``:
    the articles' layouts)."""
    return SCALE_TP.get(name, STATED_TP_FALLBACK)


def _layout(name: str, cards: int, s: dict) -> tuple[int, int]:
    """(TP, DP) of model ``name`` on ``cards`` devices under scenario ``s`` (TP ``None``: the
    model's stated TP)."""
    tp = s["tp"] if s["tp"] is not None else stated_tp(name)
    return tp, max(2, cards // (tp * s["pp"]))


def _run(name: str, cards: int, caps, s: dict, device: str | None = None) -> dict:
    """{cap: simulated row} for model ``name`` on ``cards`` devices under scenario ``s``, on
    ``device`` (default: the scenario's setting's)."""
    tp, dp = _layout(name, cards, s)
    setting = s["setting"] | ({"device": device} if device else {})
    acc = s["accumulation"] or stated_accumulation(dp, setting["micro_batch"], s["pp"])
    rows = gpt_simulation(
        preset(name), n=dp, bucket_caps_mb=caps, tp=tp, pp=s["pp"], accumulation=acc, **setting
    )
    return {r["bucket_cap_mb"]: r for r in rows}


def sensitivity_table(records):
    """One row per scenario: A6 at ``A6_CARDS`` cards (best cap per model, smallest first, with
    ties; where the article's 20–40 MB stands, :func:`sweet_spot_status`; the largest MFU gain
    of the best cap over 25 MiB; how far the cap moves MFU, max − min over the plausible caps
    ``A6_PLAUSIBLE_CAPS_MIB`` per model and the largest over the whole grid) and B8 (7B on
    ``B8_STATED['ranks']`` cards: MFU gain of the better of 50/100 MiB over 25 MiB), and
    whether each conclusion is the same as under the stated setting."""
    import pandas as pd

    p = records["params"]
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, *B8_STATED["better_caps_mb"]})
    models = by_size(p["scale_presets"])
    seven_b = next((m for m in models if "7b" in m), models[0])
    article = A6_PER_TENSOR_CASE["preset"]  # article A's 13B
    flags_s = article_bound()["copy_s"]  # the most B6's two flags can save at article B's run
    stated_step2_s = B8_ARTICLE["step_before_s"] - B8_ARTICLE["step_after_s"]
    rows = []
    for s in scenarios(p, model_error.carried_overhead(records)):
        a6_device = s.get("a6_device", stated_setting(p, "a6")["device"])
        a6 = {m: _run(m, A6_CARDS, caps, s, device=a6_device) for m in models}
        # only a layout that fits its card answers for its model (a step it cannot run is no reading)
        voting = [m for m in models if all(x.get("fits") is not False for x in a6[m].values())]
        probe = s["assumption"] == "interconnect" and s["value"].startswith(PROBE_LINKS)
        tied = {m: tied_best({c: x["step_s"] for c, x in r.items()}) for m, r in a6.items()}
        gains = {m: a6[m][tied[m][0]]["mfu"] - a6[m][DEFAULT_BUCKET_CAP_MB]["mfu"] for m in models}
        mfu = {m: {c: x["mfu"] for c, x in r.items()} for m, r in a6.items()}
        spreads = [spread_points(mfu[m], A6_PLAUSIBLE_CAPS_MIB) for m in models]
        voting_spreads = [spread_points(mfu[m], A6_PLAUSIBLE_CAPS_MIB) for m in voting] or [float("nan")]
        b8 = _run(seven_b, B8_STATED["ranks"], caps, b8_scenario(s, seven_b))
        b8_at_25 = b8[B8_STATED["default_cap_mb"]]["mfu"]
        b8_gain = max(b8[c]["mfu"] for c in B8_STATED["better_caps_mb"]) - b8_at_25
        step2_s = b8[B8_STATED["default_cap_mb"]]["step_s"] - b8[B8_ARTICLE["step2_cap_mb"]]["step_s"]
        rows.append(
            {
                "assumption": s["assumption"],
                "value": s["value"],
                "a6_layouts": " / ".join("TP {} × DP {}".format(*_layout(m, A6_CARDS, s)) for m in models),
                "a6_best_caps_mib": " / ".join(caps_label(tied[m]) for m in models),
                "reading": bool(voting) and not probe,
                "a6_models_that_fit": " / ".join(voting) or "none",
                "a6_20_40_mb": sweet_spot_status([tied[m] for m in voting]) if voting else "none fits",
                "a6_max_gain_vs_25_points": max(gains.values()) * 100,
                "a6_spread_points": " / ".join(f"{x:.1f}" for x in spreads),
                "a6_max_spread_points": max(voting_spreads),
                "a6_max_spread_grid_points": max(
                    (spread_points(mfu[m]) for m in voting), default=float("nan")
                ),
                "a6_article_spread_points": spread_points(mfu[article], A6_PLAUSIBLE_CAPS_MIB)
                if article in mfu
                else float("nan"),
                "b8_gain_50_100_vs_25_points": b8_gain * 100,
                "b8_outcome": b8_outcome(b8_gain, b8_at_25),
                "b8_step2_share": (step2_s + flags_s) / stated_step2_s,
                "b8_tail_cut_share": b8_tail_cut_share(b8),
                "a6_any_model_in_claim": any(spread_in_claim(x) for x in voting_spreads),
                "a6_can_reach": spread_answer({m: mfu[m] for m in voting}) if voting else None,
            }
        )
    df = pd.DataFrame(rows)
    stated = df.iloc[0]
    df["a6_conclusion_same"] = (df.a6_20_40_mb == "outside") == (stated.a6_20_40_mb == "outside")
    df["a6_spread_reaches_claim"] = df.a6_max_spread_points >= A6_MFU_POINTS[0]
    df["a6_spread_same"] = df.a6_spread_reaches_claim == bool(stated.a6_max_spread_points >= A6_MFU_POINTS[0])
    df["a6_article_spread_in_claim"] = df.a6_article_spread_points.map(spread_in_claim)
    df["b8_step2_explained"] = df.b8_step2_share >= B8_STEP2_EXPLAINED_SHARE
    df["b8_conclusion_same"] = df.b8_outcome == stated.b8_outcome
    smoother = df.b8_tail_cut_share >= B8_VISIBLE_TAIL_CUT
    df["b8_tail_same"] = smoother == bool(smoother.iloc[0])
    return df


def fitted_text(df, claim: str) -> str:
    """A clause for A6's or B8's evidence: the answer under the per-bucket overhead fitted to
    this machine's sweep (the simulator's model error here), in both of its rows."""
    rows = df[df.assumption == FITTED]
    if not len(rows):
        return ""
    o = rows.value.iloc[0].split(" per bucket")[0]
    column = "a6_conclusion_same" if claim == "a6" else "b8_tail_same"
    survives = "survives in both" if rows[column].all() else "changes"
    if claim == "a6":
        what = "; ".join(
            f"{where}: best {r.a6_best_caps_mib} MiB ({r.a6_20_40_mb} 20–40 MB, "
            f"+{r.a6_max_gain_vs_25_points:.1f} points over 25 MiB)"
            for where, r in zip(("on the backward's path", "also on the channel"), rows.itertuples())
        )
    else:
        what = "; ".join(
            f"{where}: 50–100 MiB cuts the tail {r.b8_tail_cut_share:.1%}, the step "
            f"{r.b8_gain_50_100_vs_25_points:+.2f} MFU points"
            for where, r in zip(("on the backward's path", "also on the channel"), rows.itertuples())
        )
    return (
        f"; the simulator's model error on this machine carried to scale (a fitted per-bucket "
        f"overhead of {o}, model_error) — {what}: the answer {survives}"
    )


def deciding(df):
    """The scenarios that decide a verdict: every row but the fitted per-bucket overhead's
    (:data:`FITTED`), whose input is re-measured on every run and moves between fresh runs (it
    once turned B8's answer in one run of three), and but the rows that are no reading of the
    article (``reading`` False: a probe link no such cluster has, or a scenario in which no A6
    model's layout fits its card). Those rows are reported beside the verdict
    (:func:`fitted_text`, the table), never counted in it."""
    if "assumption" not in df:
        return df
    keep = df.assumption != FITTED
    return df[keep & df.reading.astype(bool)] if "reading" in df else df[keep]


def summary(df) -> dict:
    """How many of the deciding scenarios (:func:`deciding`) keep each conclusion, and the ones
    that do not."""
    df = deciding(df)
    return {
        "scenarios": len(df),
        "a6_same": int(df.a6_conclusion_same.sum()),
        "a6_changed": [
            f"{r.assumption} {r.value} ({r.a6_20_40_mb})" for r in df.itertuples() if not r.a6_conclusion_same
        ],
        "a6_spread_reaching": [
            f"{r.assumption} {r.value} ({r.a6_max_spread_points:.1f} points)"
            for r in df.itertuples()
            if r.a6_spread_reaches_claim
        ],
        "a6_spread_max_points": float(df.a6_max_spread_points.max()),
        "a6_article_in_claim": int(df.a6_article_spread_in_claim.sum()),
        # the scenarios whose answer differs from the stated one's
        "a6_article_changed": [
            f"{r.assumption} {r.value} ({r.a6_article_spread_points:.1f} points)"
            for r in df.itertuples()
            if r.a6_article_spread_in_claim != df.a6_article_spread_in_claim.iloc[0]
        ],
        "b8_same": int(df.b8_conclusion_same.sum()),
        "b8_changed": [
            f"{r.assumption} {r.value} ({r.b8_outcome})" for r in df.itertuples() if not r.b8_conclusion_same
        ],
    }


def sweet_spot_decision(statuses) -> str:
    """The sweet-spot row over the scenarios (:func:`sweet_spot_status` each): ``best`` (20–40 MB
    is some model's only best cap) answers yes, ``outside`` (every best cap lies outside it) no,
    and a tie (the cap barely matters there) neither (``verdicts.over_scenarios``)."""
    answer = {"best": True, "outside": False, "tied": None}
    return verdicts.over_scenarios(answer[s] for s in statuses)


def b8_tail_cut_share(rows_by_cap: dict) -> float:
    """The share of 25 MiB's communication tail the better of 50/100 MiB removes (B8's
    sentence on its own quantity; ``b8_case.tail_cut`` reports it with its bound)."""
    base = rows_by_cap[B8_STATED["default_cap_mb"]]["exposed_comm_s"]
    best = min(rows_by_cap[c]["exposed_comm_s"] for c in B8_STATED["better_caps_mb"])
    return (base - best) / base if base > 0 else 0.0


def b8_outcome(gain: float, mfu_at_25: float) -> str:
    """Whether 50–100 MiB ``gains`` over 25 MiB, is ``tied`` with it (the MFU within
    :data:`stated.B8_VISIBLE_SHARE` of 25 MiB's: no change the article could have seen) or
    ``reversed``."""
    if abs(gain) <= B8_VISIBLE_SHARE * mfu_at_25:
        return "tied"
    return "gains" if gain > 0 else "reversed"
