"""Running studies: profiles, the papermill run into ``results/<machine>/<study>/``, the
headless measurement, and the incremental ``make all``.

- :func:`run` — what ``make <study>`` calls. Every parameter is validated first (bad input
  stops before any work), the notebook executes with papermill into a temporary folder that
  replaces ``results/<machine>/<study>/`` only when it finished; Ctrl-C or SIGTERM stops the
  kernel and every worker it started, leaves the earlier results untouched and exits 130/143.
- :func:`measure` — only the measurement, headless (no Jupyter): the seam for clusters.
- :func:`run_all` — every study in course order, skipping those whose results were made from
  the same inputs (notebook, parameters, library, torch version; :func:`inputs`).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from . import hardware, jobinfo, launch, results, stability
from .config import ParameterError
from .procs import stop_on_signals
from .studies import REGISTRY, Study, get

KERNEL_NAME = "mfulab"
# glibc's allocator dominates eager CPU timings through page faults; benchmark processes keep
# freed memory mapped. Set before a process starts (glibc reads it once): the runner exports it
# to the kernel, and ``measure`` re-executes itself with it (cli).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}
log = logging.getLogger("mfulab")


def repo_root() -> Path:
    """The repository holding ``notebooks/`` and ``studies/`` (``MFULAB_ROOT`` overrides)."""
    env = os.environ.get("MFULAB_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2]
    return here if (here / "studies").is_dir() else Path.cwd()


# ---------------------------------------------------------------------------- profiles
def profiles(study: str, root: Path | None = None) -> list[str]:
    """The profiles of a study: its ``studies/<id>/*.yaml`` except the data files it declares."""
    from .studies import REGISTRY

    root = root or repo_root()
    data = set(REGISTRY[study].data_files) if study in REGISTRY else set()
    return sorted(p.stem for p in (root / "studies" / study).glob("*.yaml") if p.name not in data)


def resolve_profile(study: str, profile: str, root: Path | None = None) -> str:
    if profile == "auto":
        from .profile_choice import auto_profile

        profile = auto_profile(study, root)
    valid = profiles(study, root)
    if profile not in valid:
        raise ParameterError(
            f"unknown profile {profile!r} for study {study!r}; valid profiles: {', '.join(valid + ['auto'])}"
        )
    return profile


def parse_overrides(pairs) -> dict:
    """``[["seq_len", "2048"], ...]`` → ``{"seq_len": 2048}`` (values read as YAML, like papermill's -p)."""
    return {name: yaml.safe_load(value) for name, value in (pairs or [])}


def read_profile(path) -> dict:
    """A profile file: the parameters that differ from the study's defaults."""
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"parameter file {path} does not exist")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ParameterError(f"{path} must hold a mapping of parameter names to values")
    return values


# ---------------------------------------------------------------------------- inputs (incremental runs)
def _module_file(lib: Path, dotted: str) -> Path | None:
    """The file of ``mfulab.<dotted>`` (a module or a package's ``__init__``), or None."""
    base = lib.joinpath(*dotted.split(".")) if dotted else lib
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _imported_modules(lib: Path, path: Path) -> set[Path]:
    """The ``mfulab`` modules one file imports, at any level (function-level imports included),
    read from its source: ``import mfulab.x``, ``from mfulab.x import y``, ``from ..x import y``
    (and ``y`` itself where it is a module)."""
    import ast

    tree = ast.parse(path.read_text(), filename=str(path))
    if path.is_relative_to(lib):
        package = list(path.relative_to(lib).parent.parts)
    else:
        package = None  # a notebook: only absolute imports
    found: set[Path] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [
                a.name.removeprefix("mfulab").lstrip(".")
                for a in node.names
                if a.name.split(".")[0] == "mfulab"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                parts = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
                target = ".".join([*parts, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.split(".")[0] == "mfulab":
                target = node.module.removeprefix("mfulab").lstrip(".")
            else:
                continue
            names = [target] + [f"{target}.{a.name}".lstrip(".") for a in node.names]
        for name in names:
            file = _module_file(lib, name)
            if file is not None:
                found.add(file)
    return found


def library_files(study_id: str | None = None) -> list[Path]:
    """The library code that results depend on. For a study: its own package, its notebook's and
    ``notebook.setup``'s imports, and the transitive closure of the ``mfulab`` modules they import
    (read from the source, function-level imports included), plus ``devices.yaml`` and the
    registry's discovery (``studies/__init__.py``). A change to a module the study never imports,
    or to another study, does not make its results stale. Without a study: the whole library."""
    lib = Path(__file__).resolve().parent
    if study_id is None:
        return sorted([*lib.rglob("*.py"), *lib.rglob("*.yaml")])
    package = lib / "studies" / study_id
    from .studies import REGISTRY

    seeds = [*package.rglob("*.py"), lib / "notebook.py", lib / "studies" / "__init__.py"]
    if study_id in REGISTRY:  # the notebook's own imports (the notebook is hashed on its own)
        seeds.append(repo_root() / "notebooks" / REGISTRY[study_id].notebook)
    todo = [p for p in seeds if p.is_file()]
    seen: set[Path] = set(todo)
    while todo:
        for module in _imported_modules(lib, todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    in_lib = {p for p in seen if p.is_relative_to(lib)}
    files = {*in_lib, lib / "devices.yaml", lib / "__init__.py", *package.rglob("*.yaml")}
    if study_id in REGISTRY and REGISTRY[study_id].reads_results:  # the comparison reads every declaration
        files |= set((lib / "studies").glob("*/study.yaml"))
    return sorted(files)


def library_sha256(study_id: str | None = None) -> str:
    return results.sha256_files(library_files(study_id))


def inputs(study: Study, params: dict, *, profile: str, root: Path, results_root: Path) -> dict:
    """What a study's results are made from; a run with equal inputs would redo the same work."""
    import torch

    out = {
        "notebook_sha256": results.sha256_files([root / "notebooks" / study.notebook]),
        "profile": profile,
        "params": params,
        "library_sha256": library_sha256(study.id),
        "torch": torch.__version__,
    }
    if study.data_files:  # a study's own data (e.g. published runs): a change re-runs it
        out["data_sha256"] = results.sha256_files([root / "studies" / study.id / f for f in study.data_files])
    if study.reads_results:
        metrics = [
            p
            for p in Path(results_root).glob("*/*/" + results.METRICS)
            if p.parent.parent.name != (study.machine or "")
        ]
        out["results_sha256"] = results.sha256_files(metrics)
    return out


def up_to_date(final: Path, expected: dict) -> bool:
    env_path = final / results.ENV
    if not env_path.exists():
        return False
    try:
        return results.read_json(env_path).get("inputs") == results.jsonable(expected)
    except ValueError:
        return False


# ---------------------------------------------------------------------------- notebooks
def _kernel_name() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL_NAME in KernelSpecManager().find_kernel_specs():
        return KERNEL_NAME
    log.warning(
        "Jupyter kernel %r is not registered (make env does it); using this Python's python3 kernel",
        KERNEL_NAME,
    )
    return "python3"


def render_notebook(source: Path, dest: Path) -> Path:
    """Convert a jupytext percent-format ``.py`` notebook to ``.ipynb`` with our kernel."""
    import jupytext
    import nbformat

    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python (mfulab)", "language": "python"}
    nbformat.write(nb, dest)
    return dest


def mark_read_only(ipynb: Path, *, scratch: Path | None = None, final: str = "", source: str = "") -> None:
    """An executed notebook is a record: its cells are marked non-editable (JupyterLab honours
    ``editable: false``) and the file is made read-only. The runner's temporary folder
    (``scratch``), injected as ``out_dir``, is replaced by where the results now live, and
    papermill's input and output paths name the course notebook (``source``) and the record."""
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    for cell in nb.cells:
        cell.metadata["editable"] = False
        cell.metadata["deletable"] = False
        if scratch is not None:
            cell.source = cell.source.replace(str(scratch), final)
    if scratch is not None and "papermill" in nb.metadata:
        params = nb.metadata["papermill"].get("parameters", {})
        if params.get("out_dir") == str(scratch):
            params["out_dir"] = final
        nb.metadata["papermill"]["input_path"] = source
        nb.metadata["papermill"]["output_path"] = f"{final}/{ipynb.name}"
    nbformat.write(nb, ipynb)
    os.chmod(ipynb, 0o444)


def run(
    study_id: str,
    *,
    profile: str = "auto",
    overrides: dict | None = None,
    from_dir: str | None = None,
    results_root: str | Path | None = None,
    notebook: Path | None = None,
    kernel: str | None = None,
    if_changed: bool = False,
) -> Path:
    """Execute one study notebook into ``results/<machine>/<study>/`` (atomically)."""
    import papermill as pm

    root = repo_root()
    study = get(study_id)
    results_root = Path(results_root or root / "results")
    measured_env = None
    if from_dir:
        results.load_measurements(from_dir)  # fails early with a clear message
        env_path = Path(from_dir) / results.ENV
        measured_env = results.read_json(env_path) if env_path.exists() else None
    if measured_env and measured_env.get("params"):  # keep the measuring run's parameters
        profile = measured_env.get("profile") or measured_env.get("param_file") or "measured"
        p = study.params.from_dict({**measured_env["params"], **(overrides or {})})
    else:
        profile = resolve_profile(study_id, profile, root)
        values = {**read_profile(root / "studies" / study_id / f"{profile}.yaml"), **(overrides or {})}
        p = study.params.from_dict(values)
        if not from_dir:
            p.prepared()  # machine-dependent checks (device, ranks) before any work
    params = p.to_dict()
    machine = (
        study.machine
        or (measured_env or {}).get("machine")
        or (measured_env or {}).get("fingerprint", {}).get("machine")
        or hardware.results_machine(params)
    )
    final = jobinfo.refuse_other_shape(results_root / machine / study.id, measured_env)
    notebook = notebook or root / "notebooks" / study.notebook
    expected = inputs(study, params, profile=profile, root=root, results_root=results_root)
    if if_changed and not from_dir and up_to_date(final, expected):
        log.info("%s: up to date in %s (notebook, parameters, library and torch unchanged)", study_id, final)
        return final
    for key, value in MALLOC_ENV.items():
        os.environ.setdefault(key, value)
    os.environ["MFULAB_RESULTS_ROOT"] = str(results_root)  # where the kernel finds the calibration

    started = time.time()
    log.info("running %s (profile %s) into %s", study_id, profile, final)
    with (
        results.atomic_dir(final) as tmp,
        tempfile.TemporaryDirectory() as scratch,
        stop_on_signals(lambda: results.discard_dir(tmp), what=f"study {study_id}"),
    ):
        kept = final / stability.STABILITY  # re-runs of the measurement outlive a re-render
        if kept.exists():
            shutil.copy2(kept, tmp / stability.STABILITY)
        source = render_notebook(notebook, Path(scratch) / f"{notebook.stem}.ipynb")
        job_log = Path(scratch) / "jobs.json"  # the ranks of every job the notebook launches
        os.environ[jobinfo.JOB_LOG] = str(job_log)
        executed = tmp / f"{notebook.stem}.ipynb"
        pm.execute_notebook(
            str(source),
            str(executed),
            parameters={
                "params": params,
                "out_dir": str(tmp),
                "from_dir": str(Path(from_dir).resolve()) if from_dir else "",
            },
            kernel_name=kernel or _kernel_name(),
            log_output=True,
            progress_bar=False,
            cwd=str(root),
        )
        mark_read_only(executed, scratch=tmp, final=_shown(final, root), source=_shown(notebook, root))
        metrics_path = tmp / results.METRICS
        metrics = results.read_json(metrics_path) if metrics_path.exists() else {}
        results.write_json(
            tmp / results.ENV,
            results.provenance(
                study=study_id,
                params=params,
                repo_root=root,
                started_s=started,
                extra={
                    "machine": machine,
                    "profile": profile,
                    "from_dir": from_dir,
                    "measured_env": measured_env,
                    "peak": metrics.get("peak"),
                    "inputs": expected,
                    "jobs": jobinfo.recorded_jobs(job_log),
                },
            ),
        )
        os.environ.pop(jobinfo.JOB_LOG, None)
    log.info("results in %s", final)
    return final


def _shown(path: Path, root: Path) -> str:
    """A path as a reader of the record should see it: relative to the repository when inside it."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def run_all(*, profile: str = "auto", force: bool = False, results_root=None) -> list[Path]:
    """Every study in course order (the comparison last); unchanged ones are skipped."""
    order = sorted(REGISTRY.values(), key=lambda s: (s.reads_results, s.number))
    return [
        run(
            s.id,
            profile="default" if s.reads_results else profile,
            results_root=results_root,
            if_changed=not force,
        )
        for s in order
    ]


def measure(study_id: str, *, param_file, overrides: dict | None = None, out) -> Path | None:
    """Run only a study's measurement and write ``measurements.json`` + ``env.json`` to ``out``.
    Under torchrun every rank measures and rank 0 alone writes (then the process group is torn
    down on every rank); the path is returned on the rank that wrote, ``None`` on the others."""
    study = get(study_id)
    if not study.measure:
        raise ParameterError(f"study {study_id!r} measures nothing; run it with 'make {study_id}'")
    launch.refuse_plain_srun()
    p = study.params.from_dict({**read_profile(param_file), **(overrides or {})}).prepared()
    started = time.time()
    out = Path(out)
    written: list[Path] = []

    def write(ranks: list[dict]) -> None:
        results.save_measurements(out, records)
        results.write_json(
            out / results.ENV,
            results.provenance(
                study=study_id,
                params=p.to_dict(),
                repo_root=repo_root(),
                started_s=started,
                extra={
                    "machine": jobinfo.job_machine(p.to_dict()),
                    "param_file": str(param_file),
                    "profile": Path(param_file).stem,
                    "ranks": ranks,
                    "jobs": jobinfo.recorded_jobs(job_log),
                },
            ),
        )
        written.append(out)

    with tempfile.TemporaryDirectory() as scratch, stop_on_signals(what=f"the measurement of {study_id}"):
        job_log = Path(scratch) / "jobs.json"
        os.environ[jobinfo.JOB_LOG] = str(job_log)
        try:
            records = study.measure_fn()(p)
            launch.finish_in_process(write, getattr(p, "device", "cpu"))
        finally:
            os.environ.pop(jobinfo.JOB_LOG, None)
    return written[0] if written else None


def main_guard_malloc(argv) -> None:
    """Re-execute this command with :data:`MALLOC_ENV` if it is missing (glibc reads it only at
    start-up), so that a headless measurement allocates as ``make <study>`` does."""
    if all(k in os.environ for k in MALLOC_ENV) or os.environ.get("MFULAB_NO_REEXEC"):
        return
    env = {**MALLOC_ENV, **os.environ, "MFULAB_NO_REEXEC": "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "mfulab", *argv], env)
