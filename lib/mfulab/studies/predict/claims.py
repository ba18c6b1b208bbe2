"""The claims of the ``predict`` study: :func:`outcome` composes the rows the topic modules build
and the headline metrics, once; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.studies.predict.analysis import headline_metrics


def outcome(records, p) -> tuple[list, dict]:
    """No claim rows of its own; the headline metrics (also ``make stability``)."""
    return [], headline_metrics(records, p)
