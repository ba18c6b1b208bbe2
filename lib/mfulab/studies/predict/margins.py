"""The decisive margin per kind of comparison: how far the step model's *ratio* of two published
runs strays, for pairs that differ the way a chapter's comparison does.

A chapter decides with the step model on the ratio of two modelled steps. How wrong such a ratio
can be depends on what the two configurations differ in. Two parallel layouts of one model on one
cluster (other TP, PP, virtual stages, DP width, micro-batch) share every compute and
communication term the model has, only in other amounts; a *switch* (a recompute policy, a ZeRO
stage, an overlap switch such as async TP, the attention kernel, torch.compile, another
framework) turns a term on or off, or replaces it, and the ratio then carries that term's error
whole. So the held-out pairs (rows of one source, device and model, both in BF16/FP16, the
precision every chapter's comparison is in) are sorted by the settings their layouts differ in
(``validate.LAYOUT_KEYS`` and the layout's other fields):

* ``layout``: every differing setting is in :data:`PARALLEL_SETTINGS`;
* ``switch``: any other setting differs, alone or with the layout, or nothing the files record
  does (the rows then differ in a switch the file leaves out, such as torch.compile);

and each kind's margin is the 90th percentile of its pairs' ratio errors
(``uncertainty.pair_ratio_errors``). The sort is by what the layouts record, fixed here before
any chapter reads a kind's figure; the history (``history.evaluate``) records both per revision,
and ``studykit.step_error`` gives a chapter the figure of the kind its comparison is."""

from __future__ import annotations

import itertools
import json

import numpy as np

from mfulab.studies.predict.uncertainty import GROUPS, _priced, pair_ratio_errors

# how the same model is split over the same cluster: the degrees, the width and the micro-batch
PARALLEL_SETTINGS = frozenset(
    {"n_devices", "tp", "pp", "vpp", "sequence_parallel", "global_batch", "micro_batch"}
)
KINDS = {
    "layout": "two parallel layouts (TP, PP, virtual stages, DP width, micro-batch)",
    "switch": "a switch (recompute, ZeRO stage, an overlap switch, attention kernel, compile, framework)",
}
PRECISIONS = ("bf16", "fp16")  # the GEMM precisions a chapter's comparison runs in


def differing(layout_a: dict, layout_b: dict) -> set:
    """The settings two layouts give different values (a setting one of them omits included)."""
    return {k for k in set(layout_a) | set(layout_b) if layout_a.get(k) != layout_b.get(k)}


def pair_kind(layout_a: dict, layout_b: dict) -> str:
    """``layout`` where the two layouts differ only in :data:`PARALLEL_SETTINGS`, else ``switch``
    (see the module docstring)."""
    differ = differing(layout_a, layout_b)
    return "layout" if differ and differ <= PARALLEL_SETTINGS else "switch"


def kind_pairs(df, runs, *, splits=GROUPS["all held out"]):
    """One row per held-out pair of one source, device and model, both in a precision of
    :data:`PRECISIONS`: its source, kind, and the predictor's ratio error."""
    import pandas as pd

    by_id = {r["id"]: r for r in runs}
    g = _priced(df, splits)
    rows = []
    for (source, _device), x in g.groupby(["source", "device"], sort=False):
        error = dict(zip(x.id, x.error))
        null_error = dict(zip(x.id, x.null_error))
        for a, b in itertools.combinations(list(x.id), 2):
            ra, rb = by_id[a], by_id[b]
            la, lb = ra.get("layout") or {}, rb.get("layout") or {}
            same_model = json.dumps(ra["model"], sort_keys=True) == json.dumps(rb["model"], sort_keys=True)
            if not same_model or {la.get("dtype", "bf16"), lb.get("dtype", "bf16")} - set(PRECISIONS):
                continue
            rows.append(
                {
                    "source": source,
                    "a": a,
                    "b": b,
                    "differ_in": ", ".join(sorted(differing(la, lb))) or "nothing the files record",
                    "kind": pair_kind(la, lb),
                    "settings_differing": len(differing(la, lb)),
                    "ratio_error": float(pair_ratio_errors([error[a], error[b]])[0]),
                    # the null model (one utilisation for every run) on the same pair: the ratio a
                    # model with no layout or switch terms at all would give
                    "null_ratio_error": float(pair_ratio_errors([null_error[a], null_error[b]])[0]),
                }
            )
    columns = [
        "source",
        "a",
        "b",
        "differ_in",
        "kind",
        "settings_differing",
        "ratio_error",
        "null_ratio_error",
    ]
    return pd.DataFrame(rows, columns=columns)


def kind_margins(pairs) -> dict:
    """Per kind of :func:`kind_pairs`' ``pairs``: pairs, sources, and the median, 75th and 90th
    percentile of the ratio errors (the 90th is the kind's decisive margin)."""
    out = {}
    for kind in KINDS:
        of_kind = pairs[pairs.kind == kind]
        e = of_kind.ratio_error.to_numpy()
        if not len(e):
            continue
        p50, p75, p90 = np.quantile(e, [0.5, 0.75, 0.9])
        out[kind] = {
            "pairs": int(len(e)),
            "sources": int(of_kind.source.nunique()),
            "one_setting": int((of_kind.settings_differing == 1).sum()),
            "median": round(float(p50), 4),
            "p75": round(float(p75), 4),
            "p90": round(float(p90), 4),
        }
    return out


def kind_null(pairs) -> dict:
    """Per kind, the null model's ratio errors on the same pairs (median and 90th percentile)
    and the share of pairs the step model gets closer than the null: what the model's layout and
    switch terms add over a constant utilisation, which cannot tell two layouts apart by design."""
    out = {}
    for kind in KINDS:
        of_kind = pairs[pairs.kind == kind]
        if of_kind.empty:
            continue
        null = of_kind.null_ratio_error.to_numpy()
        out[kind] = {
            "null_median": round(float(np.median(null)), 4),
            "null_p90": round(float(np.quantile(null, 0.9)), 4),
            "model_closer_share": round(float((of_kind.ratio_error < of_kind.null_ratio_error).mean()), 4),
        }
    return out


# the layout settings that split the model differently (what a layout ranking turns on), against
# the data-parallel width and batch, which a constant utilisation already tracks
SPLIT_SETTINGS = frozenset({"tp", "pp", "vpp", "sequence_parallel"})


def layout_term_margins(pairs):
    """The layout pairs in two groups: those that change how the model is split (TP, PP,
    virtual stages, sequence parallelism: :data:`SPLIT_SETTINGS`) and those that change only the
    data-parallel width or the batch; per group, pairs, sources and the 90th percentile of the
    model's ratio errors beside the null's. A layout ranking turns on the first group."""
    import pandas as pd

    lay = pairs[pairs.kind == "layout"]
    split = lay.differ_in.map(lambda d: bool(set(d.split(", ")) & SPLIT_SETTINGS))
    rows = []
    for name, g in (("TP, PP or virtual stages", lay[split]), ("DP width or batch only", lay[~split])):
        if g.empty:
            continue
        rows.append(
            {
                "layout pairs that change": name,
                "pairs": len(g),
                "sources": g.source.nunique(),
                "p90": float(np.quantile(g.ratio_error, 0.9)),
                "null_p90": float(np.quantile(g.null_ratio_error, 0.9)),
            }
        )
    return pd.DataFrame(rows)


N_BOOT = 2000  # bootstrap draws of sources for the margins' intervals


def kind_uncertainty(pairs, *, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """How much each kind's margin (the 90th percentile of its pairs' ratio errors) rests on which
    publications supplied the pairs. Per kind: the 95% interval of the 90th percentile over a
    bootstrap of sources (every pair of a drawn source enters; pairs of one source share its
    reporting and are not independent, as ``uncertainty`` resamples them), the lowest and highest
    90th percentile with one source left out, and the source that supplies most pairs with its
    share of them. ``pairs``: :func:`kind_pairs`."""
    rng = np.random.default_rng(seed)
    out = {}
    for kind in KINDS:
        of_kind = pairs[pairs.kind == kind]
        if of_kind.empty:
            continue
        by_source = {s: g.ratio_error.to_numpy() for s, g in of_kind.groupby("source")}
        names = sorted(by_source)
        draws = [
            np.quantile(
                np.concatenate([by_source[names[i]] for i in rng.integers(0, len(names), len(names))]), 0.9
            )
            for _ in range(n_boot)
        ]
        left_out = [
            np.quantile(np.concatenate([by_source[s] for s in names if s != drop]), 0.9)
            for drop in names
            if len(names) > 1
        ]
        counts = of_kind.source.value_counts()
        out[kind] = {
            "p90_lo": round(float(np.quantile(draws, 0.025)), 4),
            "p90_hi": round(float(np.quantile(draws, 0.975)), 4),
            "p90_one_source_out_min": round(float(min(left_out)), 4) if left_out else None,
            "p90_one_source_out_max": round(float(max(left_out)), 4) if left_out else None,
            "largest_source": str(counts.index[0]),
            "largest_source_share": round(float(counts.iloc[0] / counts.sum()), 4),
        }
    return out


def kind_table(margins: dict, uncertainty: dict | None = None, null: dict | None = None):
    """:func:`kind_margins` as a table a notebook prints, with :func:`kind_null`'s and
    :func:`kind_uncertainty`'s columns where given."""
    import pandas as pd

    extra = ["null_median", "null_p90", "model_closer_share"] if null else []
    if uncertainty:
        extra += ["p90_lo", "p90_hi", "p90_one_source_out_min", "p90_one_source_out_max"]
        extra += ["largest_source", "largest_source_share"]
    rows = [
        {"kind": k, "compares": KINDS[k], **v, **(null or {}).get(k, {}), **(uncertainty or {}).get(k, {})}
        for k, v in margins.items()
    ]
    columns = ["kind", "compares", "pairs", "sources", "one_setting", "median", "p75", "p90"]
    return pd.DataFrame(rows, columns=columns + extra)


def kind_text(margins: dict) -> str:
    """What the kinds' margins say, for the chapter's text."""
    if not {"layout", "switch"} <= set(margins):
        return ""
    lay, sw = margins["layout"], margins["switch"]
    return (
        "**The margin per kind of comparison.** Between two parallel layouts of one model on one "
        f"cluster ({lay['pairs']} held-out pairs from {lay['sources']} sources), the model's ratio error "
        f"has a median of {lay['median']:.1%} and a 90th percentile of {lay['p90']:.1%}: a layout "
        f"ranking decides beyond ±{_decisive(lay):.0%} (the decisive line below). Across a switch "
        f"({sw['pairs']} pairs from {sw['sources']} sources) the median is {sw['median']:.1%} and the "
        f"90th percentile {sw['p90']:.1%}: a switch turns a term on or off, and the ratio keeps that "
        "term's whole error, so a recompute policy, a ZeRO stage or an overlap switch decides only "
        f"beyond ±{_decisive(sw):.0%}. Only {sw['one_setting']} of the switch pairs change one recorded "
        "setting and nothing else (the rest change the layout with it, or a switch the files do not record), "
        "so the switch figure is what the published pairs can give, not a measurement of a pure toggle."
        + _null_text(margins)
        + _uncertainty_text(margins)
    )


def _decisive(m) -> float:
    """The line a kind's verdicts are decided beyond (``step_error.decisive_margin``'s rule): the
    largest one-source-out 90th percentile where recorded, else the point 90th percentile."""
    loso = m.get("p90_one_source_out_max")
    return max(float(m["p90"]), float(loso) if loso is not None and loso == loso else 0.0)


def _null_text(margins: dict) -> str:
    """The null model's margins beside the step model's, where the table has them."""
    if margins["layout"].get("null_p90") is None:
        return ""
    parts = [
        f"{kind} {margins[kind]['null_p90']:.0%} (the step model's {margins[kind]['p90']:.0%}, closer on "
        f"{margins[kind]['model_closer_share']:.0%} of the pairs)"
        for kind in ("layout", "switch")
    ]
    return (
        " **The null model on the same pairs** (one utilisation for every run: no layout or switch "
        "term at all) has 90th percentiles of "
        + " and ".join(parts)
        + ". "
        + " ".join(
            f"On {kind} pairs the two are close: the pairs mostly differ in what a constant utilisation "
            "already captures (DP width, global batch), and the margin says little about the model's "
            "skill at the terms a chapter's comparison turns on."
            if margins[kind]["null_p90"] < CLOSE_TO_NULL * margins[kind]["p90"]
            else f"On {kind} pairs the model's terms carry what a constant utilisation lacks."
            for kind in ("layout", "switch")
        )
    )


# the null's 90th percentile within this factor of the model's: the pairs barely test the terms
CLOSE_TO_NULL = 1.25


def _uncertainty_text(margins: dict) -> str:
    """The margins' own uncertainty (:func:`kind_uncertainty`'s columns), where the table has them."""
    parts = []
    for kind in ("layout", "switch"):
        m = margins[kind]
        if m.get("p90_lo") is None or m.get("p90_lo") != m.get("p90_lo"):  # absent or NaN
            continue
        loso = (
            f"; leaving out one source moves it to {m['p90_one_source_out_min']:.0%}–"
            f"{m['p90_one_source_out_max']:.0%}"
            if m.get("p90_one_source_out_min") is not None
            else ""
        )
        parts.append(
            f"the {kind} margin's 95% interval over a bootstrap of sources is {m['p90_lo']:.0%}–"
            f"{m['p90_hi']:.0%}{loso}, and its largest source ({m['largest_source']}) supplies "
            f"{m['largest_source_share']:.0%} of its pairs"
        )
    if not parts:
        return ""
    return (
        " **The margins are themselves uncertain:** "
        + "; ".join(parts)
        + ". A chapter's ratio that lies inside such an interval of the line it is judged against is "
        "decided by where the margin is drawn, not by the data. The margin is the course's rule, but it "
        "was not fixed before the chapters read it: its value changed five times in two days (pooled "
        "31.9%, 40.2%, 37.8%, 39.5%, then split by kind into layout 14.9% and switch 47.6%, 2026-12-04 "
        "to 06) while chapter verdicts were revised. So since 2026-12-07 a chapter decides only beyond "
        "the largest 90th percentile that leaving out one source gives (the line no single publication "
        "places; `studykit.step_error.decisive_margin`), and these intervals say how far to trust a "
        "verdict near even that line."
    )


def may_decide_text(tables: dict) -> str:
    """What the model may and may not decide, from this render's tables, before any of them is
    shown: its blind lead over the null model on step times (``uncertainty.clustered_bootstrap``),
    its signed bias on the test and holdout rows, each kind's margin beside the null's on the same
    pairs, and the one switch the chapters lean on that published pairs test alone (async TP)."""
    import numpy as np

    boot = tables["bootstrap"].set_index("group")
    splits = tables["splits"].set_index("split")
    kinds = tables["kind_margins"].set_index("kind")
    tp = tables["tp_overlap_pairs"]
    parts = []
    from mfulab.studies.predict.uncertainty import MODELLED_AFTER_SEEN, NEVER_SEEN

    if "holdouts" in boot.index:
        key = NEVER_SEEN if NEVER_SEEN in boot.index else "holdouts"
        h = boot.loc[key]
        beats = h.lead_over_null_lo > 0
        whole = boot.loc["holdouts"]
        parts.append(
            f"on step times never seen before the model was fixed it {'beats' if beats else 'does not beat'} "
            f"a constant utilisation: {int(h.rows)} holdout rows, {h.predictor_median_abs_error:.1%} against "
            f"the null's {h.null_median_abs_error:.1%}, a lead of {100 * h.lead_over_null:+.1f} points "
            f"[{100 * h.lead_over_null_lo:+.1f}, {100 * h.lead_over_null_hi:+.1f}] over a bootstrap of "
            "sources"
            + (
                f" (with the {len(MODELLED_AFTER_SEEN)} holdout rows the model was extended to price after "
                f"they were collected, {int(whole.rows)} rows: {whole.predictor_median_abs_error:.1%} "
                f"against {whole.null_median_abs_error:.1%})"
                if key == NEVER_SEEN
                else ""
            )
        )
    signed = [
        f"{s} {splits.loc[s, 'median_signed_error']:+.1%}" for s in ("test", "holdout") if s in splits.index
    ]
    if signed:
        parts.append("its steps run fast (median signed error " + ", ".join(signed) + ")")
    if {"layout", "switch"} <= set(kinds.index) and "null_p90" in kinds:
        parts.append(
            "its ratios, which the chapters decide on, are decided beyond "
            + " and ".join(
                f"±{_decisive(kinds.loc[k]):.0%} ({k}: the point 90th percentile {kinds.loc[k, 'p90']:.0%}, "
                f"the null's {kinds.loc[k, 'null_p90']:.0%})"
                for k in ("layout", "switch")
            )
        )
    if len(tp):
        over = int((tp.predicted_gain > tp.published_gain).sum())
        parts.append(
            f"on the {len(tp)} async-TP pairs it over-predicts the gain "
            + ("every time" if over == len(tp) else f"in {over}")
            + f" ({over} of {len(tp)}; median "
            f"{np.median(tp.predicted_gain):.2f}× against {np.median(tp.published_gain):.2f}× published)"
        )
    text = "; ".join(parts)
    return (
        "**What this model may and may not decide.** "
        + text[:1].upper()
        + text[1:]
        + ". So it may decide a comparison whose modelled ratio lies beyond the margin of its kind, "
        "read as that: a ratio, not a step time; it may not decide one inside the margin, one that turns "
        "on TP overlap's size, a step time on its own, a difference of two steps to better than the "
        "margin times the steps, or a card outside its validation (the 910B) unless no reading of the "
        "card reverses it, and a verdict near the line is decided by where "
        "the margin is drawn (its bootstrap interval below)."
    )
