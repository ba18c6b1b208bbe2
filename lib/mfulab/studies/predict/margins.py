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
        for a, b in itertools.combinations(list(x.id), 2):
            ra, rb = by_id[a], by_id[b]
            la, lb = ra.get("layout") or {}, rb.get("layout") or {}
            same_model = json.dumps(ra["model"], sort_keys=True) == json.dumps(rb["model"], sort_keys=True)
            if not same_model or {la.get("dtype", "bf16"), lb.get("dtype", "bf16")} - set(PRECISIONS):
                continue
            rows.append(
                {
                    "source": source,
                    "kind": pair_kind(la, lb),
                    "settings_differing": len(differing(la, lb)),
                    "ratio_error": float(pair_ratio_errors([error[a], error[b]])[0]),
                }
            )
    return pd.DataFrame(rows, columns=["source", "kind", "settings_differing", "ratio_error"])


def kind_margins(df, runs) -> dict:
    """Per kind: pairs, sources, and the median, 75th and 90th percentile of the ratio errors
    (the 90th is the kind's decisive margin)."""
    pairs = kind_pairs(df, runs)
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


def kind_table(margins: dict):
    """:func:`kind_margins` as a table a notebook prints."""
    import pandas as pd

    return pd.DataFrame(
        [{"kind": k, "compares": KINDS[k], **v} for k, v in margins.items()],
        columns=["kind", "compares", "pairs", "sources", "one_setting", "median", "p75", "p90"],
    )


def kind_text(margins: dict) -> str:
    """What the kinds' margins say, for the chapter's text."""
    if not {"layout", "switch"} <= set(margins):
        return ""
    lay, sw = margins["layout"], margins["switch"]
    return (
        "**The margin per kind of comparison.** Between two parallel layouts of one model on one "
        f"cluster ({lay['pairs']} held-out pairs from {lay['sources']} sources), the model's ratio error "
        f"has a median of {lay['median']:.1%} and a 90th percentile of {lay['p90']:.1%}: a layout "
        f"ranking decides beyond ±{lay['p90']:.0%}. Across a switch ({sw['pairs']} pairs from "
        f"{sw['sources']} sources) the median is {sw['median']:.1%} and the 90th percentile "
        f"{sw['p90']:.1%}: a switch turns a term on or off, and the ratio keeps that term's whole "
        "error, so a recompute policy, a ZeRO stage or an overlap switch decides only beyond "
        f"±{sw['p90']:.0%}. Only {sw['one_setting']} of the switch pairs change one recorded setting "
        "and nothing else (the rest change the layout with it, or a switch the files do not record), "
        "so the switch figure is what the published pairs can give, not a measurement of a pure toggle."
    )
