"""Where the course's time goes: each study's time split into set-up, measurement, analysis and
rendering (:func:`time_split`, recorded in its ``env.json``), the calibration measured before the
studies (:func:`calibrate_course`), and the summary ``make all`` prints against the budgets
(:func:`course_time_table`)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mfulab.paths import repo_root

log = logging.getLogger("mfulab")


def time_split(*, started: float, notebook_ended: float, phases: dict | None, finished: float) -> dict:
    """Where one study's run went, in seconds (epoch times in): ``setup`` (the kernel's start and
    the cells before the measurement), ``measurement`` (``studykit.notebook.setup`` measuring, or
    loading ``FROM=`` records, as it recorded in ``phases``), ``analysis`` (every cell after it:
    the outcome, tables, figures), ``rendering`` (the executed notebook made read-only, the
    record written) and ``total``. A notebook that recorded no phases counts as all set-up."""
    if phases:
        setup_s = phases["measure_started"] - started
        measurement_s = phases["measure_ended"] - phases["measure_started"]
        analysis_s = notebook_ended - phases["measure_ended"]
    else:
        setup_s, measurement_s, analysis_s = notebook_ended - started, 0.0, 0.0
    return {
        "setup": setup_s,
        "measurement": measurement_s,
        "analysis": analysis_s,
        "rendering": finished - notebook_ended,
        "total": finished - started,
        "measured_elsewhere": bool(phases and phases.get("from_dir")),
    }


def budget_line(what: str, took_s: float, budget_s: float | None) -> str:
    """``took_s`` against a study.yaml budget, as a run's log reports it."""
    if not budget_s:
        return f"{what} took {took_s:.0f} s (no budget declared for this profile)"
    verdict = (
        f"OVER its {budget_s:.0f} s budget" if took_s > budget_s else f"within its {budget_s:.0f} s budget"
    )
    return f"{what} took {took_s:.0f} s, {verdict}"


PHASE_COLUMNS = (("setup", "set-up"), ("measurement", "measure"), ("analysis", "analysis"))
PHASE_COLUMNS += (("rendering", "render"), ("total", "total"))


def course_time_table(rows: list[dict]) -> str:
    """The summary ``make all`` prints: one line per study (the calibration first, when the
    course measured it) with its time split, its budget for the profile it ran (``study.yaml``
    ``budget_s``; the calibration's in :data:`COURSE_CALIBRATION`) and whether it went over;
    studies that were up to date show their recorded times in brackets (not part of this
    run's total)."""
    head = f"{'study':<12} {'profile':<8}" + "".join(f"{name:>9}" for _, name in PHASE_COLUMNS)
    head += f"{'budget':>8}"
    lines = [head, "-" * len(head)]
    this_run, over = 0.0, []
    for r in rows:
        t, budget = r.get("time_split_s") or {}, r.get("budget_s")
        cells = [f"{t[k]:.0f}" if k in t else "—" for k, _ in PHASE_COLUMNS]
        note = ""
        if not r["ran"]:
            cells, note = [f"({c})" if c != "—" else c for c in cells], "  up to date"
        else:
            this_run += t.get("total", 0.0)
            if budget and t.get("total", 0.0) > budget:
                over.append(f"{r['study']}: {t['total']:.0f} s, budget {budget:.0f} s ({r['profile']})")
                note = "  OVER"
        line = f"{r['study']:<12} {r.get('profile') or '—':<8}" + "".join(f"{c:>9}" for c in cells)
        lines.append(line + f"{f'{budget:.0f}' if budget else '—':>8}{note}")
    ran = sum(r["ran"] for r in rows if r["study"] != "calibration")
    calibrated = " and the calibration" if any(r["ran"] and r["study"] == "calibration" for r in rows) else ""
    lines.append(f"this run: {this_run:.0f} s ({this_run / 60:.1f} min) for {ran} studies{calibrated}")
    lines += [f"over budget: {o}" for o in over] or ["every study that ran stayed within its budget"]
    return "\n".join(lines)


# The calibration parts the cpu course reads (matmul ceilings, copy bandwidth, the 2-rank gloo
# all-reduce α–β), measured before the first study so that their time is a row of the summary
# instead of a hidden share of whichever study asks first; and the seconds that may take
# (the calibration has no study.yaml: its budget is declared here, beside the studies' budgets).
COURSE_CALIBRATION = {
    "cpu": {"parts": ("matmul:fp32", "matmul:bf16", "bandwidth", "collectives:gloox2"), "budget_s": 60}
}


def calibrate_course(setting: str, *, results_root=None, force: bool = False) -> dict | None:
    """Measure the calibration parts the course reads under ``setting`` (:data:`COURSE_CALIBRATION`)
    before its studies, timed; the row :func:`course_time_table` prints (``None`` for a setting
    whose parts the studies measure themselves, e.g. a GPU's, which depend on the job's ranks).
    Parts already measured with the same code and torch cost nothing and the row says so."""
    from mfulab.measure import calibration

    course = COURSE_CALIBRATION.get(setting)
    if course is None:
        return None
    root = Path(results_root or repo_root() / "results")
    os.environ["MFULAB_RESULTS_ROOT"] = str(root)  # where the studies' kernels will read it
    started = time.time()
    cal = calibration.get(setting, device="cpu", parts=list(course["parts"]), refresh=force, root=root)
    elapsed = time.time() - started
    measured = cal["_meta"]["measured_now"]
    log.info("calibration %s: %s (%.0f s)", setting, ", ".join(measured) or "up to date", elapsed)
    split = {"setup": 0.0, "measurement": elapsed, "analysis": 0.0, "rendering": 0.0, "total": elapsed}
    return {
        "study": "calibration",
        "ran": bool(measured),
        "profile": setting,
        "time_split_s": split,
        "budget_s": course["budget_s"],
    }
