"""Dense peak FLOP/s and memory bandwidth per accelerator, device detection, and the
machine fingerprint and slug that name ``results/<machine>/``.

The table lives in ``devices.yaml``: every peak is the *dense* datasheet number (never the
2:4-sparsity one) and every entry names its source, as torchtitan's ``get_peak_flops`` does.
An unknown device is refused, not guessed: pass the peak explicitly, or use the measured matmul ceiling
(``measure.matmul_ceiling``), which is what the CPU profiles do.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import ParameterError

TERA = 1e12


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    match: tuple[str, ...]  # all substrings must occur in the lower-cased device name
    flops_per_s: dict  # dtype -> dense peak FLOP/s
    mem_bytes_per_s: float
    source: str
    note: str = ""


def _load_devices() -> tuple[DeviceSpec, ...]:
    """The table in ``devices.yaml`` (next to this module), one :class:`DeviceSpec` per entry."""
    import yaml

    entries = yaml.safe_load((Path(__file__).with_name("devices.yaml")).read_text())
    return tuple(
        DeviceSpec(
            e["key"],
            tuple(e["match"]),
            {k: v * TERA for k, v in e["tflops"].items()},
            e["mem_gb_per_s"] * 1e9,
            e["source"],
            e.get("note", ""),
        )
        for e in entries
    )


DEVICES: tuple[DeviceSpec, ...] = _load_devices()


def known_devices() -> list[str]:
    return [d.key for d in DEVICES]


def device_spec(name: str) -> DeviceSpec:
    """The table entry for a canonical key (``h200``) or a vendor device name
    (``NVIDIA H100 80GB HBM3``). Unknown devices raise :class:`ParameterError`."""
    lowered = name.lower()
    for spec in DEVICES:
        if lowered == spec.key:
            return spec
    for spec in DEVICES:
        if all(part in lowered for part in spec.match):
            return spec
    raise ParameterError(
        f"no datasheet peak for device {name!r}; known devices: {', '.join(known_devices())}. "
        "Pass the peak explicitly or use the measured matmul ceiling."
    )


def peak_flops_per_s(device: str, dtype: str = "bf16") -> float:
    """Dense datasheet peak FLOP/s of one ``device`` for ``dtype`` (bf16, fp16, tf32, fp32)."""
    spec = device_spec(device)
    if dtype not in spec.flops_per_s:
        raise ParameterError(
            f"{spec.key} has no published dense {dtype} peak; known: {', '.join(spec.flops_per_s)}"
        )
    return spec.flops_per_s[dtype]


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


def machine_slug() -> str:
    """``results/<machine>/`` name: the accelerator key and count (``h200``, ``a100-x8``)
    or ``cpu-<cores>c``; ``MACHINE=`` in the environment overrides it."""
    override = os.environ.get("MACHINE", "").strip()
    if override:
        slug = _slug(override)
        if not slug:
            raise ParameterError(f"MACHINE={override!r} gives an empty folder name")
        return slug
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        try:
            base = device_spec(name).key
        except ParameterError:
            base = _slug(name.replace("NVIDIA", ""))
        # inside a distributed job the machine is the whole job: all its ranks' GPUs
        count = int(os.environ.get("WORLD_SIZE", torch.cuda.device_count()))
        return base if count == 1 else f"{base}-x{count}"
    return f"cpu-{usable_cpus()}c"


def fingerprint() -> dict:
    """Everything that identifies the machine and software a result came from."""
    import torch

    info = {
        "machine": machine_slug(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cpu_model": cpu_model(),
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
