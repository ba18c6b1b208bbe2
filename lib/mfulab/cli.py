"""Command line: ``python -m mfulab list | run | measure``.

- ``run STUDY --profile P [-p NAME VALUE ...] [--from DIR]``: what ``make <study>`` calls.
  Validates every parameter first (bad input exits 2 before any work), executes the study
  notebook with papermill into a temporary folder, writes ``env.json``, and swaps the folder
  into ``results/<machine>/<study>/`` only if the notebook finished. ``--from DIR`` analyses
  measurements taken elsewhere (``measure``'s output) instead of measuring here.
- ``measure STUDY -f studies/<study>/<profile>.yaml --out DIR``: only the measurement,
  headless, with no Jupyter stack: the seam for clusters (``srun``/``torchrun``).
- ``list``: the studies, their notebooks and profiles.
- ``site [--machine M]``: the executed notebooks of ``results/<M>/`` as a static site.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from . import hardware, results
from .config import ParameterError

# study id -> notebook (in notebooks/) and the library module with validate/measure
STUDIES = {
    "mfu": {"notebook": "01_mfu_accounting.py", "module": "mfulab.mfu",
            "title": "MFU accounting: conventions, denominators, where a step's time goes"},
    "overlap": {"notebook": "02_overlap.py", "module": "mfulab.overlap",
                "title": "Communication/computation overlap: collectives benchmark, α–β model, chunked overlap"},
    "fusion": {"notebook": "03_operator_fusion.py", "module": "mfulab.fusion",
               "title": "Operator fusion: bytes moved, kernels, attention variants, torch.compile"},
    "buckets": {"notebook": "05_bucket_sweep.py", "module": "mfulab.buckets",
                "title": "DDP gradient buckets: a real bucket_cap_mb sweep and a calibrated simulator at scale"},
    "dataloader": {"notebook": "06_dataloader_formats.py", "module": "mfulab.data",
                   "title": "Dataloader formats: small files, JSONL, tar shards, memmap, Parquet; data stalls"},
    "compare": {"notebook": "07_compare_machines.py", "module": "mfulab.compare", "machine": "comparison",
                "title": "Machines side by side: ceilings, MFU, collectives, fusion, recompute, buckets, data"},
    "recompute": {"notebook": "04_recompute_tradeoff.py", "module": "mfulab.recompute",
                  "title": "Recompute trade-off: exact activation accounting, MFU vs HFU vs tokens/s, a planner"},
}
KERNEL_NAME = "mfulab"
# glibc's allocator dominates eager CPU timings through page faults (DESIGN.md); benchmark
# processes (the notebook kernel inherits this environment) keep freed memory mapped.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def repo_root() -> Path:
    """The repository holding ``notebooks/`` and ``studies/`` (``MFULAB_ROOT`` overrides)."""
    env = os.environ.get("MFULAB_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2]
    if (here / "studies").is_dir():
        return here
    return Path.cwd()


def study_spec(study: str) -> dict:
    if study not in STUDIES:
        raise ParameterError(f"unknown study {study!r}; valid studies: {', '.join(STUDIES)}")
    return STUDIES[study]


def profiles(study: str, root: Path | None = None) -> list[str]:
    root = root or repo_root()
    return sorted(p.stem for p in (root / "studies" / study).glob("*.yaml"))


def resolve_profile(study: str, profile: str, root: Path | None = None) -> str:
    if profile == "auto":
        import torch

        profile = "gpu" if torch.cuda.is_available() else "cpu"
    valid = profiles(study, root)
    if profile not in valid:
        raise ParameterError(f"unknown profile {profile!r} for study {study!r}; valid profiles: "
                             f"{', '.join(valid + ['auto'])}")
    return profile


def parse_overrides(pairs) -> dict:
    """``[["seq_len", "2048"], ...]`` → ``{"seq_len": 2048}`` (values read as YAML, like papermill's -p)."""
    return {name: yaml.safe_load(value) for name, value in (pairs or [])}


def load_params(path, overrides: dict | None = None) -> dict:
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"parameter file {path} does not exist")
    params = yaml.safe_load(path.read_text()) or {}
    if not isinstance(params, dict):
        raise ParameterError(f"{path} must hold a mapping of parameter names to values")
    params.update(overrides or {})
    return params


def _kernel_name() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if KERNEL_NAME in specs:
        return KERNEL_NAME
    logging.getLogger("mfulab").warning("Jupyter kernel %r is not registered (make env does it); "
                                        "using this Python's python3 kernel", KERNEL_NAME)
    return "python3"


def render_notebook(source: Path, dest: Path) -> Path:
    """Convert a jupytext percent-format ``.py`` notebook to ``.ipynb`` with our kernel."""
    import jupytext
    import nbformat

    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python (mfulab)", "language": "python"}
    nbformat.write(nb, dest)
    return dest


def run(study: str, *, profile: str = "auto", overrides: dict | None = None, from_dir: str | None = None,
        results_root: str | Path | None = None, notebook: Path | None = None, kernel: str | None = None) -> Path:
    """Execute one study notebook into ``results/<machine>/<study>/`` (atomically)."""
    import papermill as pm

    root = repo_root()
    spec = study_spec(study)
    profile = resolve_profile(study, profile, root)
    params = load_params(root / "studies" / study / f"{profile}.yaml", overrides)
    module = importlib.import_module(spec["module"])
    measured_env = None
    if from_dir:
        results.load_measurements(from_dir)  # fails early with a clear message
        env_path = Path(from_dir) / results.ENV
        measured_env = results.read_json(env_path) if env_path.exists() else None
    else:
        module.validate(params)
    machine = (spec.get("machine") or (measured_env or {}).get("fingerprint", {}).get("machine")
               or hardware.machine_slug())
    final = Path(results_root or root / "results") / machine / study
    notebook = notebook or root / "notebooks" / spec["notebook"]
    for key, value in MALLOC_ENV.items():
        os.environ.setdefault(key, value)
    started = time.time()
    log = logging.getLogger("mfulab")
    log.info("running %s (profile %s) into %s", study, profile, final)
    with results.atomic_dir(final) as tmp, tempfile.TemporaryDirectory() as scratch:
        source = render_notebook(notebook, Path(scratch) / f"{notebook.stem}.ipynb")
        pm.execute_notebook(
            str(source), str(tmp / f"{notebook.stem}.ipynb"),
            parameters={**params, "out_dir": str(tmp), "from_dir": str(Path(from_dir).resolve()) if from_dir else ""},
            kernel_name=kernel or _kernel_name(), log_output=True, progress_bar=False, cwd=str(root))
        metrics_path = tmp / results.METRICS
        metrics = results.read_json(metrics_path) if metrics_path.exists() else {}
        results.write_json(tmp / results.ENV, results.provenance(
            study=study, params=params, repo_root=root, started_s=started,
            extra={"profile": profile, "from_dir": from_dir, "measured_env": measured_env,
                   "peak": metrics.get("peak")}))
    log.info("results in %s", final)
    return final


def measure(study: str, *, param_file, overrides: dict | None = None, out) -> Path:
    """Run only a study's measurement and write ``measurements.json`` + ``env.json`` to ``out``."""
    spec = study_spec(study)
    params = load_params(param_file, overrides)
    module = importlib.import_module(spec["module"])
    module.validate(params)
    started = time.time()
    records = module.measure(params)
    out = Path(out)
    if int(os.environ.get("RANK", "0")) != 0:  # under srun/torchrun only rank 0 writes
        return out
    results.save_measurements(out, records)
    results.write_json(out / results.ENV, results.provenance(study=study, params=params, repo_root=repo_root(),
                                                             started_s=started, extra={"param_file": str(param_file)}))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mfulab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="studies and their profiles")
    p_run = sub.add_parser("run", help="execute a study notebook into results/<machine>/<study>/")
    p_run.add_argument("study")
    p_run.add_argument("--profile", default="auto")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    p_run.add_argument("--from", dest="from_dir", help="analyse measurements from this folder instead of measuring")
    p_run.add_argument("--results-root", help="folder holding results/<machine>/ (default: the repo's results/)")
    p_site = sub.add_parser("site", help="render a machine's executed notebooks as a static site")
    p_site.add_argument("--machine", help="results/<machine>/ to render (default: this machine)")
    p_site.add_argument("--out", help="output folder (default: site/<machine>)")
    p_site.add_argument("--results-root", help="folder holding results/<machine>/ (default: the repo's results/)")
    p_meas = sub.add_parser("measure", help="run only the measurement, headless")
    p_meas.add_argument("study")
    p_meas.add_argument("-f", "--file", required=True, help="studies/<study>/<profile>.yaml")
    p_meas.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    p_meas.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)

    try:
        if args.command == "site":
            from .site import build_site

            root = repo_root()
            machine = args.machine or hardware.machine_slug()
            out = build_site(args.results_root or root / "results", machine, args.out or root / "site" / machine)
            print(f"site written to {out / 'index.html'}")
            return 0
        if args.command == "list":
            root = repo_root()
            for study, spec in sorted(STUDIES.items(), key=lambda kv: kv[1]["notebook"]):
                print(f"{study:12s} notebooks/{spec['notebook']:28s} profiles: "
                      f"{', '.join(profiles(study, root))}   {spec['title']}")
            return 0
        if args.command == "run":
            run(args.study, profile=args.profile, overrides=parse_overrides(args.parameter),
                from_dir=args.from_dir, results_root=args.results_root)
            return 0
        out = measure(args.study, param_file=args.file, overrides=parse_overrides(args.parameter), out=args.out)
        print(f"measurements written to {out}")
        return 0
    except ParameterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # papermill's execution error carries the failing cell's message
        if type(err).__name__ == "PapermillExecutionError":
            print(f"error: the notebook failed in cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                  "earlier results were left untouched", file=sys.stderr)
            return 1
        raise
