"""Run a worker function on N processes under ``torchrun`` (torch.distributed.run), with
timeouts, whole-group cleanup and the worker's traceback surfaced.

``launch("package.module:worker", spec, nproc=2)`` runs
``python -m torch.distributed.run --standalone --nproc_per_node 2 -m mfulab.measure.launch ...``
in a new process session. Each rank initialises ``torch.distributed`` (NCCL on CUDA, gloo
on CPU) with ``init_timeout_s``, calls ``worker(spec)``, and rank 0 writes the returned
records to a JSON file that the launcher reads back. Guarantees:

- the whole job is killed (SIGTERM, then SIGKILL, to the process group) when it runs past
  ``timeout_s``, and :class:`LaunchError` says so with the tail of the log;
- when any rank raises, torchrun stops the others, and :class:`LaunchError` carries that
  rank's traceback (written by the rank itself before it exits);
- no process is left behind and no partial record is returned.

Under a cluster scheduler the same worker runs without this launcher: a ``torchrun`` per
node (``studies/cluster.sbatch`` starts one with ``srun``) starts ``python -m mfulab measure
<study> ...`` on every rank, and :func:`run` sees ``RANK``/``WORLD_SIZE`` and calls the worker
in-process. Plain ``srun`` of several tasks sets only ``SLURM_PROCID``/``SLURM_NTASKS``: every
task would act as rank 0 of its own job and write the same ``--out``, so it is refused.

Timeouts: ``init_timeout_s`` bounds the rendezvous (every rank joins, one barrier), then the
process group's timeout becomes ``op_timeout_s``, the bound on any one collective.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

from mfulab.errors import ParameterError
from mfulab.measure import jobinfo
from mfulab.measure.host import in_distributed_env


class LaunchError(RuntimeError):
    """A distributed job failed, hung past its timeout, or produced no records."""


def refuse_plain_srun(environ=None) -> None:
    """Several tasks of one ``srun`` step without torchrun's variables would each run a
    standalone job as rank 0 and write the same output: refuse, and say what to run."""
    environ = os.environ if environ is None else environ
    tasks = int(environ.get("SLURM_STEP_NUM_TASKS") or 1)
    if tasks > 1 and "RANK" not in environ:
        raise ParameterError(
            f"started by srun as {tasks} tasks without torchrun: srun sets SLURM_PROCID/SLURM_NTASKS, "
            "not RANK/WORLD_SIZE/MASTER_ADDR, so every task would run as rank 0 of its own job and "
            "write the same --out. Start one torchrun per node instead (studies/cluster.sbatch)."
        )


def backend_for(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def reduce_scalar(value: float, op: str = "max") -> float:
    """All-reduce one number across the ranks (max, min or sum) on the device the process
    group's backend needs (NCCL only takes CUDA tensors)."""
    import torch
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op={"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}[op])
    return float(t.item())


def _resolve(target: str):
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def check_world_size(nproc: int, device: str) -> None:
    """Refuse a world size the machine cannot host (one process per GPU on CUDA). Inside a
    torchrun job ``nproc`` is not used (torchrun chose the ranks): there, only this node's
    ranks (``LOCAL_WORLD_SIZE``) must each find a GPU — a node of 4 GPUs, or Slurm binding one
    GPU per task, is not refused for a profile written for 8."""
    if not (isinstance(nproc, int) and not isinstance(nproc, bool) and nproc >= 1):
        raise ParameterError(f"nproc must be a positive integer, got {nproc!r}")
    if in_distributed_env():
        if device == "cuda":
            import torch

            local, have = int(os.environ.get("LOCAL_WORLD_SIZE", 1)), torch.cuda.device_count()
            if have < 1 or (local > have and have != 1):
                raise ParameterError(f"{local} ranks on this node need a GPU each; this process sees {have}")
        return
    if device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if nproc > have:
            raise ParameterError(f"nproc={nproc} needs {nproc} GPUs; this machine has {have}")
    else:
        from mfulab.measure.host import usable_cpus

        if nproc > usable_cpus() * 4:
            raise ParameterError(
                f"nproc={nproc} CPU processes on {usable_cpus()} usable cores is more than this "
                "launcher allows (4 per core)"
            )


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            # the session leader is gone; make sure its children are too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def launch(
    target: str,
    spec: dict,
    *,
    nproc: int,
    device: str = "cpu",
    timeout_s: float = 600,
    init_timeout_s: float = 60,
) -> dict:
    """Run ``target`` ("module:function") on ``nproc`` ranks; return rank 0's records. The
    ranks' hosts, pids and devices go to the runner's job log (:mod:`mfulab.measure.jobinfo`)."""
    check_world_size(nproc, device)
    with tempfile.TemporaryDirectory(prefix="mfulab-launch-") as tmp:
        tmp = Path(tmp)
        (tmp / "spec.json").write_text(json.dumps(spec))
        log_path = tmp / "torchrun.log"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "mfulab.measure.launch",
            "--target",
            target,
            "--spec",
            str(tmp / "spec.json"),
            "--out",
            str(tmp),
            "--device",
            device,
            "--init-timeout",
            str(init_timeout_s),
            "--op-timeout",
            str(timeout_s),
        ]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        }
        started = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise LaunchError(
                    f"{target} on {nproc} ranks ran past timeout_s={timeout_s} and was killed "
                    f"(whole process group).\n--- log tail ---\n{_tail(log_path)}"
                ) from None
            except BaseException:  # Ctrl-C in the notebook: take the workers down too
                _kill_group(proc)
                raise
            finally:
                _kill_group(proc, grace_s=1.0)
        errors = sorted(tmp.glob("error-rank*.txt"))
        if rc != 0 or errors:
            detail = "\n".join(f"--- {p.stem} ---\n{p.read_text()}" for p in errors) or _tail(log_path)
            raise LaunchError(f"{target} failed on {nproc} ranks (torchrun exit {rc}):\n{detail}")
        result = tmp / "result.json"
        if not result.exists():
            raise LaunchError(f"{target} finished without records from rank 0.\n{_tail(log_path)}")
        ranks = tmp / "ranks.json"
        if ranks.exists():
            jobinfo.record_job(
                json.loads(ranks.read_text()), what=target, seconds=time.perf_counter() - started
            )
        return json.loads(result.read_text())


def _tail(path: Path, n_chars: int = 4000) -> str:
    try:
        return path.read_text()[-n_chars:]
    except OSError:
        return "(no log)"


def run(
    target: str, spec: dict, *, nproc: int, device: str, timeout_s: float = 600, init_timeout_s: float = 60
) -> dict | None:
    """Inside a distributed job (torchrun started this process): initialise the process group
    if needed and call the worker here (every rank returns; rank 0's records matter; the
    caller tears the group down, :func:`finish_in_process`). Otherwise: :func:`launch` a
    local torchrun job."""
    refuse_plain_srun()
    if not in_distributed_env():
        return launch(
            target, spec, nproc=nproc, device=device, timeout_s=timeout_s, init_timeout_s=init_timeout_s
        )
    import torch.distributed as dist

    if not dist.is_initialized():
        _init(device, init_timeout_s, timeout_s)
    return _resolve(target)(spec)


def _init(device: str, init_timeout_s: float, op_timeout_s: float) -> None:
    """Join the process group within ``init_timeout_s``, then allow each collective
    ``op_timeout_s`` (the group's timeout bounds every collective, not only the join)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if device == "cuda":
        torch.cuda.set_device(cuda_index())
    dist.init_process_group(backend_for(device), timeout=timedelta(seconds=init_timeout_s))
    dist.barrier()  # every rank has joined
    distributed_c10d._set_pg_timeout(timedelta(seconds=op_timeout_s))


def cuda_index() -> int:
    """This rank's GPU: ``LOCAL_RANK`` among the node's GPUs, or the only GPU a scheduler that
    binds one GPU per task lets the process see."""
    import torch

    return int(os.environ.get("LOCAL_RANK", 0)) if torch.cuda.device_count() > 1 else 0


def finish_in_process(write, device: str) -> None:
    """End of an in-process distributed measurement, on every rank: gather the ranks, barrier,
    rank 0 calls ``write(ranks)``, barrier, destroy the process group (DDP reducers first)."""
    import gc

    import torch.distributed as dist

    if not dist.is_initialized():
        write([jobinfo.rank_info(device)])
        return
    ranks = jobinfo.gather_ranks(device)
    dist.barrier()
    if dist.get_rank() == 0:
        write(ranks)
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()


def _worker_main(argv=None) -> int:
    """Entry point of each rank under torchrun (``python -m mfulab.measure.launch``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init-timeout", type=float, default=60)
    parser.add_argument("--op-timeout", type=float, default=600)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    out = Path(args.out)
    try:
        import torch.distributed as dist

        _init(args.device, args.init_timeout, args.op_timeout)
        spec = json.loads(Path(args.spec).read_text())
        records = _resolve(args.target)(spec)
        ranks = jobinfo.gather_ranks(args.device)
        if rank == 0:
            (out / "ranks.json").write_text(json.dumps(ranks))
            tmp = out / f".result-{os.getpid()}.tmp"
            tmp.write_text(json.dumps(records))
            os.replace(tmp, out / "result.json")
        del records
        import gc

        gc.collect()  # DDP reducers and their threads go before the process group
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        (out / f"error-rank{rank}.txt").write_text(
            f"[{time.strftime('%H:%M:%S')}] rank {rank}\n" + traceback.format_exc()
        )
        raise
    # The work is done and written. Skip interpreter teardown: torch's C++ static destructors
    # sometimes abort ("terminate called without an active exception") while gloo/DDP
    # threads are still joinable, which would turn a finished job into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_worker_main())
