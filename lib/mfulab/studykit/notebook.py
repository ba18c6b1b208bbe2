"""The first code cell of every study notebook, and the note under its claims table.

A notebook's parameters cell holds ``params = {}`` (papermill injects the profile's values
there) plus ``out_dir`` and ``from_dir`` (set by the runner). :func:`setup` turns them into
the study's typed parameters, measures — or loads measurements taken elsewhere — and keeps
the raw records in the results folder. Opened by hand in JupyterLab, the same notebook runs
top to bottom with the defaults (the laptop profile) and writes to ``scratch/<study>``.

Notebooks import this module, not the runner: a study's library stamp is the import closure
of its package and its notebook, so a change to ``run/`` re-runs no study.
"""

from __future__ import annotations

import time
from pathlib import Path

from mfulab import results


def setup(study_id: str, params: dict | None = None, *, out_dir: str = "", from_dir: str = ""):
    """Returns ``(out, p, records)``: the output folder, the typed parameters and the records."""
    from mfulab.studykit import plots
    from mfulab.studykit.registry import get

    study = get(study_id)
    plots.set_theme()
    out = results.output_dir(out_dir, study_id)
    measure_started = time.time()
    if from_dir:
        records = results.load_measurements(from_dir)
        p = study.params.from_dict({**(params or {}), **records.get("params", {})})
    else:
        p = study.params.from_dict(params).prepared()
        records = study.measure_fn()(p) if study.measure else {}
    measure_ended = time.time()
    results.save_measurements(out, records)
    # when the measurement ran, for the runner's time split (set-up, measurement, analysis)
    phases = {"measure_started": measure_started, "measure_ended": measure_ended, "from_dir": bool(from_dir)}
    results.write_json(Path(out) / results.PHASES, phases)
    return out, p, records


def stability_note(out) -> str:
    """Markdown under a claims table: how the verdicts fared over fresh re-runs of this
    study (``make stability``; the runner keeps ``stability.json`` across re-renders), and
    whether this render, one more fresh run, agrees with them."""
    from mfulab.paths import library_sha256
    from mfulab.studykit.stability_report import describe, published_outcome

    report = results.load_stability(out)
    current = library_sha256(report["study"]) if report else None
    return describe(report, current_library=current, published=published_outcome(out))
