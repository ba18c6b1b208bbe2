"""``loader_for``: the core's ``make_loader`` (:mod:`mfulab.measure.dataformats`, shared with the
step-anatomy study) with the ``dataloader`` study's batch size, sequence length and prefetch."""

from __future__ import annotations

from mfulab.measure.dataformats import make_loader


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
