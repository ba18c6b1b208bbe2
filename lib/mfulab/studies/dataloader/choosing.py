"""Choosing a format: this run's measurements per format beside what each format allows by
construction (how a sample is reached, how far it can be shuffled, how a job resumes mid-epoch),
the table the chapter draws its advice from.

The properties are the readers' (``mfulab.measure.dataformats``): map-style readers reach any
sample by index, so a ``RandomSampler`` shuffles them exactly and a restart resumes at a sample
index; the iterable ones (webdataset tar shards, Parquet row groups) stream their shards in order,
so they shuffle by shard order and a buffer (approximately) and resume from the loader's own state."""

from __future__ import annotations

# how a sample is reached, how far the order can be shuffled, how a job resumes mid-epoch
PROPERTIES = {
    "json_files": ("map-style: a file per sample", "exact (any order; an open per sample)", "a sample index"),
    "jsonl": (
        "map-style: a seek by a line-offset index",
        "exact (any order; a seek per sample)",
        "a sample index",
    ),
    "memmap": (
        "map-style: tokens by (offset, length)",
        "exact (any order; no open, no parse)",
        "a sample index",
    ),
    "tar": (
        "iterable: shards streamed in order",
        "approximate (shard order + a shuffle buffer)",
        "the loader's state",
    ),
    "parquet": (
        "iterable: row groups in order",
        "approximate (group order + a buffer)",
        "the loader's state",
    ),
}


def choice_table(t: dict):
    """One row per format: warm samples/s (one process, ``warm_summary`` at 0 workers), cold
    samples/s and files opened per epoch (``cold``), bytes per sample and write seconds
    (``written``), and the properties of :data:`PROPERTIES`; the fastest format warm and cold
    first."""
    import pandas as pd

    if any("format" not in t[k] for k in ("warm_summary", "cold", "written")):
        return pd.DataFrame()  # a smoke run, or formats left out: nothing to set side by side
    warm = t["warm_summary"]
    warm = warm[warm.num_workers == 0].set_index("format").samples_per_s
    cold = t["cold"].set_index("format")
    written = t["written"].set_index("format")
    rows = []
    for fmt, (access, shuffle, resume) in PROPERTIES.items():
        if fmt not in warm.index or fmt not in cold.index:
            continue
        rows.append(
            {
                "format": fmt,
                "warm_samples_per_s": float(warm[fmt]),
                "cold_samples_per_s": float(cold.loc[fmt, "samples_per_s"]),
                "files_opened_per_epoch": int(cold.loc[fmt, "files_opened_per_epoch"]),
                "bytes_per_sample": float(written.loc[fmt, "bytes_per_sample"])
                if fmt in written.index
                else None,
                "write_s": float(written.loc[fmt, "write_s"]) if fmt in written.index else None,
                "access": access,
                "shuffle": shuffle,
                "resume_from": resume,
            }
        )
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["slowest_of_warm_and_cold"] = df[["warm_samples_per_s", "cold_samples_per_s"]].min(axis=1)
    return df.sort_values("slowest_of_warm_and_cold", ascending=False).reset_index(drop=True)


def choice_text(table) -> str:
    """The advice the table supports, in one paragraph (markdown), with its numbers."""
    if table is None or table.empty:
        return ""
    best = table.iloc[0]
    exact = table[table.shuffle.str.startswith("exact")]
    tar = table[table.format == "tar"]
    text = (
        f"**Choosing a format.** Here {best.format} is the fastest at its slower reading "
        f"({best.warm_samples_per_s:,.0f} samples/s warm, {best.cold_samples_per_s:,.0f} cold, "
        f"{best.files_opened_per_epoch} files opened per epoch); it is {best.access}, so it shuffles "
        f"{best.shuffle.split(' (')[0]}ly and resumes from {best.resume_from}."
    )
    if best.format == "memmap":
        text += (
            " For a language model's token stream that is the usual end point: tokenise once, write the "
            "tokens into one file with an index (nanoGPT's `train.bin`, Megatron's indexed datasets), and "
            "the loader does almost no work per sample."
        )
    if len(tar):
        r = tar.iloc[0]
        small = table[table.format == "json_files"]
        against = (
            f" against the small files' {int(small.files_opened_per_epoch.iloc[0])}" if len(small) else ""
        )
        text += (
            f" Tar shards ({r.warm_samples_per_s:,.0f} warm, {r.cold_samples_per_s:,.0f} cold here) open "
            f"{r.files_opened_per_epoch} files an epoch{against}: their case is storage where every open "
            "or request costs (a network file system, an object store) and samples that cannot be packed "
            "into one array (images, audio), at the price of an approximate shuffle and a resume that "
            "needs the loader's state."
        )
    if len(exact) and best.format not in set(exact.format):
        text += " An exact shuffle needs a map-style format."
    return text
