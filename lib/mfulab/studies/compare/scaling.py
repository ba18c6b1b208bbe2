"""What deviates when one host runs on more cores: the comparison's rows whose per-core scaling is
not linear (a rate that more than doubles on twice the cores), and the effects that reverse (a
speed-up below 1 on one machine and above it on another). A note under the table names them, so a
reader sees what the core count changes beyond the expected ×2 (``hosts.per_core_scaling``)."""

from __future__ import annotations


def _ratio(cell: str) -> float | None:
    """The number at the start of a formatted ratio cell (``"1.41×"``, ``"0.73× (moves …)"``)."""
    head = str(cell).split("×")[0].split(" ")[0]
    try:
        return float(head)
    except ValueError:
        return None


def deviations_note(shown, names: list[str], drift: float) -> str:
    """One paragraph (markdown) on ``shown`` (``analysis.formatted``'s table): the rows whose
    per-core scaling (column ``÷ cores``) is off 1 by more than ``drift``, and the ratio rows whose
    value is below 1 on one machine and above it on another. Rows of machines that were
    oversubscribed are left out (``not comparable on``). Empty with one machine."""
    if len(names) < 2 or "÷ cores" not in shown:
        return ""
    crowded = shown.get("not comparable on", [""] * len(shown))
    off, reversed_rows = [], []
    for (_, row), where in zip(shown.iterrows(), crowded):
        if where:
            continue
        if row["÷ cores"]:
            scale = float(row["÷ cores"])
            if abs(scale - 1) > drift:
                kind = "super-linear" if scale > 1 else "sub-linear"
                off.append(f"{row['metric']} ({scale:.2f}, {kind})")
        ratios = {m: _ratio(row[m]) for m in names if str(row[m]).split(" ")[0].endswith("×")}
        if len(ratios) == len(names) and all(v is not None for v in ratios.values()):
            below = [m for m, v in ratios.items() if v < 1]
            above = [m for m, v in ratios.items() if v > 1]
            if below and above:
                reversed_rows.append(
                    f"{row['metric']} (" + ", ".join(f"{ratios[m]:.2f}× on `{m}`" for m in names) + ")"
                )
    if not off and not reversed_rows:
        return (
            "**Per core.** Every rate measured on both core budgets scales with the cores within the "
            f"run-to-run drift ({drift:.0%}), and no effect changes direction."
        )
    parts = []
    if off:
        parts.append(
            f"rates that do not scale with the cores (column `÷ cores`: 1 is linear, off by more than "
            f"{drift:.0%}): " + "; ".join(off)
        )
    if reversed_rows:
        parts.append(
            "effects that change direction (below 1 on one budget, above on another): "
            + "; ".join(reversed_rows)
        )
    return (
        "**Per core.** "
        + ". ".join(p[0].upper() + p[1:] for p in parts)
        + ". This chapter does not measure why; a cause to test on each is the thread count its "
        "kernels ran with (one thread per core: the threads per process are in the note at the top) "
        "and the cache each thread gets. Read these rows per core budget, never as a property of the chip."
    )
