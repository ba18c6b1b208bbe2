"""The claims of the ``parallelism`` study: :func:`outcome` composes the rows the topic modules build
and the headline metrics, once; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.studies.parallelism.analysis import claims, headline_metrics, tables
from mfulab.studykit.verdicts import Claim


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``)."""
    t = tables(records)
    claim_list = claims(t)
    return claim_list, headline_metrics(records, t, claim_list)
