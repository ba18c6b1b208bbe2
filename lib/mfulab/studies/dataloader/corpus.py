"""The synthetic corpus of the ``dataloader`` study: it lives in the core (:mod:`mfulab.corpus`,
shared with the step-anatomy study); this module re-exports it."""

from ...corpus import (  # noqa: F401  (re-exported)
    FORMATS,
    check_free_space,
    corpus_checksum,
    estimate_bytes,
    sample_checksum,
    synthetic_corpus,
    tokenize,
)
