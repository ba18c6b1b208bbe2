"""The claims of the ``fusion`` study: :func:`outcome` composes the rows the topic modules build
and the headline metrics, once; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.studies.fusion.analysis import claims, headline_metrics
from mfulab.studykit.verdicts import Claim


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    return claims(records), headline_metrics(records)
