"""This machine: device detection, the machine fingerprint, and the slug that names
``results/<machine>/`` (for a distributed job, its nodes × ranks).

Datasheet figures live in :mod:`mfulab.analytic.devices`; this module only asks the machine.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from mfulab.analytic.devices import device_spec
from mfulab.errors import ParameterError


# ---------------------------------------------------------------------------- this machine
def resolve_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` where available, else ``cpu``. Asking for ``cuda`` on a machine
    without it raises :class:`ParameterError` (before any work is done)."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise ParameterError(f"device must be one of auto, cpu, cuda; got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ParameterError(
            "device 'cuda' was asked for but CUDA is not available on this machine "
            "(use device: auto or cpu, or the cpu profile)"
        )
    return device


def device_name(device: str) -> str:
    """What a record calls the device it ran on: the CUDA device name or the CPU model."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_model()


def usable_cpus() -> int:
    """Cores this process may run on: the affinity mask (Slurm's --cpus-per-task, taskset,
    cgroups cpusets), not every core of the node as ``os.cpu_count()`` says."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_slug(*, device: str | None = None, ranks: int | None = None) -> str:
    """``results/<machine>/`` name: what ran the study. The accelerator key and the job's rank
    count (``h200``, ``a100-x8``), or ``cpu-<cores>c``; ``MACHINE=`` in the environment
    overrides it.

    ``device="cpu"`` names the host even on a GPU machine (a gloo job on the host is not a GPU
    result and must not replace one); ``ranks`` is the study's rank count where the runner
    launches the job, else the job's ranks (``WORLD_SIZE``) inside a distributed job, else 1 —
    never the GPUs this process can see: a single-process study is ``h100-sxm`` whether
    ``CUDA_VISIBLE_DEVICES`` shows it one GPU or eight."""
    override = os.environ.get("MACHINE", "").strip()
    if override:
        slug = _slug(override)
        if not slug:
            raise ParameterError(f"MACHINE={override!r} gives an empty folder name")
        return slug
    import torch

    if torch.cuda.is_available() and device != "cpu":
        name = torch.cuda.get_device_name(0)
        try:
            base = device_spec(name).key
        except ParameterError:
            base = _slug(name.replace("NVIDIA", ""))
        count = ranks or job_ranks()
        return base if count == 1 else f"{base}-x{count}"
    return f"cpu-{usable_cpus()}c"


def results_machine(params: dict) -> str:
    """The machine folder of a study run with ``params``: its ``device`` and, for studies that
    launch their own ranks, ``nproc`` (:func:`machine_slug`)."""
    device = params.get("device")
    nproc = params.get("nproc") if device == "cuda" or device == "auto" else None
    return machine_slug(device=device, ranks=nproc if isinstance(nproc, int) else None)


def job_ranks() -> int:
    """Ranks of the distributed job this process belongs to (``WORLD_SIZE``, set by torchrun and
    the launchers), 1 outside one."""
    raw = os.environ.get("WORLD_SIZE", "").strip()
    if not raw:
        return 1
    try:
        ranks = int(raw)
    except ValueError:
        raise ParameterError(f"WORLD_SIZE={raw!r} is not a whole number of ranks") from None
    if ranks < 1:
        raise ParameterError(f"WORLD_SIZE={raw!r} must be at least 1")
    return ranks


# CPU flags that decide how fast a CPU multiplies matrices (oneDNN's kernels): the FMA and the
# vector widths of fp32, and the bf16/fp16 extensions (an AVX2-only CPU emulates bf16 GEMMs)
MATMUL_ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def _cpuinfo() -> list[dict]:
    """``/proc/cpuinfo`` as one dict per logical CPU (empty where the file is missing)."""
    cpus, current = [], {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    if current:
                        cpus.append(current)
                    current = {}
                elif ":" in line:
                    key, value = line.split(":", 1)
                    current[key.strip()] = value.strip()
    except OSError:
        return []
    return cpus + ([current] if current else [])


def cpu_isa() -> dict:
    """The vector ISA torch dispatches to on this CPU (``torch.backends.cpu.get_cpu_capability``),
    which of :data:`MATMUL_ISA_FLAGS` ``/proc/cpuinfo`` lists, and what a theoretical peak needs
    (``analytic.devices.cpu_peak_flops_per_s``): vendor, family and model numbers, physical cores
    (distinct physical id and core id pairs; a VM reports its vCPUs) and a clock: the base
    frequency cpufreq reports where it exists (``/sys/.../cpufreq/base_frequency``, a fixed
    figure), else ``cpu MHz`` (core 0's clock at the moment of reading: in a VM usually the
    nominal one; on bare metal with frequency scaling it can vary between runs), neither the
    turbo a busy core may reach."""
    import torch

    cpus = _cpuinfo()
    first = cpus[0] if cpus else {}
    present = set(first.get("flags", "").split())
    cores = {(c.get("physical id", "0"), c.get("core id", str(i))) for i, c in enumerate(cpus)}
    clock_hz, clock_source = None, None
    try:
        base_khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency").read_text()
        clock_hz, clock_source = float(base_khz) * 1e3, "cpufreq base_frequency"
    except (OSError, ValueError):
        try:
            clock_hz, clock_source = float(first["cpu MHz"]) * 1e6, "/proc/cpuinfo cpu MHz"
        except (KeyError, ValueError):
            pass
    return {
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "matmul_flags": [flag for flag in MATMUL_ISA_FLAGS if flag in present],
        "vendor": first.get("vendor_id"),
        "cpu_family": int(first["cpu family"]) if first.get("cpu family", "").isdigit() else None,
        "cpu_model_number": int(first["model"]) if first.get("model", "").isdigit() else None,
        "physical_cores": len(cores) or None,
        "reported_clock_hz": clock_hz,
        "clock_source": clock_source,
    }


def fingerprint() -> dict:
    """Everything that identifies the machine and software a result came from."""
    import torch

    info = {
        "machine": machine_slug(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "cpu_count": usable_cpus(),
        "cpu_count_node": os.cpu_count(),
        "torch_num_threads": torch.get_num_threads(),
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "malloc_env": {k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")},
    }
    try:
        info["memory_total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        info["memory_total_bytes"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            {
                "device_name": props.name,
                "device_count": torch.cuda.device_count(),
                "device_memory_bytes": props.total_memory,
                "driver": _nvidia_driver(),
                "cudnn": torch.backends.cudnn.version(),
                "nccl": ".".join(map(str, torch.cuda.nccl.version()))
                if hasattr(torch.cuda, "nccl")
                else None,
            }
        )
        try:
            spec = device_spec(props.name)
            info["datasheet"] = asdict(spec)
        except ParameterError:
            info["datasheet"] = None
    else:
        info.update({"device_name": cpu_model(), "device_count": 1, "datasheet": None})
    return info


def in_distributed_env() -> bool:
    """True inside a process started by torchrun for a distributed job."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


# ---------------------------------------------------------------------------- the job's shape
def job_machine(params: dict) -> str:
    """``results/<machine>/`` of a run with ``params``. Inside a distributed job (torchrun) the
    job decides, not the profile's ``nproc``: its ranks, and over several nodes the nodes × the
    ranks per node (``h100-sxm-2x8``), so a two-node run never lands in the one-node folder."""
    if not in_distributed_env():
        return results_machine(params)
    world = job_ranks()
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    slug = machine_slug(device=params.get("device"), ranks=world)
    nodes = world // local if 0 < local < world and world % local == 0 else 1
    suffix = f"-x{world}"
    if nodes > 1 and slug.endswith(suffix) and not os.environ.get("MACHINE", "").strip():
        slug = f"{slug[: -len(suffix)]}-{nodes}x{local}"
    return slug


def job_shape(env: dict | None) -> tuple[int, int] | None:
    """(nodes, ranks) a run recorded in its ``env.json``: the ranks that measured in-process,
    or the largest job it launched, and their distinct hosts; ``None`` when it recorded none."""
    if not env:
        return None
    groups = [env.get("ranks") or []] + [j.get("ranks") or [] for j in env.get("jobs") or []]
    ranks = max(groups, key=len)
    if not ranks:
        return None
    return len({r.get("host") for r in ranks}), len(ranks)


def refuse_other_shape(final: Path, measured_env: dict | None) -> Path:
    """``final`` unless it holds results measured with another node or rank count than the run
    about to replace them (``measured_env``): those are never replaced."""
    from mfulab.errors import ParameterError

    old_path = Path(final) / "env.json"
    if not old_path.exists():
        return final
    old_env = json.loads(old_path.read_text())
    old = job_shape(old_env.get("measured_env") or old_env)
    new = job_shape(measured_env)
    if old and new and old != new:
        raise ParameterError(
            f"{final} holds a run on {old[1]} ranks over {old[0]} node(s); this one has {new[1]} ranks "
            f"over {new[0]} node(s) and would replace it: set MACHINE= to file it under another name"
        )
    return final
