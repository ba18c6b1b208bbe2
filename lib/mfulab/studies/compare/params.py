"""Parameters of the ``compare`` study."""

from __future__ import annotations

from dataclasses import dataclass

from mfulab.studykit.params import StudyParams, param


@dataclass(frozen=True)
class Params(StudyParams):
    results_root: str = param("results", "folder holding results/<machine>/<study>/metrics.json")

    def prepare(self) -> None:
        from pathlib import Path

        from mfulab.studies.compare.analysis import machines

        root = Path(self.results_root)
        self.require("results_root", root.is_dir(), "an existing folder")
        self.require(
            "results_root", bool(machines(root)), "a folder with results/<machine>/<study>/metrics.json"
        )
