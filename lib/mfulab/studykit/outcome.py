"""What a study's ``claims.outcome(records, p)`` returns: the tables its notebook shows, the
claims rows and the headline metrics, each computed once from the records.

The notebook displays ``outcome.tables`` (it does not rebuild them) and reads the derived
values its text quotes from ``outcome.values`` (small named results, not saved as tables);
``make stability``
reads ``claims`` and ``metrics`` from the same call, so the verdicts a reader sees are the
ones whose run-to-run stability was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Outcome:
    claims: list  # studykit.verdicts.Claim rows, in the chapter's order
    metrics: dict  # the headline metrics of metrics.json (units in the names)
    tables: dict = field(default_factory=dict)  # name -> pandas.DataFrame, saved as <name>.csv
    values: dict = field(default_factory=dict)  # name -> a derived result the notebook's text quotes

    def save_tables(self, out) -> None:
        """Write every table beside the notebook (``results.save_table``: CSV, one per name)."""
        from mfulab.results import save_table

        for name, table in self.tables.items():
            save_table(out, name, table)
