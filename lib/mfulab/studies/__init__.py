"""The study registry: every package below this one that declares a ``STUDY``.

A study is a package ``mfulab/studies/<id>/`` whose ``__init__.py`` declares one
:class:`Study` (and imports nothing heavier than its parameters). The command line, the
site, the comparison, ``make list`` and the tests read :data:`REGISTRY`; nothing else lists
the studies, so adding one touches only its package, its notebook and its YAML files
(``docs/architecture.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

from ..config import ParameterError


@dataclass(frozen=True)
class Metric:
    """One number a study writes to ``metrics.json`` for comparisons across machines."""

    key: str  # flat key in metrics.json; the unit is in the name or in ``unit``
    unit: str  # "FLOP/s", "B/s", "s", "fraction", "×", "MiB", "" (a label)
    label: str  # what a reader sees in the comparison and on the site
    fmt: str = "{:.3g}"  # how the site prints it
    headline: bool = False  # shown under the study on the course index


@dataclass(frozen=True)
class Study:
    """What the runner, the site and the comparison need to know of one study."""

    id: str  # = the package name and the results folder name
    number: int  # position in the course (the notebook's NN)
    notebook: str  # file in notebooks/
    title: str
    params: type  # the StudyParams subclass
    headline_figure: str  # figures/<name>.png that stands for the study
    metrics: tuple[Metric, ...] = ()
    measure: str = ""  # "module:function(params) -> records"; empty: nothing to measure
    machine: str | None = None  # fixed results folder (the comparison), else the machine slug
    reads_results: bool = False  # its inputs include other studies' metrics.json
    summary: str = ""  # one sentence for the course table
    claims: tuple[str, ...] = field(default=())  # claim ids its claims table decides

    def measure_fn(self):
        module, function = self.measure.split(":")
        return getattr(importlib.import_module(module), function)

    @property
    def notebook_stem(self) -> str:
        return self.notebook.rsplit(".", 1)[0]


def _discover() -> dict[str, Study]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        study = getattr(module, "STUDY", None)
        if study is None:
            continue
        if study.id != info.name:
            raise RuntimeError(f"study package {info.name} declares id {study.id!r}: they must be equal")
        found.append(study)
    found.sort(key=lambda s: (s.reads_results, s.number))  # the comparison reads the others: last
    numbers = [s.number for s in found]
    if len(set(numbers)) != len(numbers):
        raise RuntimeError(f"two studies share a number: {numbers}")
    return {s.id: s for s in found}


REGISTRY: dict[str, Study] = _discover()


def get(study_id: str) -> Study:
    """The registered study; an unknown id is refused with the list of valid ones."""
    if study_id not in REGISTRY:
        raise ParameterError(f"unknown study {study_id!r}; valid studies: {', '.join(REGISTRY)}")
    return REGISTRY[study_id]
