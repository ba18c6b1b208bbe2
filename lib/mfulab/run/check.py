"""``make check-gpu`` and ``make check-node``: the first commands on a new GPU machine or
node, before any study is trusted there. Run without a venv as ``PYTHONPATH=lib python3 -m
mfulab check gpu [--quick]``: what the image lacks (pytest, Jupyter, webdataset) is skipped with
its reason.

Each part prints its line — ``ran``, ``skipped (why)`` or ``failed (where)`` — as it finishes,
keeps the details in ``scratch/check-<kind>/`` and makes the exit code 1 when it failed.
Without CUDA the CPU-side parts still run (for ``node``, a gloo rehearsal of every check).

- ``gpu``: environment report (failed when ``nvidia-smi`` lists GPUs torch cannot use); probes
  (device table, fp32 ceiling against the fp32 datasheet peak); ``tests/test_cuda.py``; every
  gpu profile validated here and its predicted peak within 90% of the card
  (:func:`memory_guard`); a tiny ``cuda`` run of every single-GPU study, each within
  :data:`STUDY_BUDGET_S`. ``--quick``: no profiles, three tiny runs, all within
  :data:`QUICK_DEADLINE_S`.
- ``node``: every multi-rank study's smoke profile over NCCL (launcher and in-process ``torchrun``):
  exit 0, every rank recorded, one writing, the group destroyed, ``studies/<id>/node_checks.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mfulab import results
from mfulab.analytic import devices
from mfulab.errors import ParameterError
from mfulab.measure import host, jobinfo, procs, timing
from mfulab.paths import read_profile, repo_root
from mfulab.studykit.registry import REGISTRY
from mfulab.units import GIB

STUDY_BUDGET_S = 300  # one tiny study run; a run past it is a failure (the time guard)
PROFILE_CARD_BYTES = 80e9  # the gpu profiles are written for an 80 GB card (A100 / H100 SXM)
MEMORY_GUARD_SHARE = 0.9  # a profile's predicted peak must leave 10% of the card free


@dataclass
class Part:
    name: str
    status: str  # ran | skipped | failed
    detail: str = ""

    def line(self) -> str:
        return f"{self.name:<34} {self.status}" + (f" ({self.detail})" if self.detail else "")


def _multi_rank(params: type) -> bool:
    """A study starts ranks of its own when its ``Params`` has ``nproc``: a field (the ranks
    asked for) or a property (the most ranks one of its jobs needs, as in parallelism)."""
    return "nproc" in params.names() or isinstance(getattr(params, "nproc", None), property)


def _studies() -> tuple[list, list]:
    """The measuring studies on one GPU (a ``device`` parameter) and those that start their
    own ranks (:func:`_multi_rank`), from the registry."""
    measuring = [s for s in REGISTRY.values() if s.measure]
    collective = [s for s in measuring if _multi_rank(s.params)]
    single = [s for s in measuring if "device" in s.params.names() and s not in collective]
    return single, collective


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _run(cmd: list[str], out: Path, name: str, timeout_s: float, env: dict | None = None) -> tuple[int, str]:
    """Run ``cmd`` from the repository root; its output goes to ``out/<name>.log``. Returns the
    exit code (124 past ``timeout_s``) and the log. The part runs in a session of its own; past
    its time it gets SIGTERM (a study's ``stop_on_signals`` then stops its tree), then its group
    and every process it left behind (torchrun's ranks start sessions of their own, and this
    process is their subreaper) are killed, so no rank keeps GPU memory or a port."""
    env = {
        **os.environ,
        "PYTHONPATH": str(repo_root() / "lib"),
        "MFULAB_NO_REEXEC": "1",
        "MFULAB_RESULTS_ROOT": str(out / "results"),  # smoke calibrations stay out of results/
        **(env or {}),
    }
    procs.become_subreaper()
    proc = subprocess.Popen(
        cmd,
        cwd=repo_root(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        for sig, grace_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
        left = procs.kill_descendants()
        log, _ = proc.communicate()
        code = 124
        log = f"{log or ''}\n--- stopped after {timeout_s:.0f} s; {left} process(es) it left were killed ---"
    (out / f"{name}.log").write_text(log)
    return code, log


def _where(log: str) -> str:
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "no output"


def _measure(
    study: str, out: Path, overrides: dict, *, torchrun_ranks: int = 0, budget_s: float = STUDY_BUDGET_S
) -> tuple[int, str, Path]:
    dest = out / (f"{study}-torchrun" if torchrun_ranks else study)
    profile = str(repo_root() / "studies" / study / "smoke.yaml")
    cmd = ["-m", "mfulab", "measure", study, "-f", profile]
    for key, value in overrides.items():
        cmd += ["-p", key, str(value)]
    cmd += ["--out", str(dest)]
    if torchrun_ranks:
        rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0"]
        cmd = ["-m", "torch.distributed.run", "--nproc_per_node", str(torchrun_ranks), *rdzv, *cmd]
    cmd = [sys.executable, *cmd]
    code, log = _run(cmd, out, dest.name, budget_s)
    return code, log, dest


OPTIONAL = ("pytest", "papermill", "jupytext", "tornado", "webdataset", "pyarrow", "triton")
QUICK_DEADLINE_S = 450  # --quick: every part together; each gets what is left of it
CUDA_TESTS_S = {"full": 420, "quick": 150}


def nvidia_smi_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists (0 without the tool or when it fails)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(ln.startswith("GPU ") for ln in out.stdout.splitlines()) if out.returncode == 0 else 0


def missing_packages() -> list[str]:
    def missing(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except (ImportError, ValueError):  # blocked (sys.modules[module] = None)
            return True

    return [m for m in OPTIONAL if missing(m)]


def environment_report(out: Path) -> Part:
    """The machine, software and variables; failed when ``nvidia-smi`` lists GPUs that torch
    cannot use (a CPU wheel, or a CUDA build newer than the driver): every GPU part would
    otherwise be skipped and the check pass."""
    import torch

    listed, seen = nvidia_smi_gpus(), _gpus()
    report = {
        "fingerprint": host.fingerprint(),
        "environment": jobinfo.result_environment(),
        "nvidia": jobinfo.nvidia_report(),
        "nvidia_smi_gpus": listed,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "tf32_overrides": timing.tf32_overrides(),
        "missing_packages": missing_packages(),
    }
    results.write_json(out / "environment.json", report)
    fp = report["fingerprint"]
    detail = f"{fp['machine']}, torch {fp['torch']}, CUDA {fp['cuda']}"
    if report["missing_packages"]:
        detail += f"; not installed (parts that need them skip): {', '.join(report['missing_packages'])}"
    if report["tf32_overrides"]:
        detail += f"; TF32 forced by {report['tf32_overrides']}: fp32 matmuls run as TF32"
    if listed and not seen:
        why = (
            "this torch is a CPU build (torch.version.cuda is None)"
            if torch.version.cuda is None
            else f"torch built for CUDA {torch.version.cuda} cannot use them (driver "
            f"{host._nvidia_driver()} too old for it?)"
        )
        return Part("environment report", "failed", f"nvidia-smi lists {listed} GPU(s) but {why}")
    return Part("environment report", "ran", detail)


def fp32_ceiling_problem(measured_flops_per_s: float, device_name: str) -> str | None:
    """An "fp32" matmul faster than the card's fp32 datasheet peak ran on TF32 tensor cores
    (an override variable, or allow_tf32 set elsewhere): it must not be labelled fp32."""
    try:
        peak = devices.peak_flops_per_s(device_name, "fp32")
    except ParameterError:
        return None
    if measured_flops_per_s <= peak:
        return None
    forced = timing.tf32_overrides()
    return (
        f"fp32 ceiling {measured_flops_per_s / 1e12:.1f} TFLOP/s is above the fp32 datasheet peak "
        f"{peak / 1e12:.1f}: fp32 matmuls run as TF32" + (f" ({forced})" if forced else "")
    )


def probes(out: Path) -> Part:
    """Seconds of measurement: this GPU in the device table, the fp32 matmul ceiling against its
    fp32 datasheet peak (TF32 in disguise), a bf16 ceiling at a size that fills the GPU."""
    if not _gpus():
        return Part("probes", "skipped", "no CUDA device")
    import torch

    name = torch.cuda.get_device_name(0)
    found = {"device_name": name}
    try:  # a CUDA error here is the finding, not the end of the check
        for dtype, size in (("fp32", 4096), ("bf16", 8192)):
            ceiling = timing.matmul_ceiling(device="cuda", dtype=dtype, sizes=(size,), min_run_time_s=0.2)
            found[f"{dtype}_flops_per_s"] = ceiling["best_flops_per_s"]
    except Exception as e:  # noqa: BLE001
        return Part("probes", "failed", f"matmul ceiling: {type(e).__name__}: {str(e)[:200]}")
    try:
        found["device_key"] = devices.device_spec(name).key
    except ParameterError:  # not in the table, or ambiguous: the probe line says so
        found["device_key"] = None
    problem = fp32_ceiling_problem(found["fp32_flops_per_s"], name)
    results.write_json(out / "probes.json", {**found, "problem": problem})
    detail = (
        f"{found['device_key'] or 'not in the device table'}; fp32 {found['fp32_flops_per_s'] / 1e12:.1f}, "
        f"bf16 {found['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s"
    )
    return Part("probes", "failed" if problem else "ran", problem or detail)


def cuda_tests(out: Path, cap_s: float = CUDA_TESTS_S["full"], quick: bool = False) -> Part:
    """``tests/test_cuda.py`` alone (every cuda/multigpu test is there; the other modules need
    the Jupyter and site packages a bare GPU image lacks), within ``cap_s``; ``quick`` leaves out
    the tests marked ``slow`` (cold compiles and study smoke runs: minutes each, more than
    ``--quick``'s cap; the full check and the tiny runs cover those paths)."""
    if not _gpus():
        return Part("CUDA tests", "skipped", "no CUDA device: they skip here with their reason")
    if "pytest" in missing_packages():
        return Part("CUDA tests", "skipped", "pytest is not installed")
    marks = "(cuda or multigpu) and not slow" if quick else "cuda or multigpu"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marks]
    code, log = _run([*cmd, "tests/test_cuda.py"], out, "cuda-tests", cap_s)
    if code == 124:
        return Part("CUDA tests", "failed", f"over their {cap_s:.0f} s cap; see cuda-tests.log")
    return Part("CUDA tests", "ran" if code == 0 else "failed", _where(log))


def _gpu_profile_files():
    """(study, profile, path) of every gpu/node/cluster profile in the repository."""
    for study_id in sorted(REGISTRY):
        for name in ("gpu", "node", "cluster"):
            path = repo_root() / "studies" / study_id / f"{name}.yaml"
            if path.exists():
                yield study_id, name, path


def gpu_profiles(gpus: int) -> list[Part]:
    """Every gpu/node/cluster profile validated against this machine (device, GPU count)."""
    parts = []
    for study_id, name, path in _gpu_profile_files():
        label = f"profile {study_id}/{name}"
        if not gpus:
            parts.append(Part(label, "skipped", "no CUDA device to validate it against"))
            continue
        try:
            REGISTRY[study_id].params.from_dict(read_profile(path)).prepared()
            parts.append(Part(label, "ran", "valid on this machine"))
        except ParameterError as e:
            status = "skipped" if "GPUs" in str(e) else "failed"
            parts.append(Part(label, status, str(e)[:160]))
    return parts


def memory_guard(card_bytes: float | None = None) -> list[Part]:
    """Every gpu/node/cluster profile's predicted peak (``Params.predicted_peak_bytes``) against
    ``MEMORY_GUARD_SHARE`` of the card: this GPU's memory, or without one the 80 GB card the
    profiles are written for."""
    if card_bytes is None:
        card_bytes = PROFILE_CARD_BYTES
        if _gpus():
            import torch

            card_bytes = torch.cuda.get_device_properties(0).total_memory
    parts = []
    for study_id, name, path in _gpu_profile_files():
        params = REGISTRY[study_id].params.from_dict(read_profile(path))
        peak = params.predicted_peak_bytes()
        label = f"memory guard {study_id}/{name}"
        if peak is None:
            host = getattr(params, "device", None) == "cpu"
            why = (
                "runs on the host's cores (gloo ranks): no device memory"
                if host
                else "its peak is not modelled"
            )
            parts.append(Part(label, "skipped", why))
            continue
        share = peak / card_bytes
        detail = f"predicted {peak / GIB:.1f} GiB = {share:.0%} of a {card_bytes / 1e9:.0f} GB card"
        parts.append(Part(label, "ran" if share <= MEMORY_GUARD_SHARE else "failed", detail))
    return parts


def tiny_study_runs(out: Path, gpus: int, *, only=None, budget_s=lambda: STUDY_BUDGET_S):
    """One :class:`Part` per study, as each finishes: a tiny cuda run of every single-GPU study
    (``only``: these), the multi-rank ones skipped for ``check-node``."""
    single, collective = _studies()
    for study in (s.id for s in single):
        label = f"tiny cuda run: {study}"
        if only is not None and study not in only:
            yield Part(label, "skipped", "not in --quick")
            continue
        if not gpus:
            yield Part(label, "skipped", "no CUDA device")
            continue
        t0, budget = time.time(), budget_s()
        if budget < 30:
            yield Part(label, "skipped", "no time left of the --quick deadline")
            continue
        code, log, _ = _measure(study, out, {"device": "cuda"}, budget_s=budget)
        took = f"{time.time() - t0:.0f} s"
        if code == 124:
            yield Part(label, "failed", f"over its {budget:.0f} s budget")
        else:
            yield Part(label, "ran" if code == 0 else "failed", took if code == 0 else _where(log))
    for study in collective:
        yield Part(f"tiny cuda run: {study.id}", "skipped", "multi-rank: needs 2+ GPUs, make check-node")


def run_checks(dest: Path, code: int, log: str, ranks: int, checks=None) -> tuple[str, str]:
    """The checks every multi-rank run must pass (exit 0, every rank recorded, one rank
    writing, the process group torn down) and the study's own (``checks(records)``)."""
    if code != 0:
        return "failed", _where(log)
    problems = list(checks(results.load_measurements(dest))) if checks else []
    env = results.read_json(dest / results.ENV)
    # in-process: the ranks that measured; through the launcher: the ranks of its jobs
    seen = max([len(env.get("ranks", []))] + [j["world_size"] for j in env.get("jobs", [])])
    if seen != ranks:
        problems.append(f"env.json records {seen} ranks, expected {ranks}")
    if log.count("measurements written to") != 1:
        problems.append(f"'measurements written' printed {log.count('measurements written to')} times")
    if "has NOT been destroyed" in log:
        problems.append("a process group was not destroyed")
    return ("failed", "; ".join(problems)[:300]) if problems else ("ran", "all checks hold")


def node_parts(out: Path, gpus: int):
    """Every multi-rank study through the launcher and through an in-process torchrun (a study
    whose jobs have sizes of their own, as parallelism's, through the launcher only)."""
    device, ranks = ("cuda", gpus) if gpus >= 2 else ("cpu", 2)
    how = "NCCL" if device == "cuda" else "gloo rehearsal on the CPU (no 2 GPUs here)"
    for study in _studies()[1]:
        if "nproc" in study.params.names():
            overrides, want, paths = {"device": device, "nproc": ranks}, ranks, (0, ranks)
        else:  # nproc derived from the profile: its smoke sizes on this device
            overrides, paths = {"device": device}, (0,)
            smoke = read_profile(repo_root() / "studies" / study.id / "smoke.yaml")
            want = study.params.from_dict({**smoke, **overrides}).nproc
        for torchrun in paths:
            path = "in-process torchrun" if torchrun else "launcher"
            code, log, dest = _measure(study.id, out, overrides, torchrun_ranks=torchrun)
            status, detail = run_checks(dest, code, log, want, study.node_checks_fn())
            yield Part(f"{study.id}, {want} ranks, {path}", status, f"{how}: {detail}")


def main(kind: str, out: str | Path | None = None, quick: bool = False) -> int:
    """Run the parts of ``kind``, printing each part's line as it finishes."""
    out = Path(out or repo_root() / "scratch" / f"check-{kind}")
    out.mkdir(parents=True, exist_ok=True)
    gpus, started = _gpus(), time.time()
    deadline = started + QUICK_DEADLINE_S if quick else None

    def left(cap: float) -> float:
        return cap if deadline is None else max(0.0, min(cap, deadline - time.time()))

    def parts():
        yield environment_report(out)
        if kind == "node":
            yield from node_parts(out, gpus)
            return
        yield probes(out)
        yield cuda_tests(out, left(CUDA_TESTS_S["quick" if quick else "full"]), quick=quick)
        if not quick:
            yield from gpu_profiles(gpus)
            yield from memory_guard()
        only = {s.id for s in _studies()[0] if s.check_quick} if quick else None  # study.yaml
        yield from tiny_study_runs(out, gpus, only=only, budget_s=lambda: left(STUDY_BUDGET_S))

    done = []
    for part in parts():
        print(f"{part.line()}  [{time.time() - started:.0f} s]", flush=True)
        done.append(part)
        (out / "summary.json").write_text(json.dumps([p.__dict__ for p in done], indent=1))
    failed = [p for p in done if p.status == "failed"]
    print(
        f"{len(done) - len(failed)} of {len(done)} parts ran or were skipped with their reason "
        f"in {time.time() - started:.0f} s; "
        + (f"{len(failed)} failed: send back the folder {out}" if failed else f"details in {out}")
    )
    return 1 if failed else 0
