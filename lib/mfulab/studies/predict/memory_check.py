"""The memory model (``step_terms.memory_terms``: Korthikanti et al. 2022 Table 2 activations,
ZeRO's model states, the logits) against published peak memory.

torchtitan's benchmark tables print a memory figure per run: its training loop logs
``max_reserved_gib``, the CUDA caching allocator's peak *reserved* memory, the largest over the
job's GPUs. Reserved memory is at least what the run allocated, so the check is one-sided:

    overstatement = modelled GiB ÷ published peak reserved GiB − 1

is a lower bound on how far the model overstates the run where it is positive (the run held less
than the model says it needs); where it is negative nothing follows (the allocator may reserve far
more than it allocates). A "does not fit" reading that clears the card by less than the largest
overstatement measured here is not safe; a "fits" reading is not tested by these rows.
"""

from __future__ import annotations

import numpy as np

GIB = 2**30


def memory_table(df, runs):
    """One row per published run with a peak memory figure (``published.peak_memory_gib``) that
    the model priced: the published peak reserved GiB, the modelled GiB per device, their ratio,
    and whether the model states more than the run held (``overstates``)."""
    import pandas as pd

    published = {r["id"]: r["published"].get("peak_memory_gib") for r in runs}
    priced = df[(df.refused.fillna("") == "") & df.memory_gib.notna()].set_index("id")
    rows = []
    for run_id, gib in published.items():
        if gib is None or run_id not in priced.index:
            continue
        r = priced.loc[run_id]
        rows.append(
            {
                "id": run_id,
                "source": r.source,
                "split": r.split,
                "device": r.device,
                "published_peak_reserved_gib": float(gib),
                "modelled_gib": float(r.memory_gib),
                "modelled_over_published": float(r.memory_gib) / float(gib),
                "overstates": bool(r.memory_gib > gib),
            }
        )
    return pd.DataFrame(rows)


def memory_text(t) -> str:
    """What the check says, for the chapter's text: how many rows the model overstates and by how
    much at least, and what that means for a "does not fit" reading."""
    if not len(t):
        return "No published run with a peak memory figure was priced."
    over = t[t.overstates]
    ratio = t.modelled_over_published
    text = (
        f"**The memory model against published peak memory.** {len(t)} priced runs publish their peak "
        f"reserved memory (torchtitan's `max_reserved_gib`, the largest over the job's GPUs, an upper bound "
        f"on what each run allocated). The model gives {ratio.min():.2f}–{ratio.max():.2f}× the published "
        f"figure (median {np.median(ratio):.2f}×)."
    )
    if len(over):
        text += (
            f" It states more than the run held on {len(over)} of {len(t)} ({', '.join(over.id)}), by at "
            f"least {over.modelled_over_published.max() - 1:.0%} (a lower bound: the allocator reserves at "
            "least what it allocates; part of it may be how a row's checkpointing is recorded: torchtitan's "
            "op-level selective checkpointing is priced as Korthikanti's selective recompute). So a modelled "
            "'does not fit' that exceeds the card by less than "
            f"{over.modelled_over_published.max() - 1:.0%} is not safe; the course's chapters that decide "
            "on 'fits' (A17, B7's configuration, A12's saving, B8's DDP reading) carry no such margin yet."
        )
    else:
        text += " It never states more than a run held; these rows cannot test a 'fits' reading."
    under = t[~t.overstates]
    if len(under):
        text += (
            f" Where it states less ({len(under)} rows, down to {under.modelled_over_published.min():.2f}×), "
            "nothing follows: the reserved figure may hold the allocator's cache, not the run's need."
        )
    return text
