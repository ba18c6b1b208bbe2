"""The storage formats of the ``dataloader`` study: the writers, readers, Datasets, collate
and ``make_loader`` live in the core (:mod:`mfulab.dataformats`, shared with the step-anatomy
study); this module re-exports them and adds ``loader_for`` (the study's ``Params``)."""

from __future__ import annotations

import torch.utils.data as tud  # noqa: F401  (re-exported: the tests build loaders through it)

from ...dataformats import (  # noqa: F401  (re-exported)
    READERS,
    Collate,
    DataError,
    JsonFiles,
    Jsonl,
    MappedDataset,
    Memmap,
    ParquetRowGroups,
    StreamedDataset,
    TarShards,
    dataset,
    format_files,
    make_loader,
    write_format,
)


def loader_for(p, fmt, root, *, num_workers, persistent, pin_memory):
    """``make_loader`` with the batch size, sequence length and prefetch of the study's ``Params``."""
    return make_loader(
        fmt,
        root,
        batch_size=p.batch_size,
        seq_len=p.seq_len,
        num_workers=num_workers,
        prefetch_factor=p.prefetch_factor,
        persistent=persistent,
        pin_memory=pin_memory,
    )
