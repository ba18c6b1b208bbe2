"""The claims of the ``dataloader`` study: B11 and B2's data part (``throughput``) and B12
(``checkpoint``), composed once with the headline metrics by :func:`outcome`, which the notebook
and ``make stability`` call."""

from __future__ import annotations

from mfulab.studies.dataloader.analysis import headline_metrics
from mfulab.studies.dataloader.throughput import claims
from mfulab.studykit import verdicts


def outcome(records, p) -> tuple[list, dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    claim_list = claims(records)
    return claim_list, {**headline_metrics(records), "claims": verdicts.records(claim_list)}
