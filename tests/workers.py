"""Worker functions the launcher tests run under torchrun (importable by the ranks)."""

import os
import time


def echo(spec):
    import torch.distributed as dist

    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "value": spec["value"]}


def fail_on_rank_1(spec):
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank 1 fails on purpose")
    time.sleep(60)  # rank 0 would wait; torchrun must stop it
    return {}


def hang(spec):
    with open(os.path.join(spec["pid_dir"], f"{os.getpid()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(3600)


def hang_on_last_rank(spec):
    """Every rank leaves its pid in ``spec["corpus_dir"]``; the last rank hangs mid-run, the
    others wait for it in a collective (as a DDP job waits for a dead rank's all-reduce)."""
    import torch.distributed as dist

    with open(os.path.join(spec["corpus_dir"], f"{os.getpid()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if dist.get_rank() == dist.get_world_size() - 1:
        time.sleep(3600)
    dist.barrier()
    return {}


def calibration_agreement(spec):
    """Rank 1 reads a calibration file that has the part, rank 0 one that has not (node-local
    checkouts): what each rank then measures."""
    import torch.distributed as dist

    from mfulab import results
    from mfulab.measure import calibration

    rank = dist.get_rank()
    root = os.path.join(spec["root"], f"rank{rank}")
    if rank == 1:
        path = calibration.path_for("smoke", root=root)
        parts = {"matmul:fp32": {"best_flops_per_s": 1.0, "stale_copy": True}}
        results.write_json(path, {"stamp": calibration._stamp("cpu"), "parts": parts})
    cal = calibration.get("smoke", device="cpu", parts=["matmul:fp32"], root=root)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, cal["_meta"]["measured_now"])
    return {"measured_now": every}


def fresh_peak(spec):
    """memprobe.run_in_fresh_process: what a step allocating ``spec["bytes"]`` adds to the peak."""
    import torch

    from mfulab.measure import memprobe

    return memprobe.peak_rss_of(lambda: torch.ones(spec["bytes"], dtype=torch.uint8).max())


def fresh_env(spec):
    return {"value": os.environ.get(spec["name"]), "pid": os.getpid()}


def fresh_fail(spec):
    raise ValueError("fails on purpose in its own process")


def fresh_exit(spec):
    os._exit(3)


def fresh_sleep(spec):
    time.sleep(spec["seconds"])
    return {}
