"""The claims of the ``buckets`` study: :func:`outcome` composes the rows the topic modules build
and the headline metrics, once; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.studies.buckets.analysis import claims, headline_metrics
from mfulab.studykit.verdicts import Claim


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    claim_list = claims(records)
    return claim_list, headline_metrics(records, claim_list)
