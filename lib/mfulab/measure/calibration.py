"""One calibration per machine: the matmul ceiling per dtype, the DRAM bandwidth and the
collectives' α–β, measured once and read by every study.

Two studies that measure the same property of the same machine each on their own report two
numbers for it (the copy bandwidth of the 2-core box came out 36.6 GB/s in one study and
90.2 GB/s in another, because 64 MiB copies sit inside its 260 MiB last-level cache). Here
each property is measured once, under a named *setting* (:data:`SETTINGS`: ``cpu`` for the
course, ``gpu`` for one GPU, ``smoke`` for tests), and stored with its provenance in
``results/<machine>/calibration/<setting>.json``. A part is measured the first time a study
asks for it and re-measured when the code that measures it or the torch version changed,
or on request (``python -m mfulab calibrate --refresh``).

- **Matmul ceiling** (``timing.matmul_ceiling``): best median FLOP/s over square matmuls,
  per dtype, in the spirit of stas00's MAMF finder.
- **DRAM bandwidth**: ``dst.copy_(src)`` of buffers at several multiples (≥ 4×) of the
  last-level cache, so that no copy is served from cache; the reported figure is the
  *plateau*, the median over those sizes (``timing.memory_bandwidth``).
- **Collectives**: all-reduce α (per ring step) and link bandwidth fitted to the collective
  benchmark (``collectives.all_reduce_alpha_beta``; ``comm.fit_alpha_beta`` reads B at the
  large sizes and α at the small ones), per backend and rank count: the median over
  ``collective_jobs`` fresh process groups, each job's figures kept beside it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from mfulab.errors import ParameterError
from mfulab.units import MIB

VERSION = 1
# Named settings: sizes and time per benchmark. Bandwidth buffers are multiples of the
# last-level cache (``llc_multiples``) unless ``bandwidth_bytes`` fixes them (smoke only).
SETTINGS = {
    "cpu": {
        "matmul_sizes": (256, 512, 1024, 2048),
        "max_matmul_call_s": 2.0,  # a dtype this CPU emulates (bf16 without AVX512_BF16/AMX) stops there
        "llc_multiples": (4, 6, 8),
        # a VM's sysfs can report one CCX's L3 (32 MiB on the 2-core EPYC box) while its copies
        # stay partly cache-served up to ~200 MiB (64 MiB: 49, 128 MiB: 57, 192 MiB: 34-70,
        # 256-1024 MiB: 34 GB/s read + write, 2026-12-05): multiples of at least 64 MiB, so
        # 256, 384 and 512 MiB there (128, 192, 256 MiB gave a plateau of 70 GB/s)
        "cache_floor_bytes": 64 * MIB,
        "min_run_time_s": 0.5,
        "collective_sizes_log2": (12, 14, 16, 18, 20, 22, 24, 26),
        "collective_iters": 41,
        # 3 fresh jobs of ~6.5 s each on the 2-core box (5 until 2026-12-05: 33 s of the course's
        # 10 minutes); the figure is their median (the α of 5 jobs spread 229-1237 µs there)
        "collective_jobs": 3,
    },
    "gpu": {
        "matmul_sizes": (2048, 4096, 8192, 12288),
        "max_matmul_call_s": 1.0,
        "llc_multiples": (16, 32, 64),
        "min_run_time_s": 1.0,
        "collective_sizes_log2": (14, 17, 20, 23, 26, 29),
        "collective_iters": 20,
        "collective_jobs": 3,
    },
    "smoke": {
        "matmul_sizes": (64, 128),
        "max_matmul_call_s": 1.0,
        "bandwidth_bytes": (4 * MIB,),
        "min_run_time_s": 0.05,
        # the bandwidth is read between the two larger sizes: 16 MiB takes ~4× 256 KiB's time
        # even where a 3-call median of 256 KiB is slowed by a neighbour (4 MiB was not)
        "collective_sizes_log2": (12, 18, 24),
        "collective_iters": 3,
    },
}


CHOICES = ("auto", *SETTINGS)  # what a study's ``calibration`` parameter may say


def setting_for(name: str, device: str) -> str:
    """``auto`` → ``gpu`` on CUDA, ``cpu`` elsewhere; a known name is returned as it is."""
    if name == "auto":
        return "gpu" if device == "cuda" else "cpu"
    if name not in SETTINGS:
        raise ParameterError(f"calibration must be auto or one of {', '.join(SETTINGS)}; got {name!r}")
    return name


def last_level_cache_bytes(device: str) -> int:
    """The largest cache in front of the memory: L2 on CUDA, the largest CPU cache level
    (sysfs) elsewhere; 64 MiB when it cannot be read."""
    if device == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(0).L2_cache_size)
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        factor = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * factor)
    return max(sizes) if sizes else 64 * MIB


def bandwidth_sizes(setting: dict, llc_bytes: int) -> tuple[int, ...]:
    """Copy sizes of a setting: its multiples of the last-level cache, or of the setting's
    ``cache_floor_bytes`` where the cache the system reports is smaller (or fixed bytes)."""
    cache_bytes = max(llc_bytes, setting.get("cache_floor_bytes", 0))
    return tuple(setting.get("bandwidth_bytes") or (m * cache_bytes for m in setting["llc_multiples"]))


def code_sha256() -> str:
    """The code that measures a calibration: a change re-measures it."""
    from mfulab.results import sha256_files

    lib = Path(__file__).resolve().parent.parent
    files = ("measure/calibration.py", "measure/timing.py", "measure/collectives.py", "analytic/comm.py")
    return sha256_files(lib / name for name in files)


def _stamp(device: str) -> dict:
    """What a stored calibration must match to be reused: its code, torch, the device and, on a
    CPU, the processor generation (vendor, family, model, the matmul ISA flags). A VM's model name
    can be as generic as "AMD EPYC" on hosts two generations apart: on 2026-12-07 a calibration of
    a family-23 host (18 GB/s, 80 GFLOP/s) was reused on a family-25 one whose kernels ran at
    31 GB/s and 155 GFLOP/s, until the stamp named the generation."""
    import torch

    from mfulab.measure.host import cpu_isa, device_name

    stamp = {
        "version": VERSION,
        "code_sha256": code_sha256(),
        "torch": torch.__version__,
        "device": device,
        "device_name": device_name(device),
    }
    if device == "cpu":
        isa = cpu_isa()
        stamp["cpu"] = {k: isa.get(k) for k in ("vendor", "cpu_family", "cpu_model_number", "matmul_flags")}
    return stamp


def results_root() -> Path:
    """``MFULAB_RESULTS_ROOT`` (the runner sets it), else the repository's ``results/``."""
    env = os.environ.get("MFULAB_RESULTS_ROOT")
    if env:
        return Path(env)
    from mfulab.paths import repo_root

    return repo_root() / "results"


def _shown(path: Path) -> str:
    """``path`` as a reader finds it: relative to the repository when it is inside it."""
    from mfulab.paths import repo_root

    try:
        return str(path.resolve().relative_to(repo_root()))
    except ValueError:
        return str(path)


def path_for(setting: str, *, root=None, machine: str | None = None, device: str | None = None) -> Path:
    """The calibration file of ``machine``, by default the folder a study on ``device`` files its
    results in (:func:`host.job_machine`): a gloo job on a GPU host is ``cpu-<n>c``, a
    two-node job ``<gpu>-2x8``."""
    from mfulab.measure.host import job_machine

    machine = machine or job_machine({"device": device})
    return Path(root or results_root()) / machine / "calibration" / f"{setting}.json"


def _rank0_view(data: dict) -> dict:
    """Inside a process group every rank takes rank 0's copy of the calibration file: the ranks
    then agree on which parts to measure (measuring runs collectives on the whole group; ranks
    that read different copies, one per node, would wait in mismatched collectives)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return data
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return data
    box = [data]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _load(path: Path, stamp: dict) -> dict:
    from mfulab.results import read_json

    if not path.exists():
        return {"stamp": stamp, "parts": {}}
    data = read_json(path)
    return data if data.get("stamp") == stamp else {"stamp": stamp, "parts": {}}


def _measure_part(key: str, setting: dict, device: str, threads: int | None) -> dict:
    from mfulab.measure import timing

    kind, _, arg = key.partition(":")
    if kind == "matmul":
        return timing.matmul_ceiling(
            device=device,
            dtype=arg,
            sizes=setting["matmul_sizes"],
            min_run_time_s=setting["min_run_time_s"],
            num_threads=threads,
            max_call_s=setting.get("max_matmul_call_s"),
        )
    if kind == "bandwidth":
        llc = last_level_cache_bytes(device)
        sizes = bandwidth_sizes(setting, llc)
        out = timing.memory_bandwidth(
            device=device, sizes_bytes=sizes, min_run_time_s=setting["min_run_time_s"], num_threads=threads
        )
        return {**out, "last_level_cache_bytes": llc, "beyond_cache": all(s >= 4 * llc for s in sizes)}
    if kind == "collectives":
        from mfulab.measure.launch import run

        backend, nproc = arg.split("x")
        spec = {
            "device": device,
            "sizes_bytes": [2**k for k in setting["collective_sizes_log2"]],
            "iters": setting["collective_iters"],
        }
        # α moves ±15% between fresh process groups on a shared host (rank placement, the
        # backend's threads): the figure is the median over several fresh jobs.
        jobs = [
            run("mfulab.measure.collectives:alpha_beta_worker", spec, nproc=int(nproc), device=device)
            for _ in range(setting.get("collective_jobs", 1))
        ]
        if not all(0 < fit["link_bytes_per_s"] < float("inf") for fit in jobs):
            raise RuntimeError(
                f"the all-reduce times did not grow with the size ({key}): the sizes "
                f"2^{setting['collective_sizes_log2']} are too small to resolve a bandwidth"
            )
        alphas = [fit["alpha_s"] for fit in jobs]
        links = [fit["link_bytes_per_s"] for fit in jobs]
        median_job = jobs[int(np.argsort(alphas)[len(jobs) // 2])]  # its rows stand for the figure
        return {
            **median_job,
            "alpha_s": float(np.median(alphas)),
            "link_bytes_per_s": float(np.median(links)),
            "jobs": [{"alpha_s": a, "link_bytes_per_s": b} for a, b in zip(alphas, links)],
            "wrong": sum(fit["wrong"] for fit in jobs),
        }
    raise ParameterError(f"unknown calibration part {key!r}")


def get(
    setting_name: str,
    *,
    device: str,
    parts,
    refresh: bool = False,
    root=None,
    machine: str | None = None,
    num_threads: int | None = None,
) -> dict:
    """The calibration parts (``"matmul:fp32"``, ``"bandwidth"``, ``"collectives:gloox2"``) of
    this machine under ``setting_name``; missing or stale parts are measured and stored
    (only rank 0 writes under a distributed job). Returns ``{key: record}`` plus ``_meta``."""
    from mfulab.results import write_json

    setting = SETTINGS[setting_for(setting_name, device)]
    path = path_for(setting_for(setting_name, device), root=root, machine=machine, device=device)
    stamp = _stamp(device)
    data = _rank0_view(_load(path, stamp))
    if refresh:
        data["parts"] = {k: v for k, v in data["parts"].items() if k not in parts}
    measured = []
    for key in parts:
        if key not in data["parts"]:
            data["parts"][key] = {
                **_measure_part(key, setting, device, num_threads),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            measured.append(key)
    if measured and int(os.environ.get("RANK", "0")) == 0:
        write_json(path, data)
    out = {key: data["parts"][key] for key in parts}
    out["_meta"] = {
        "setting": setting_for(setting_name, device),
        "file": _shown(path),
        "stamp": stamp,
        "measured_now": measured,
    }
    return out


def describe(records: dict) -> str:
    """Markdown lines for a study's notebook: the ceiling and the bandwidth it used, where
    they come from, and how the bandwidth plateau was taken."""
    from mfulab.units import si

    ceiling, bandwidth = records["ceiling"], records["bandwidth"]
    meta = records.get("calibration", {})
    llc = bandwidth.get("last_level_cache_bytes")
    sizes_mib = ", ".join(f"{r['size_bytes'] / MIB:.0f}" for r in bandwidth["rows"])
    multiples = ", ".join(f"{r['size_bytes'] / llc:.0f}" for r in bandwidth["rows"]) if llc else ""
    cache = f" = {multiples}× the {llc / MIB:.0f} MiB last-level cache" if llc else ""
    where = (
        f"calibration `{meta.get('setting')}` of this machine ({meta.get('file', '?')})"
        if meta
        else "measured in this study"
    )
    ridge = ceiling["best_flops_per_s"] / bandwidth["plateau_bytes_per_s"]
    lines = [
        f"* matmul ceiling ({ceiling['dtype']}): **{si(ceiling['best_flops_per_s'], 'FLOP/s')}** at "
        f"{ceiling['best_size']}³"
        + (f" ({ceiling['skipped_because']})" if ceiling.get("skipped_because") else ""),
        f"* memory bandwidth (copy, plateau over {sizes_mib} MiB{cache}): "
        f"**{si(bandwidth['plateau_bytes_per_s'], 'B/s')}** (sizes differ by "
        f"{bandwidth['spread_between_sizes']:.0%})",
        f"* ridge point: **{ridge:.1f} FLOPs per byte**",
        f"* source: {where}",
    ]
    return "\n".join(lines)


def collectives_key(device: str, nproc: int) -> str:
    """The part name of the all-reduce α–β for this backend and rank count: inside a torchrun
    job the job's ranks (the group it is measured on), not the profile's ``nproc``."""
    from mfulab.measure.host import in_distributed_env, job_ranks
    from mfulab.measure.launch import backend_for

    return f"collectives:{backend_for(device)}x{job_ranks() if in_distributed_env() else nproc}"
