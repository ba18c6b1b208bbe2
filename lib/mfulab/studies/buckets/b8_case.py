"""B8 at article B's own run (``stated.B8_ARTICLE``: 64 A100s, TP 4 × DP 16, 512 sequences per
step, one 200 Gb/s port per node): the simulator's step per cap (:func:`b8_table`), the tail per
reading of the micro-batch (:func:`b8_tail_table`), the claim's sentence on the tail and §5.2's
step 2 (:func:`b8_claims`), each decided only where every scenario of the sensitivity table
agrees with the stated case (analytic only otherwise)."""

from __future__ import annotations

from mfulab.analytic.config import preset
from mfulab.studies.buckets import b8_consistency, sensitivity
from mfulab.studies.buckets.b8_consistency import tail_cut
from mfulab.studies.buckets.cluster_scale import model_error_text
from mfulab.studies.buckets.simulator import DEFAULT_BUCKET_CAP_MB, gpt_simulation
from mfulab.studies.buckets.stated import (
    B8_ARTICLE,
    B8_BUSBW_GBPS,
    B8_MICRO_BATCH_READINGS,
    B8_STATED,
    B8_STEP2_EXPLAINED_SHARE,
    B8_VISIBLE_TAIL_CUT,
)
from mfulab.studykit import verdicts
from mfulab.studykit.step_error import SWITCH_MARGIN
from mfulab.studykit.verdicts import Claim


def b8_table(records):
    """B8's case on article B's cards (``scale_device``): the 7B of ``scale_presets`` at its stated
    TP on ``B8_STATED['ranks']`` cards, every cap of the grid plus 25, 50 and 100 MiB."""
    import pandas as pd

    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return pd.DataFrame()
    caps = sorted(set(p["scale_bucket_caps_mb"]) | {DEFAULT_BUCKET_CAP_MB, *B8_STATED["better_caps_mb"]})
    stated = sensitivity.b8_scenario(sensitivity.scenarios(p)[0], seven_b[0])
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    rows = gpt_simulation(
        preset(seven_b[0]),
        n=cards // tp,
        tp=tp,
        bucket_caps_mb=caps,
        accumulation=stated["accumulation"],
        **stated["setting"],
    )
    return pd.DataFrame(rows)


def b8_tail_table(records):
    """B8's tail at article B's run under each reading of its micro-batch
    (``stated.B8_MICRO_BATCH_READINGS``: one sequence, assumed; §4's DataLoader batch_size=8):
    :func:`tail_cut` at 25 MiB against 50 and 100 MiB, the stated setting otherwise."""
    import pandas as pd

    p = records["params"]
    seven_b = [m for m in p["scale_presets"] if "7b" in m]
    if not seven_b:
        return pd.DataFrame()
    stated = sensitivity.b8_scenario(sensitivity.scenarios(p)[0], seven_b[0])
    tp, cards = sensitivity.stated_tp(seven_b[0]), B8_STATED["ranks"]
    dp = cards // tp
    caps = (B8_STATED["default_cap_mb"], *B8_STATED["better_caps_mb"])
    out = []
    for micro_batch in B8_MICRO_BATCH_READINGS:
        accumulation = max(1, B8_ARTICLE["global_batch"] // (dp * micro_batch))
        setting = {**stated["setting"], "micro_batch": micro_batch}
        rows = gpt_simulation(
            preset(seven_b[0]), n=dp, tp=tp, bucket_caps_mb=caps, accumulation=accumulation, **setting
        )
        by_cap = {r["bucket_cap_mb"]: r for r in rows}
        out.append(
            {
                "micro_batch": micro_batch,
                "accumulation": accumulation,
                "step_25_s": by_cap[caps[0]]["step_s"],
                "fits": bool(by_cap[caps[0]]["fits"]),
                **tail_cut(by_cap),
            }
        )
    return pd.DataFrame(out)


def b8_claims(records, scale, tails, gate=None, gated=None) -> list[Claim]:
    """B8's sentence on its own quantity, the tail a timeline shows: "smoother" holds in a case
    when 50-100 MiB cuts 25 MiB's tail by at least ``stated.B8_VISIBLE_TAIL_CUT`` of itself.
    The cases are the readings of article B's run that hold its own figures
    (``b8_consistency.consistency_table``: 9.4 s before step 2, 0.3 s saved by step 3's network
    tuning), each on the untuned network step 2 ran on, over the sensitivity rows of an input no
    reading states (``b8_consistency.gated_rows``; ``verdicts.over_scenarios``). Where no reading
    holds, the article's figures do not hold together and the row is not checkable. Read as the
    ZeRO-2 of §5.1, the cap never reaches DeepSpeed's engine: no cut, which agrees only with a
    refutation. Beside it the step per cap on the tuned network against the article's 9.4 s; then
    §5.2's step 2 (:func:`b8_step2_claim`)."""
    if scale.empty or tails.empty:
        return []
    d = scale.set_index("bucket_cap_mb")
    base = B8_STATED["default_cap_mb"]
    caps = [c for c in (base, *B8_STATED["better_caps_mb"]) if c in d.index]
    if base not in caps or len(caps) < 2:
        return []
    gate = b8_consistency.consistency_table(records) if gate is None else gate
    gated = b8_consistency.gated_rows(records, gate) if gated is None else gated
    answers = [_tail_answer(c) for c in gated.tail_cut_share] if len(gated) else []
    ddp_reading = verdicts.over_scenarios(answers) if answers else "not checkable"
    # the ZeRO-2 reading (no cut) agrees only with a refutation
    decision = {"refuted": "refuted", "not checkable": "not checkable"}.get(ddp_reading, "analytic only")
    holding = ", ".join(gate[gate.holds].reading) or "none"
    verdict_text = {
        "refuted": f"the readings that hold ({holding}) leave the tail as long to within the line in every "
        "case; read as the ZeRO-2 of §5.1, bucket_cap_mb does not reach DeepSpeed's engine: both agree",
        "confirmed": f"the readings that hold ({holding}) cut the tail in every case, but read as the ZeRO-2 "
        "of §5.1 bucket_cap_mb does not reach DeepSpeed's engine: the readings disagree",
        "analytic only": f"on the readings that hold ({holding}) the cases do not all decide: a cut must "
        f"clear the 10% line by the step model's ±{SWITCH_MARGIN:.0%} either way",
        "not checkable": "no reading of the run holds the article's own step times together",
    }[ddp_reading]
    cuts = (
        f"the tail at 25 MiB {gated.tail_25_s.min():.2f}–{gated.tail_25_s.max():.2f} s, and 50–100 MiB cut "
        + b8_consistency.per_reading(gated, "tail_cut_share", "{:.1%}")
        + f" of it (the most any cap can cut: {gated.most_cut_share.min():.0%}–"
        f"{gated.most_cut_share.max():.0%})"
        if len(gated)
        else ""
    )
    better = max((c for c in caps if c != base), key=lambda c: d.loc[c, "mfu"])
    saved_s = d.loc[base, "step_s"] - d.loc[better, "step_s"]
    tp, dp = int(d.loc[base, "tp"]), int(d.loc[base, "dp"])
    return [
        Claim(
            "B8",
            "at 25 MB the communication-wait tail was obvious; at 50–100 MB some layers' "
            "communication overlapped the backward more smoothly",
            f"simulated tail (all-reduce left after the backward) at article B's run (7B on "
            f"{B8_STATED['ranks']} A100s, TP {tp} × DP {dp}) on the untuned network step 2 ran on "
            f"(busbw {B8_BUSBW_GBPS['before']:g} GB/s), under the readings that hold the article's own step "
            f"times; smoother: a cut of ≥ {B8_VISIBLE_TAIL_CUT:.0%} of the tail",
            decision,
            f"{verdict_text}. The readings "
            + b8_consistency.consistency_text(gate)
            + (f". Where they hold: {cuts}" if cuts else "")
            + ". On the tuned network (after step 3), the stated reading's step at 25 / 50 / 100 MiB: "
            + " / ".join(f"{d.loc[c, 'step_s']:.3f} s" for c in caps)
            + f" (MFU {d.loc[base, 'mfu']:.1%}; {better:g} MiB saves {saved_s * 1e3:.0f} ms)"
            + model_error_text(records),
            basis=verdicts.ASSUMED,  # micro-batch, ports and gradient precision read, ZeRO-2 priced as DDP
        ),
        b8_step2_claim(gate, gated),
    ]


def article_first_buckets(records) -> dict | None:
    """The first bucket DDP's rule seals for article B's 7B at its TP (the gradients one device
    holds, in ready order: ``simulator.sharded_layout``, fp32 as DDP keeps them under autocast),
    at DDP's default (no cap passed: a 1 MiB first bucket), at 25 and at 50 MB passed:
    ``{"first_tensor", "model", "tp", setting: first bucket bytes}``; None without a 7B."""
    from mfulab.analytic.config import preset
    from mfulab.studies.buckets.simulator import form_buckets, sharded_layout

    sevens = [m for m in records["params"]["scale_presets"] if "7b" in m]
    if not sevens:
        return None
    tp = sensitivity.stated_tp(sevens[0])
    layout = sharded_layout(preset(sevens[0]), tp=tp)
    nbytes = [4 * k for _, k in layout]
    out = {"first_tensor": layout[0][0], "model": sevens[0], "tp": tp}
    for setting, cap, default in (("default", 25, True), (25, 25, False), (50, 50, False)):
        first = form_buckets(nbytes, bucket_cap_mb=cap, default_cap=default)[0]
        out[setting] = sum(nbytes[i] for i in first)
    return out


def b8_earlier_claim(gpt, article: dict | None = None) -> list[Claim]:
    """§5.2's reason for step 2, "这一步让梯度通信更早开始" (this step made the gradient communication
    start earlier). Decided at article B's 7B (``article``: :func:`article_first_buckets`, DDP's
    documented rule applied to the model's gradients): the first all-reduce starts when its bucket
    is sealed, so 25 → 50 MB starts it earlier only where the 50 MB first bucket is smaller.
    Refuted (analysis) where it is the same or larger, at the default too (the article's 25 may be
    DDP's default, unpassed). The reference GPT's recorded layouts (``gpt``:
    ``analysis.gpt_layout_table``) show the rule here: at its default DDP seals a 1 MiB first
    bucket, with ``bucket_cap_mb`` passed the cap (round fifteen's reader: the reference GPT ties
    its head to its embedding, the article's 7B does not, and its untied output layer fills the
    first bucket alone; until 2026-12-07 the reference GPT's count decided, by construction)."""
    if gpt.empty:
        return []
    default = gpt[gpt.bucket_cap_mb.astype(str).str.startswith("default")]
    passed = gpt[~gpt.bucket_cap_mb.astype(str).str.startswith("default")]
    passed = passed[passed.bucket_cap_mb.astype(float) >= 1]
    if default.empty or passed.empty:
        return []
    d, p = default.iloc[0], passed.iloc[-1]
    here = (
        f"here, on the reference GPT (head tied to the embedding): default first bucket "
        f"{d.first_bucket_bytes / 2**20:.2f} MiB, bucket_cap_mb={float(p.bucket_cap_mb):g} passed "
        f"{p.first_bucket_bytes / 2**20:.2f} MiB: a passed cap drops DDP's 1 MiB first bucket"
    )
    if article is None:
        later = p.first_bucket_bytes > d.first_bucket_bytes
        return [
            Claim(
                "B8",
                "step 2 (bucket_cap_mb 25 → 50 MB) made the gradient communication start earlier (更早开始)",
                "the first bucket DDP sealed for the reference GPT here, at its default and passed",
                "refuted" if later else "confirmed",
                here,
                basis=verdicts.CONSTRUCTION,
            )
        ]
    mib = {k: article[k] / 2**20 for k in ("default", 25, 50)}
    earlier = article[50] < min(article[25], article["default"])
    alone = (
        f": the first gradient ready, {article['first_tensor']}, fills it alone at every cap"
        if mib["default"] == mib[25] == mib[50]
        else ""
    )
    evidence = (
        f"first bucket at the default {mib['default']:.1f} MiB, at 25 MB {mib[25]:.1f} MiB, at 50 MB "
        f"{mib[50]:.1f} MiB{alone} ("
        + ("an earlier start" if earlier else "the same start or a later one, not an earlier one")
        + f"; a larger cap's gain, if any, is fewer calls). {here}"
    )
    return [
        Claim(
            "B8",
            "step 2 (bucket_cap_mb 25 → 50 MB) made the gradient communication start earlier (更早开始)",
            f"the first bucket DDP's rule seals for article B's {article['model']} at TP {article['tp']} "
            "(fp32 gradients, in ready order), at DDP's default, 25 and 50 MB: the first all-reduce starts "
            "when it is sealed; earlier only where 50 MB seals a smaller one",
            "confirmed" if earlier else "refuted",
            evidence,
            basis=verdicts.ASSUMED,  # the 7B's shape is the course's reading; TP 4 is the article's
        )
    ]


def _tail_answer(cut_share: float) -> bool | None:
    """A case's answer to "smoother": the cut share of the tail against the line, decided only
    beyond the course's margin for a modelled comparison of two settings (``SWITCH_MARGIN``: the
    tail is the step model's, and a tail that much shorter would make the same cut that much larger
    a share): yes where even a tail that much longer keeps the cut past the line, no where even a
    tail that much shorter keeps it under, None (open) between."""
    if cut_share / (1 + SWITCH_MARGIN) >= B8_VISIBLE_TAIL_CUT:
        return True
    if cut_share * (1 + SWITCH_MARGIN) < B8_VISIBLE_TAIL_CUT:
        return False
    return None


def b8_step2_claim(gate, gated) -> Claim:
    """Article B §5.2 step 2 (the cap 25 → 50 MB with gradient_as_bucket_view and static_graph:
    9.4 → 9.0 s), on the readings of the run that hold the article's own figures
    (``b8_consistency``), on the untuned network it ran on: a case explains the 0.4 s when the
    simulated saving of the cap plus the most the flags can save (``b6_scale.article_bound``: the two
    gradient copies at HBM bandwidth; static_graph nothing without unused parameters) reaches
    ``B8_STEP2_EXPLAINED_SHARE`` of it, and says no only where even the bound no cap can beat
    (the last micro-batch's backward plus the latency the larger cap saves) with the flags' stays
    under that line (above it the simulator alone would decide on a few percent of the step).
    Read as the ZeRO-2 of §5.1, DDP's arguments do not reach DeepSpeed's engine and save nothing:
    refuted (analysis) when the DDP reading says no in every case, not checkable where no reading
    holds, analytic only otherwise."""
    from mfulab.studies.buckets.b6_scale import article_bound

    a = B8_ARTICLE
    cap = a["step2_cap_mb"]
    flags_s = article_bound()["copy_s"]
    stated_s = a["step_before_s"] - a["step_after_s"]
    line_s = B8_STEP2_EXPLAINED_SHARE * stated_s
    answers = [_step2_answer(r, flags_s, line_s) for r in gated.itertuples()]
    ddp_reading = verdicts.over_scenarios(answers) if answers else "not checkable"
    decision = {"refuted": "refuted", "not checkable": "not checkable"}.get(ddp_reading, "analytic only")
    cases = (
        "the cap's saving with the flags' (≤ "
        f"{flags_s * 1e3:.0f} ms) explains "
        + b8_consistency.per_reading(
            gated.assign(share=(gated.step2_cap_saved_s + flags_s) / stated_s), "share", "{:.0%}"
        )
        + f" of the {stated_s:.1f} s; the bound no cap can beat, with the flags', "
        f"{(gated.most_cut_s.min() + flags_s) * 1e3:.0f}–{(gated.most_cut_s.max() + flags_s) * 1e3:.0f} ms "
        f"against the line's {line_s * 1e3:.0f} ms"
        if len(gated)
        else ""
    )
    return Claim(
        "B8",
        f"§5.2 step 2: the cap 25 → {cap} MB and both DDP flags took the step from "
        f"{a['step_before_s']:.1f} s to {a['step_after_s']:.1f} s",
        f"simulated saving of the cap plus the flags' bound on the untuned network, under the readings of "
        f"the run that hold the article's own figures, against the stated {stated_s:.1f} s (explained: "
        f"≥ {B8_STEP2_EXPLAINED_SHARE:.0%} of it)",
        decision,
        (f"read as DDP, {cases}" if cases else "no reading of the run holds the article's own step times")
        + f" ({verdicts.label(ddp_reading, verdicts.ASSUMED)} alone); read as the ZeRO-2 of §5.1: DDP's "
        "arguments do not reach DeepSpeed's engine, 0 ms; the article's configuration contradicts itself",
        basis=verdicts.ASSUMED,  # micro-batch, ports and gradient precision read, ZeRO-2 priced as DDP
    )


def _step2_answer(r, flags_s: float, line_s: float) -> bool | None:
    """One case of step 2: explained where the cap's saving with the flags' reaches the line, not
    where even the bound no cap can beat with the flags' stays under it, open between."""
    if r.step2_cap_saved_s + flags_s >= line_s:
        return True
    return False if r.most_cut_s + flags_s < line_s else None


def b6_exposed_reduction(records, accumulations, gate=None) -> dict:
    """B6 at scale: the gradient reduction left exposed after the last micro-batch's backward in
    article B's 7B run at 25 MiB, under the reading of the run that holds its figures and leaves
    the least exposed
    (``b8_consistency.exposed_reduction``: the same reading B8 is decided on, on the untuned
    network of the 9.0 s step), at each number of micro-batches per step in ``accumulations``,
    divided by 1 + the step model's margin for a switch: a lower bound on what the step holds
    besides its compute (``flags.b6_claims``), with the reading it rests on. Empty where the run
    has no 7B at scale."""
    if not any("7b" in m for m in records["params"]["scale_presets"]):
        return {}
    gate = b8_consistency.consistency_table(records) if gate is None else gate
    found = b8_consistency.exposed_reduction(records, gate, accumulations)
    return {
        "reading": found["reading"],
        "exposed_s": {m: s / (1 + SWITCH_MARGIN) for m, s in found["exposed_s"].items()},
    }
