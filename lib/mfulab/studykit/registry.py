"""The study registry: every package in ``mfulab/studies/`` that holds a ``study.yaml``.

A study is a package ``mfulab/studies/<id>/``: ``study.yaml`` declares it (number, notebook,
title, summary, headline figure, its entry points — ``measure``, ``outcome`` and, where it
has them, ``node_checks`` — the claim ids it decides, the metrics it writes, each with key,
unit and label, and its time budget per profile) and ``params.py`` holds its ``Params``
class. The command line, the site, the comparison, ``make list`` and the tests read
:data:`REGISTRY`; nothing else lists the studies, so adding one touches only its package,
its notebook and its YAML files (``docs/architecture.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, fields
from pathlib import Path

from mfulab.errors import ParameterError

STUDIES_PACKAGE = "mfulab.studies"
STUDIES_DIR = Path(__file__).resolve().parent.parent / "studies"


@dataclass(frozen=True)
class Metric:
    """One number a study writes to ``metrics.json`` for comparisons across machines."""

    key: str  # flat key in metrics.json; the unit is in the name or in ``unit``
    unit: str  # "FLOP/s", "B/s", "s", "fraction", "×", "MiB", "" (a label)
    label: str  # what a reader sees in the comparison and on the site
    fmt: str = "{:.3g}"  # how the site prints it
    headline: bool = False  # shown under the study on the course index
    # the study's parameter that widens this number's interval for its run-to-run drift (a ratio
    # the study measured to move more between fresh runs than the course's 5%); the comparison
    # reads a difference between machines against it too
    drift_param: str = ""
    # computed from published data alone (chapter 09's validation): the same on every machine, so
    # the comparison shows it once, apart from what each machine measured
    published: bool = False


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
    outcome: str = ""  # "claims:outcome": (records, params) -> Outcome (tables, claims, headline metrics)
    node_checks: str = ""  # "node_checks:node_problems": records -> [problem, ...] (make check-node)
    machine: str | None = None  # fixed results folder (the comparison), else the machine slug
    reads_results: bool = False  # its inputs include other studies' metrics.json
    budget_s: dict = field(
        default_factory=dict
    )  # profile -> seconds make all may spend on it (over: reported)
    summary: str = ""  # one sentence for the course table
    claims: tuple[str, ...] = field(default=())  # claim ids its claims table decides
    data_files: tuple[str, ...] = ()  # inputs in studies/<id>/ that are not profiles (hashed as inputs)
    check_quick: bool = False  # its tiny cuda run is in `check gpu --quick` (seconds, no cold compiles)

    @staticmethod
    def _resolve(target: str):
        module, function = target.split(":")
        return getattr(importlib.import_module(module), function)

    def measure_fn(self):
        return self._resolve(self.measure)

    def node_checks_fn(self):
        """``node_checks`` (``node_checks.node_problems(records) -> [problem, ...]``): what a correct
        multi-rank measurement of this study must show (``make check-node``); ``None`` if the
        study declares none."""
        return self._resolve(self.node_checks) if self.node_checks else None

    def outcome_fn(self):
        """``outcome`` (``claims.outcome(records, p) -> studykit.outcome.Outcome``: the tables,
        claims and headline metrics the notebook publishes), callable without the notebook
        (``make stability``); ``None`` if the study declares none."""
        return self._resolve(self.outcome) if self.outcome else None

    @property
    def notebook_stem(self) -> str:
        return self.notebook.rsplit(".", 1)[0]


def load(package: str) -> Study:
    """The :class:`Study` that ``studies/<package>/study.yaml`` declares (read as plain data by
    ``paths.study_declaration``, the one reader of the file, typed here)."""
    from mfulab.paths import study_declaration

    path = STUDIES_DIR / package / "study.yaml"
    data = dict(study_declaration(package))
    if data.get("id") != package:
        raise RuntimeError(f"{path}: id must be the package name {package!r}, got {data.get('id')!r}")
    known = {f.name for f in fields(Study)} - {"params"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise RuntimeError(f"{path}: unknown keys {unknown}; valid: {sorted(known)}")
    for key in ("measure", "outcome", "node_checks"):  # "bench:measure" is relative to the package
        if data.get(key):
            data[key] = f"{STUDIES_PACKAGE}.{package}.{data[key]}"
    data["metrics"] = tuple(Metric(**m) for m in data.get("metrics", ()))
    data["claims"] = tuple(data.get("claims", ()))
    data["data_files"] = tuple(data.get("data_files", ()))
    budget = data.get("budget_s") or {}
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in budget.values()):
        raise RuntimeError(f"{path}: budget_s must map profiles to positive seconds, got {budget!r}")
    data["budget_s"] = dict(budget)
    params = importlib.import_module(f"{STUDIES_PACKAGE}.{package}.params").Params
    return Study(params=params, **data)


def _discover() -> dict[str, Study]:
    found = [
        load(info.name)
        for info in pkgutil.iter_modules([str(STUDIES_DIR)])
        if info.ispkg and (STUDIES_DIR / info.name / "study.yaml").exists()
    ]
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
