"""What deviates when one host runs on more cores: the comparison's rows whose per-core scaling is
not linear (a rate that more than doubles on twice the cores), and the effects that reverse (a
speed-up below 1 on one machine and above it on another). A note under the table names them, so a
reader sees what the core count changes beyond the expected ×2 (``hosts.per_core_scaling``)."""

from __future__ import annotations


def deviations_note(table, shown, names: list[str], drift: float) -> str:
    """One paragraph (markdown): the rows of ``shown`` (``analysis.formatted``'s table) whose
    per-core scaling (column ``÷ cores``) is off 1 by more than ``drift``, and the ratio rows of
    ``table`` (the raw values, unit ×) below 1 on one machine and above it on another. Rows of
    machines that were oversubscribed (``not comparable on``) or ran the study at other code
    (``other code``) are left out. Empty with one machine."""
    if len(names) < 2 or "÷ cores" not in shown:
        return ""
    raw = table.drop_duplicates("metric").set_index("metric")
    crowded = shown.get("not comparable on", [""] * len(shown))
    code = shown.get("other code", [""] * len(shown))
    off, reversed_rows = [], []
    for (_, row), where, other in zip(shown.iterrows(), crowded, code):
        if where or other:  # an oversubscribed run, or other code: not the cores' doing
            continue
        if row["÷ cores"]:
            scale = float(row["÷ cores"])
            if abs(scale - 1) > drift:
                kind = "super-linear" if scale > 1 else "sub-linear"
                off.append(f"{row['metric']} ({scale:.2f}, {kind})")
        values = raw.loc[row["metric"]] if row["metric"] in raw.index else None
        if values is None or values["unit"] != "×":
            continue
        ratios = {
            m: values[m]
            for m in names
            if isinstance(values[m], int | float) and not isinstance(values[m], bool)
        }
        if len(ratios) == len(names) and min(ratios.values()) < 1 < max(ratios.values()):
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
