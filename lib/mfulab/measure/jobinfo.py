"""What a distributed job ran on, rank by rank, and the environment that changes results —
recorded nccl-tests style in ``env.json`` next to the measurements.

- :func:`rank_info`: one rank's host, pid, rank numbers, device and (on CUDA) PCI bus id;
  :func:`gather_ranks` collects it from every rank of the process group.
- :func:`result_environment`: the variables that change what a run measures (``NCCL_*``,
  ``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``, ``TORCHINDUCTOR_*``,
  ``PYTORCH_CUDA_ALLOC_CONF``, ``MALLOC_*``...).
- :func:`nvidia_report`: driver, clocks, power limit, ECC per GPU and ``nvidia-smi topo -m``
  (GPU/NIC/NUMA affinity); ``None`` where there is no ``nvidia-smi``.
- :func:`record_job` / :func:`recorded_jobs`: a study's launched jobs append their ranks to
  the file named by ``MFULAB_JOB_LOG`` (set by the runner), which goes into ``env.json``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

JOB_LOG = "MFULAB_JOB_LOG"
RESULT_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCHINDUCTOR_", "MALLOC_", "SLURM_JOB_")
RESULT_ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",  # set in NVIDIA's containers: fp32 matmuls run as TF32
    "NVIDIA_TF32_OVERRIDE",  # cuBLAS/cuDNN honour it whatever torch's allow_tf32 says
)
NVIDIA_QUERY = (
    "index,name,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
    "power.limit,power.max_limit,ecc.mode.current,persistence_mode"
)


def result_environment(environ=None) -> dict[str, str]:
    """The environment variables that change what a run measures, as they were set."""
    environ = os.environ if environ is None else environ
    return {
        k: v for k, v in sorted(environ.items()) if k in RESULT_ENV_NAMES or k.startswith(RESULT_ENV_PREFIXES)
    }


def rank_info(device: str = "cpu") -> dict:
    """This process: host, pid, global/local rank, device and the GPU's PCI bus id."""
    info = {
        "rank": int(os.environ.get("RANK", 0)),
        "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": device,
    }
    if device == "cuda":
        import torch

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        # older torch builds' device properties have no pci_* attributes: None, not a crash
        pci = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        info.update(
            device=f"cuda:{index}",
            device_name=props.name,
            pci_bus_id=None if None in pci else f"{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}.0",
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
    return info


def gather_ranks(device: str = "cpu") -> list[dict]:
    """:func:`rank_info` of every rank of the default process group, in rank order (a
    collective: every rank must call it); on CUDA the first rank of every other node adds its
    node's :func:`nvidia_report`."""
    import torch.distributed as dist

    info = rank_info(device)
    if device == "cuda" and info["local_rank"] == 0 and dist.get_rank() != 0:
        info["nvidia"] = nvidia_report()  # every other node's GPUs (env.json has the writer's)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, info)
    return gathered


def nvidia_report() -> dict | None:
    """Per-GPU driver, clocks, power limit and ECC, and the ``topo -m`` matrix; ``None``
    without ``nvidia-smi``. Fields a driver does not report are kept as it prints them."""
    query = _run(["nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader"])
    if query is None:
        return None
    names = NVIDIA_QUERY.split(",")
    gpus = [dict(zip(names, (f.strip() for f in line.split(",")))) for line in query.splitlines() if line]
    return {"gpus": gpus, "topology": _run(["nvidia-smi", "topo", "-m"])}


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def record_job(ranks: list[dict], *, what: str, seconds: float | None = None) -> None:
    """Append one job's ranks and its wall time (torchrun's start to its exit, in seconds) to
    the runner's job log (nothing when no log is set): where a study's measurement went."""
    path = os.environ.get(JOB_LOG)
    if not path or not Path(path).parent.is_dir():  # no runner, or its run has ended
        return
    log = Path(path)
    jobs = json.loads(log.read_text()) if log.exists() else []
    jobs.append({"what": what, "world_size": len(ranks), "seconds": seconds, "ranks": ranks})
    log.write_text(json.dumps(jobs))


def recorded_jobs(path) -> list[dict]:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else []


def command_line() -> list[str]:
    return [sys.executable, *sys.argv]


# ---------------------------------------------------------------------------- the job's shape
