"""Where the step model has been tested: the published rows of each held-out split it priced and the
ones it refused (the features it does not model, named in ``refused``), with its median error on
the priced ones. Read before using the model elsewhere: outside the priced rows' devices,
frameworks and features its step times are extrapolation, and where a run uses a feature it
refuses it says so instead of answering."""

from __future__ import annotations

from mfulab.studies.predict.validate import HELD_OUT


def domain_table(validation):
    """Per held-out split (``validate.HELD_OUT``) and over all of them: rows, rows priced, rows
    refused, the priced rows' devices and frameworks, and their median |error| (the frozen model's,
    ``error``)."""
    import pandas as pd

    refused = validation.refused.fillna("") != ""
    rows = []
    for name in (*HELD_OUT, "all held out"):
        in_split = validation.split.isin(HELD_OUT) if name == "all held out" else validation.split == name
        g, priced = validation[in_split], validation[in_split & ~refused]
        if not len(g):
            continue
        rows.append(
            {
                "split": name,
                "rows": len(g),
                "priced": len(priced),
                "refused": int((in_split & refused).sum()),
                "devices": ", ".join(sorted(priced.device.dropna().unique())),
                "frameworks": ", ".join(sorted(priced.framework.dropna().unique())),
                "median_abs_error": float(priced.error.abs().median()) if len(priced) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def domain_text(validation, table=None) -> str:
    """The domain in one paragraph (markdown): how many held-out rows the model priced, on which
    devices and frameworks, its median error there, and the commonest reasons it refused the rest."""
    table = domain_table(validation) if table is None else table
    total = table[table.split == "all held out"].iloc[0]
    refused = validation[validation.split.isin(HELD_OUT) & (validation.refused.fillna("") != "")]
    reasons = (
        refused.refused.str.removeprefix("not modelled: ")
        .str.split(r" \(|;|:", regex=True)
        .str[0]
        .value_counts()
    )
    top = "; ".join(f"{why} ({n})" for why, n in reasons.head(4).items())
    ascend = "ascend" not in total.devices  # article A's cards: priced by the chapters, tested here?
    return (
        f"**Where this model has been tested.** Of {int(total.rows)} published held-out rows it priced "
        f"{int(total.priced)}, on {total.devices}, with {total.frameworks}: a median |error| of "
        f"{total.median_abs_error:.0%} there (the table in §3 has every split). It refused the other "
        f"{int(total.refused)}, each with its reason; the commonest: {top}. A layout, device, framework "
        "or feature outside the priced rows is extrapolation"
        + (
            ", article A's Ascend 910B among them: no published 910B run is in these tables, so the "
            "at-scale rows of chapters 02–05 and 08 priced on it rest on its datasheet figures alone"
            if ascend
            else ""
        )
        + "; where a case needs a refused feature the model says so instead of answering."
    )
