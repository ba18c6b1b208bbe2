"""One term of the step model tested on its own, out of sample: published pairs of runs that
differ in one switch only, the step with it off over the step with it on, against the same
ratio predicted. A bias the two rows share (a framework overhead the model lacks) cancels in
the ratio, so what is left is the switch's own term.

The switch tested here is tensor-parallel communication overlap (PyTorch's async TP, Megatron's
``--tp-comm-overlap``): the rows that state ``tp_comm_overlap`` true beside a row of the same
source, publication, device, model and layout that states it false. The model hides
``rates.Assumptions.tp_overlap_share`` of the TP collectives under the GEMMs (an assumption of
ours, never fitted), so the pairs say whether that share, and the TP term under it, hold.
Nothing here is fitted; the pairs are scored as they are."""

from __future__ import annotations

from mfulab.analytic.rates import Assumptions
from mfulab.studies.predict import modern

SWITCH = "tp_comm_overlap"


def _key(row: dict) -> str:
    """Everything a pair must share (``modern._layout_key`` but the switch), and the FP8 scaling
    the id names (a rowwise row and a tensorwise one share their layout)."""
    return modern._layout_key(row, ignore=(SWITCH,)) + ("rowwise" if "rowwise" in row["id"] else "")


def tp_overlap_pairs(runs, table):
    """Every priced row with TP overlap on beside its twin with it off (``table``: the validation
    table, ``validate.table`` rows): the published and predicted gain (off ÷ on step), the
    predictor's error on it (predicted ÷ published − 1), and the TP term of each row (its
    collectives' time with the overlap off, what stays exposed with it on)."""
    import pandas as pd

    priced = table[table.refused.fillna("") == ""].set_index("id")
    off = {}
    for row in runs:
        if row["layout"].get(SWITCH) is False and row["id"] in priced.index:
            off.setdefault(_key(row), []).append(row["id"])
    out = []
    for row in runs:
        if row["layout"].get(SWITCH) is not True or row["id"] not in priced.index:
            continue
        on = priced.loc[row["id"]]
        for twin in off.get(_key(row), []):
            o = priced.loc[twin]
            published = o.published_step_s / on.published_step_s
            predicted = o.predicted_step_s / on.predicted_step_s
            out.append(
                {
                    "on_row": row["id"],
                    "off_row": twin,
                    "split": row.get("split"),
                    "published_gain": published,
                    "predicted_gain": predicted,
                    "gain_error": predicted / published - 1,
                    "tp_comm_off_s": o.tp_comm_s,
                    "tp_comm_exposed_on_s": on.tp_comm_s,
                    "published_saved_s": o.published_step_s - on.published_step_s,
                    "predicted_saved_s": o.predicted_step_s - on.predicted_step_s,
                }
            )
    return pd.DataFrame(out)


def tp_overlap_text(pairs) -> str:
    """The pairs in a few sentences (markdown): the gains published and predicted, the error, and
    what the model would need to hide to match (the share of its own TP term the published saving
    is)."""
    import numpy as np

    if not len(pairs):
        return "No published pair of runs differs in TP communication overlap alone."
    share = Assumptions().tp_overlap_share
    needed = pairs.published_saved_s / pairs.tp_comm_off_s
    return (
        f"**TP communication overlap, tested alone** ({len(pairs)} published pairs that differ in async TP "
        f"only, {', '.join(sorted(set(pairs.split)))} rows; nothing fitted to them): published gains "
        f"{pairs.published_gain.min():.2f}–{pairs.published_gain.max():.2f}× (median "
        f"{pairs.published_gain.median():.2f}×), predicted {pairs.predicted_gain.min():.2f}–"
        f"{pairs.predicted_gain.max():.2f}× (median {pairs.predicted_gain.median():.2f}×): a median error "
        f"of {pairs.gain_error.median():+.0%} on the gain, {int((pairs.gain_error > 0).sum())} of "
        f"{len(pairs)} too large. The model hides {share:.0%} of the layer's GEMM time's worth of its TP "
        "term (`tp_overlap_share`, our assumption): all of it where the GEMMs outlast the collectives "
        f"({int((pairs.tp_comm_exposed_on_s == 0).sum())} of these pairs); the published savings are "
        f"{np.nanmin(needed):.0%}–{np.nanmax(needed):.0%} of the TP time it prices with the overlap off. "
        "Either the overlap hides far less than assumed (async TP splits each GEMM, which costs "
        "efficiency) or the TP term itself is priced too large; the pairs cannot tell which, and the "
        "share is not refitted on them (they are test rows). Every at-scale row that leans on TP "
        "overlap (chapter 02's A4, chapter 08's placements) inherits this optimism."
    )
