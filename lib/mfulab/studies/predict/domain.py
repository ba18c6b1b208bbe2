"""Where the step model has been tested: the published rows of each held-out split it priced and the
ones it refused (the features it does not model, named in ``refused``), with its median error on
the priced ones. Read before using the model elsewhere: outside the priced rows' devices,
frameworks and features its step times are extrapolation, and where a run uses a feature it
refuses it says so instead of answering.

The counts and errors are the chapter's own tables (``scores.split_summary``, and
``scores.decisive_margin_check`` for all held-out rows pooled); this module adds the devices and
frameworks of the priced rows and the commonest refusals."""

from __future__ import annotations

from mfulab.studies.predict.validate import HELD_OUT


def domain_table(t: dict):
    """Per held-out split (``validate.HELD_OUT``): rows, rows refused, rows priced and their median
    |error| (``t["splits"]``), with the devices and frameworks of the priced rows
    (``t["validation"]``)."""
    validation = t["validation"]
    priced = validation[validation.refused.fillna("") == ""]
    table = t["splits"][t["splits"].split.isin(HELD_OUT)][
        ["split", "rows", "refused", "scored", "median_abs_error"]
    ]
    table = table.rename(columns={"scored": "priced"}).reset_index(drop=True)

    def names(split: str, column: str) -> str:
        return ", ".join(sorted(priced[priced.split == split][column].dropna().unique()))

    table["devices"] = [names(s, "device") for s in table.split]
    table["frameworks"] = [names(s, "framework") for s in table.split]
    return table


def domain_text(t: dict, table=None) -> str:
    """The domain in one paragraph (markdown): how many held-out rows the model priced, on which
    devices and frameworks, its median error there, and the commonest reasons it refused the rest."""
    table = domain_table(t) if table is None else table
    validation = t["validation"]
    held = validation[validation.split.isin(HELD_OUT)]
    priced = held[held.refused.fillna("") == ""]
    pooled = t["decisive_margin"].set_index("split")
    median = (
        float(pooled.loc["all held out", "median_abs_error"])
        if "all held out" in pooled.index
        else float("nan")
    )
    devices = ", ".join(sorted(priced.device.dropna().unique()))
    frameworks = ", ".join(sorted(priced.framework.dropna().unique()))
    refused = held[held.refused.fillna("") != ""]
    reasons = (
        refused.refused.str.removeprefix("not modelled: ")
        .str.split(r" \(|;|:", regex=True)
        .str[0]
        .value_counts()
    )
    top = "; ".join(f"{why} ({n})" for why, n in reasons.head(4).items())
    ascend = "ascend" not in devices  # article A's cards: priced by the chapters, tested here?
    return (
        f"**Where this model has been tested.** Of {int(table.rows.sum())} published held-out rows it priced "
        f"{int(table.priced.sum())}, on {devices}, with {frameworks}: a median |error| of "
        f"{median:.0%} there (the table in §3 has every split). It refused the other "
        f"{int(table.refused.sum())}, each with its reason; the commonest: {top}. A layout, device, "
        "framework or feature outside the priced rows is extrapolation"
        + (
            ", article A's Ascend 910B among them: no published 910B run is in these tables, so the "
            "at-scale rows of chapters 02–05 and 08 priced on it rest on its datasheet figures alone"
            if ascend
            else ""
        )
        + "; where a case needs a refused feature the model says so instead of answering."
    )
