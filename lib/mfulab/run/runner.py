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

from mfulab import results
from mfulab.errors import ParameterError
from mfulab.measure import host, jobinfo, launch
from mfulab.measure.procs import stop_on_signals
from mfulab.paths import MALLOC_ENV, library_sha256, profiles, read_profile, repo_root
from mfulab.run import provenance
from mfulab.run.course import budget_line, calibrate_course, course_time_table, time_split
from mfulab.studykit.registry import REGISTRY, Study, get

KERNEL_NAME = "mfulab"
log = logging.getLogger("mfulab")


# ---------------------------------------------------------------------------- profiles


# ---------------------------------------------------------------------------- inputs (incremental runs)


def resolve_profile(study: str, profile: str, root: Path | None = None) -> str:
    if profile == "auto":
        from mfulab.run.profile_choice import auto_profile

        profile = auto_profile(study, root)
    valid = profiles(study, root)
    if profile not in valid:
        raise ParameterError(
            f"unknown profile {profile!r} for study {study!r}; valid profiles: {', '.join(valid + ['auto'])}"
        )
    return profile


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
    if not study.reads_results:
        # the machine's slug (cpu-2c, h200, a100-x8) names its cores or accelerators, not its CPU:
        # two 2-core boxes with different CPUs (AVX2 vs AMX) measure differently, so results made
        # on another CPU model are not up to date here
        out["cpu_model"] = host.cpu_model()
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


def _target(study_id: str, *, profile: str, overrides=None, from_dir=None, results_root=None):
    """What a run of ``study_id`` would make and where: (study, typed params, profile, results
    folder, expected inputs, the measuring run's env.json when rendering ``from_dir``).
    Bad parameters stop here, before any work."""
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
        or host.results_machine(params)
    )
    final = host.refuse_other_shape(results_root / machine / study.id, measured_env)
    expected = inputs(study, params, profile=profile, root=root, results_root=results_root)
    return study, p, profile, final, expected, measured_env


def stale(study_id: str, *, profile: str = "auto", results_root=None) -> bool:
    """Whether ``make all`` would run ``study_id`` again here: its committed results were made
    from other inputs (notebook, parameters, library stamp, torch), or there are none."""
    _, _, _, final, expected, _ = _target(study_id, profile=profile, results_root=results_root)
    return not up_to_date(final, expected)


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

    study, p, profile, final, expected, measured_env = _target(
        study_id, profile=profile, overrides=overrides, from_dir=from_dir, results_root=results_root
    )
    root = repo_root()
    results_root = Path(results_root or root / "results")
    params = p.to_dict()
    machine = final.parent.name
    notebook = notebook or root / "notebooks" / study.notebook
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
        kept = final / results.STABILITY  # re-runs of the measurement outlive a re-render
        if kept.exists():
            shutil.copy2(kept, tmp / results.STABILITY)
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
        notebook_ended = time.time()
        phases_path = tmp / results.PHASES
        phases = results.read_json(phases_path) if phases_path.exists() else None
        phases_path.unlink(missing_ok=True)
        mark_read_only(executed, scratch=tmp, final=_shown(final, root), source=_shown(notebook, root))
        metrics_path = tmp / results.METRICS
        metrics = results.read_json(metrics_path) if metrics_path.exists() else {}
        split = time_split(
            started=started, notebook_ended=notebook_ended, phases=phases, finished=time.time()
        )
        results.write_json(
            tmp / results.ENV,
            provenance.provenance(
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
                    "time_split_s": split,
                    "budget_s": study.budget_s.get(profile),
                },
            ),
        )
        os.environ.pop(jobinfo.JOB_LOG, None)
        if not from_dir:  # a local run's rank and node count are known only once its jobs ran
            _refuse_other_shape_keeping(final, tmp, results_root.parent / "scratch")
    if not split["measured_elsewhere"]:  # a FROM= render's budget was the measurement's (measured_env)
        log.info("%s", budget_line(f"{study_id}/{profile}", split["total"], study.budget_s.get(profile)))
    log.info("results in %s", final)
    return final


def _refuse_other_shape_keeping(final: Path, tmp: Path, scratch: Path) -> None:
    """Refuse (:func:`host.refuse_other_shape`) to let a local run replace results measured with
    another node or rank count; the new run is first kept under ``scratch/refused/`` (render it
    with ``make <study> FROM=<that folder> MACHINE=<another name>``), so no measurement is lost."""
    from mfulab.errors import ParameterError

    try:
        host.refuse_other_shape(final, results.read_json(tmp / results.ENV))
    except ParameterError as err:
        kept = scratch / "refused" / f"{final.parent.name}-{final.name}-{int(time.time())}"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(tmp, kept)
        raise ParameterError(f"{err}; this run is kept in {kept}") from None


def _shown(path: Path, root: Path) -> str:
    """A path as a reader of the record should see it: relative to the repository when inside it."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def run_all(*, profile: str = "auto", force: bool = False, results_root=None) -> list[Path]:
    """Every study in course order (the comparison last); unchanged ones are skipped. The cpu
    course's calibration is measured first (:func:`calibrate_course`). Ends with
    :func:`course_time_table`: where each study's time went, against its budget."""
    import torch

    order = sorted(REGISTRY.values(), key=lambda s: (s.reads_results, s.number))
    finals, rows = [], []
    if profile in ("auto", "cpu", "full") and (profile != "auto" or not torch.cuda.is_available()):
        row = calibrate_course("cpu", results_root=results_root, force=force)
        rows += [row] if row else []
    for s in order:
        before = time.time()
        final = run(
            s.id,
            profile="default" if s.reads_results else profile,
            results_root=results_root,
            if_changed=not force,
        )
        env_path = final / results.ENV
        env = results.read_json(env_path) if env_path.exists() else {}
        ran = env_path.exists() and env_path.stat().st_mtime >= before
        rows.append(
            {
                "study": s.id,
                "ran": ran,
                "profile": env.get("profile"),
                "time_split_s": env.get("time_split_s"),
                "budget_s": s.budget_s.get(env.get("profile")),
            }
        )
        finals.append(final)
    print(course_time_table(rows), flush=True)
    return finals


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

    profile = Path(param_file).stem
    budget_s = study.budget_s.get(profile)

    def write(ranks: list[dict]) -> None:
        results.save_measurements(out, records)
        measure_s = time.time() - started
        log.info("%s", budget_line(f"{study_id}/{profile} measurement", measure_s, budget_s))
        results.write_json(
            out / results.ENV,
            provenance.provenance(
                study=study_id,
                params=p.to_dict(),
                repo_root=repo_root(),
                started_s=started,
                extra={
                    "machine": host.job_machine(p.to_dict()),
                    "param_file": str(param_file),
                    "profile": profile,
                    "measure_s": measure_s,  # recorded against the profile's budget (study.yaml)
                    "budget_s": budget_s,
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
