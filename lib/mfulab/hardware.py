"""Dense peak FLOP/s, memory bandwidth and size per accelerator, device detection, and the
machine fingerprint and slug that name ``results/<machine>/``.

The table lives in ``devices.yaml``: every peak is the *dense* datasheet number (never the
2:4-sparsity one) and every entry names its source, as torchtitan's ``get_peak_flops`` does.

How a device name finds its entry (:func:`device_spec`): the name is lower-cased and its whitespace
collapsed; it resolves when it *is* an entry's ``key`` (``h100-sxm``) or one of the exact device
names an entry lists (``nvidia h100 80gb hbm3``, what ``torch.cuda.get_device_name()`` reports).
There is no substring or prefix matching, so an ``NVIDIA H100 NVL`` can never land on the SXM
entry, nor a ``GH200`` on the H200's. Names listed as ambiguous in the table (``AMD Instinct
MI250X / MI250``) and unknown names are refused with :class:`ParameterError`, not guessed: pass
the key of the product you have, add an entry with its source, or use the measured matmul ceiling
(``timing.matmul_ceiling``), which is what the CPU profiles do.
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
GB = 1e9
GIB = 2**30
DEVICES_YAML = Path(__file__).with_name("devices.yaml")


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    names: tuple[str, ...]  # exact device names (lower-cased) that resolve to this entry
    flops_per_s: dict  # dtype -> dense peak FLOP/s
    mem_bytes_per_s: float | None  # None where no figure is published
    memory_bytes: float | None
    source: str
    note: str = ""
    approximate: bool = False  # no vendor datasheet for this product (the note says what it rests on)
    # per-direction bytes/s inside a node and to other nodes, with their source (None: no figure)
    intra_node_bytes_per_s: float | None = None
    inter_node_bytes_per_s: float | None = None
    interconnect_source: str = ""
    # the best single dense GEMM measured on the device, FLOP/s per dtype (stas00's MAMF finder)
    mamf_flops_per_s: dict | None = None
    mamf_source: str = ""
    # FlashAttention-2's forward + backward FLOP/s over the dense bf16 peak, with its source (None: no figure)
    flash_attention_share_of_peak: float | None = None
    flash_attention_source: str = ""


def normalize_name(name: str) -> str:
    """The form names are compared in: lower-cased, runs of whitespace collapsed to one space."""
    return " ".join(name.split()).lower()


def _interconnect(entry: dict) -> dict:
    """The optional ``interconnect`` and ``mamf_tflops`` fields of one entry, in SI units."""
    net = entry.get("interconnect") or {}
    mamf = entry.get("mamf_tflops")
    return {
        "intra_node_bytes_per_s": net["intra_node_gb_per_s"] * GB if "intra_node_gb_per_s" in net else None,
        "inter_node_bytes_per_s": net["inter_node_gb_per_s"] * GB if "inter_node_gb_per_s" in net else None,
        "interconnect_source": net.get("source", ""),
        "mamf_flops_per_s": {d: v * TERA for d, v in mamf.items()} if mamf else None,
        "mamf_source": entry.get("mamf_source", ""),
        "flash_attention_share_of_peak": entry.get("flash_attention_share_of_peak"),
        "flash_attention_source": entry.get("flash_attention_source", ""),
    }


def _load_devices(path: Path = DEVICES_YAML) -> tuple[tuple[DeviceSpec, ...], dict[str, tuple[str, ...]]]:
    """The table in ``devices.yaml``: one :class:`DeviceSpec` per entry, and the ambiguous names
    (name -> candidate keys). Refuses a table in which a key or a name occurs twice, a name is
    not in normal form, or an ambiguous name points at an unknown key."""
    import yaml

    table = yaml.safe_load(path.read_text())
    specs = []
    for e in table["devices"]:
        mem_gb_per_s, memory_gib = e.get("mem_gb_per_s"), e.get("memory_gib")
        specs.append(
            DeviceSpec(
                key=e["key"],
                names=tuple(e.get("names") or ()),
                flops_per_s={dtype: tflops * TERA for dtype, tflops in e["tflops"].items()},
                mem_bytes_per_s=None if mem_gb_per_s is None else mem_gb_per_s * GB,
                memory_bytes=None if memory_gib is None else memory_gib * GIB,
                source=e["source"],
                note=e.get("note", ""),
                approximate=bool(e.get("approximate", False)),
                **_interconnect(e),
            )
        )
    ambiguous = {name: tuple(keys) for name, keys in (table.get("ambiguous") or {}).items()}
    seen: dict[str, str] = {}  # a name may repeat its own entry's key (gaudi2), nothing else
    for owner, names in [(s.key, dict.fromkeys((s.key, *s.names))) for s in specs] + [
        ("ambiguous", (n,)) for n in ambiguous
    ]:
        for name in names:
            if name != normalize_name(name):
                raise ValueError(f"{path.name}: {name!r} ({owner}) is not lower-cased with single spaces")
            if name in seen:
                raise ValueError(f"{path.name}: {name!r} occurs twice ({seen[name]} and {owner})")
            seen[name] = owner
    keys = {s.key for s in specs}
    for name, candidates in ambiguous.items():
        if not set(candidates) <= keys:
            raise ValueError(f"{path.name}: ambiguous {name!r} names unknown keys {set(candidates) - keys}")
    return tuple(specs), ambiguous


DEVICES, AMBIGUOUS = _load_devices()
_BY_NAME: dict[str, DeviceSpec] = {n: s for s in DEVICES for n in (s.key, *s.names)}


def known_devices() -> list[str]:
    return [d.key for d in DEVICES]


def _refusal(name: str, why: str) -> ParameterError:
    return ParameterError(
        f"no datasheet entry for device {name!r}: {why}. Known devices: {', '.join(known_devices())}. "
        "Names match exactly (lower-cased), nothing is guessed: pass the key of the product you have "
        "(e.g. device_spec('h100-sxm')), add an entry with its datasheet source to lib/mfulab/devices.yaml, "
        "or use the measured matmul ceiling (timing.matmul_ceiling)."
    )


def device_spec(name: str) -> DeviceSpec:
    """The table entry for a canonical key (``h200``) or an exact vendor device name
    (``NVIDIA H100 80GB HBM3``), by the rule in the module docstring. Ambiguous and unknown
    names raise :class:`ParameterError`."""
    normal = normalize_name(name)
    if normal in _BY_NAME:
        return _BY_NAME[normal]
    if normal in AMBIGUOUS:
        raise _refusal(name, f"the name fits more than one product ({', '.join(AMBIGUOUS[normal])})")
    raise _refusal(name, "it is neither a key nor a device name listed in devices.yaml")


def peak_flops_per_s(device: str, dtype: str = "bf16") -> float:
    """Dense datasheet peak FLOP/s of one ``device`` for ``dtype`` (bf16, fp16, tf32, fp32, fp8)."""
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
