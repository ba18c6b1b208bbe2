"""Command line: ``python -m mfulab list | run | all | measure | site | calibrate | stability | check``
and ``predict``.

- ``run STUDY --profile P [-p NAME VALUE ...] [--from DIR] [--if-changed]``: what
  ``make <study>`` calls (runner.run): validates every parameter first (bad input exits 2
  before any work) and executes the study notebook into ``results/<machine>/<study>/``.
- ``all [--profile P] [--force]``: every study, skipping those whose inputs did not change.
- ``measure STUDY -f studies/<study>/<profile>.yaml --out DIR``: only the measurement,
  headless, with no Jupyter stack: the seam for clusters (one ``torchrun`` per node).
- ``check gpu|node``: the first run on a new GPU machine or node (:mod:`mfulab.run.check`).
- ``calibrate [--setting S] [--refresh]``: this machine's calibration, read by every study.
- ``predict --preset P --devices N --device D --global-batch B [--tp --pp ...] [--search]``:
  a layout's predicted step time, breakdown and MFU (:mod:`mfulab.run.predict_cli`).
- ``list``: the studies, their notebooks and profiles.
- ``site [--machine M] [--out DIR] [--screenshots DIR]``: the executed notebooks of every
  ``results/<machine>/`` (or of M) as a static site, one book per machine, in ``site/``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from mfulab import paths, results
from mfulab.errors import ParameterError
from mfulab.measure import host
from mfulab.run import runner
from mfulab.studykit.registry import REGISTRY


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mfulab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="studies, their profiles, and which make all would run again")
    p_list.add_argument("--markdown", action="store_true", help="the README's course table")
    p_readme = sub.add_parser("readme", help="rewrite the course table in README.md from the registry")
    p_readme.add_argument("--check", action="store_true", help="exit 1 if README.md's table is stale")
    p_run = sub.add_parser("run", help="execute a study notebook into results/<machine>/<study>/")
    p_run.add_argument("study")
    p_run.add_argument("--profile", default="auto")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    p_run.add_argument(
        "--from", dest="from_dir", help="analyse measurements from this folder instead of measuring"
    )
    p_run.add_argument(
        "--results-root", help="folder holding results/<machine>/ (default: the repo's results/)"
    )
    p_run.add_argument(
        "--if-changed",
        action="store_true",
        help="skip when the results were made from the same notebook, parameters, library and torch",
    )
    p_all = sub.add_parser("all", help="every study (unchanged ones are skipped unless --force)")
    p_all.add_argument("--profile", default="auto")
    p_all.add_argument("--force", action="store_true")
    p_all.add_argument("--results-root")
    p_site = sub.add_parser("site", help="render the machines' executed notebooks as a static site")
    p_site.add_argument("--machine", help="results/<machine>/ to render (default: every machine)")
    p_site.add_argument("--out", help="output folder, one book per machine in it (default: site/)")
    p_site.add_argument(
        "--screenshots",
        metavar="DIR",
        help="then save PNGs of a book's landing page, first chapter and claims page in DIR",
    )
    p_site.add_argument(
        "--results-root", help="folder holding results/<machine>/ (default: the repo's results/)"
    )
    p_cal = sub.add_parser("calibrate", help="measure this machine's calibration (ceilings, bandwidth, α–β)")
    p_cal.add_argument("--setting", default="auto", help="auto (cpu, or gpu on CUDA) | cpu | gpu | smoke")
    p_cal.add_argument("--device", default="auto")
    p_cal.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"])
    p_cal.add_argument("--nproc", type=int, default=2, help="ranks of the collective α–β fit (0: skip)")
    p_cal.add_argument("--refresh", action="store_true", help="measure again even if it is up to date")
    p_cal.add_argument(
        "--results-root", help="folder holding results/<machine>/ (default: the repo's results/)"
    )
    p_stab = sub.add_parser(
        "stability", help="re-run a study's measurement N times; verdict flips and drift → stability.json"
    )
    p_stab.add_argument("study", help="a study id, or 'calibration'")
    p_stab.add_argument("-n", "--runs", type=int, default=3)
    p_stab.add_argument("--profile", default="auto")
    p_stab.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    p_stab.add_argument(
        "--results-root", help="folder holding results/<machine>/ (default: the repo's results/)"
    )
    p_stab.add_argument(
        "--keep",
        metavar="DIR",
        help="copy the last run's measurements to DIR, to render it with 'make <study> FROM=DIR'",
    )
    p_check = sub.add_parser(
        "check", help="first run on a GPU machine (gpu) or node (node): one line per part, exit 1 on failure"
    )
    p_check.add_argument("kind", choices=["gpu", "node"])
    p_check.add_argument("--out", help="where the details go (default: scratch/check-<kind>/)")
    p_check.add_argument(
        "--quick",
        action="store_true",
        help="gpu: environment, probes, capped CUDA tests, 3 tiny runs (≤ 8 min)",
    )
    p_pred = sub.add_parser(
        "predict", help="predicted step time and MFU of a layout (or --search for the best)"
    )
    from mfulab.run.predict_cli import add_arguments

    add_arguments(p_pred)
    p_meas = sub.add_parser("measure", help="run only the measurement, headless")
    p_meas.add_argument("study")
    p_meas.add_argument("-f", "--file", required=True, help="studies/<study>/<profile>.yaml")
    p_meas.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    p_meas.add_argument("--out", required=True)
    return parser


COURSE_START, COURSE_END = "<!-- course table: python -m mfulab readme -->", "<!-- end of course table -->"


def course_table() -> str:
    """The README's course table, from the registry (``make readme`` writes it)."""
    rows = ["| # | study | notebook | what it answers |", "|---|---|---|---|"]
    for s in REGISTRY.values():
        claims = f" ({', '.join(s.claims)})" if s.claims else ""
        rows.append(
            f"| {s.number:02d} | `{s.id}` | [notebooks/{s.notebook}](notebooks/{s.notebook}) "
            f"| {s.summary}{claims} |"
        )
    return "\n".join(rows)


def readme(check: bool = False) -> int:
    """Rewrite (or, with ``check``, verify) the block between the course-table markers."""
    path = paths.repo_root() / "README.md"
    text = path.read_text()
    if COURSE_START not in text or COURSE_END not in text:
        raise ParameterError(f"README.md lacks the markers {COURSE_START!r} … {COURSE_END!r}")
    head, rest = text.split(COURSE_START, 1)
    _, tail = rest.split(COURSE_END, 1)
    new = f"{head}{COURSE_START}\n{course_table()}\n{COURSE_END}{tail}"
    if check:
        if new != text:
            print("README.md's course table is stale: run 'make readme'", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


def calibrate(args) -> None:
    """``python -m mfulab calibrate``: measure (or confirm) every part and print where it is."""
    from mfulab.measure import calibration
    from mfulab.units import si

    if args.results_root:
        os.environ["MFULAB_RESULTS_ROOT"] = str(args.results_root)
    device = host.resolve_device(args.device)
    parts = [f"matmul:{d}" for d in args.dtypes] + ["bandwidth"]
    if args.nproc:
        parts.append(calibration.collectives_key(device, args.nproc))
    cal = calibration.get(args.setting, device=device, parts=parts, refresh=args.refresh)
    meta = cal.pop("_meta")
    for key, rec in cal.items():
        value = (
            si(rec["best_flops_per_s"], "FLOP/s")
            if key.startswith("matmul")
            else si(rec["plateau_bytes_per_s"], "B/s")
            if key == "bandwidth"
            else f"α {rec['alpha_s'] * 1e6:.0f} µs, link {si(rec['link_bytes_per_s'], 'B/s')}"
        )
        state = "measured now" if key in meta["measured_now"] else "up to date"
        print(f"{key:24s} {value:>28s}   ({state}, {rec['measured_at']})")
    print(f"calibration in {meta['file']}")


def _list() -> None:
    """Every study, its profiles with their time budgets (``study.yaml``), and whether ``make all``
    would run it again on this machine (its results were made from other inputs: notebook,
    parameters, library stamp, torch)."""
    root = paths.repo_root()
    for study in REGISTRY.values():
        try:
            profile = "default" if study.reads_results else "auto"  # as make all runs it
            state = "stale" if runner.stale(study.id, profile=profile) else "up to date"
        except ParameterError as err:
            state = f"cannot run here ({err})"
        budgets = study.budget_s
        shown = [f"{p} ({budgets[p]:g} s)" if p in budgets else p for p in paths.profiles(study.id, root)]
        where = f"{study.id:12s} notebooks/{study.notebook:28s} {state:11s}"
        print(f"{where} profiles: {', '.join(shown)}   {study.title}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        if args.command == "measure":
            runner.main_guard_malloc(argv)
            out = runner.measure(
                args.study,
                param_file=args.file,
                overrides=paths.parse_overrides(args.parameter),
                out=args.out,
            )
            if out is not None:  # only the rank that wrote says so
                print(f"measurements written to {out}")
        elif args.command == "site":
            from mfulab.site.build import build_course

            root = paths.repo_root()
            only = [args.machine] if args.machine else None
            out = build_course(args.results_root or root / "results", args.out or root / "site", only)
            print(f"site written to {out / 'index.html'}")
            if args.screenshots:
                from mfulab.site.shots import screenshots

                book = out / (args.machine or sorted(p.parent.name for p in out.glob("*/index.html"))[0])
                for path in screenshots(book, args.screenshots):
                    print(f"screenshot {path}")
        elif args.command == "stability":
            from mfulab.run import stability
            from mfulab.studykit.stability_report import describe

            path = stability.run(
                args.study,
                profile=args.profile,
                n=args.runs,
                overrides=paths.parse_overrides(args.parameter),
                results_root=args.results_root,
                keep=args.keep,
            )
            print(describe(results.load_stability(path.parent)))
            if args.keep:
                print(f"the last run's measurements are in {args.keep}: make {args.study} FROM={args.keep}")
            print(f"stability written to {path}")
        elif args.command == "check":
            from mfulab.run import check

            return check.main(args.kind, args.out, quick=args.quick)
        elif args.command == "calibrate":
            runner.main_guard_malloc(argv)
            calibrate(args)
        elif args.command == "predict":
            from mfulab.run.predict_cli import main as predict_main

            predict_main(args)
        elif args.command == "list":
            print(course_table()) if args.markdown else _list()
        elif args.command == "readme":
            return readme(check=args.check)
        elif args.command == "all":
            runner.run_all(profile=args.profile, force=args.force, results_root=args.results_root)
        else:
            runner.run(
                args.study,
                profile=args.profile,
                overrides=paths.parse_overrides(args.parameter),
                from_dir=args.from_dir,
                results_root=args.results_root,
                if_changed=args.if_changed,
            )
        return 0
    except (ParameterError, FileNotFoundError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # papermill's execution error carries the failing cell's message
        if type(err).__name__ == "PapermillExecutionError":
            print(
                f"error: the notebook failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                "earlier results were left untouched",
                file=sys.stderr,
            )
            return 1
        raise
