"""The overlap sweep's CUDA side (``bench.overlap_worker`` on NCCL): the bf16 matmuls that stand
for a chunk's compute, calibrated on the device, and the chunked-overlap step timed with CUDA
events (compute on the current stream, each all-reduce on a side stream that waits for its chunk)."""

from __future__ import annotations

import time

CUDA_MM_SIZE = 4096  # on CUDA: large bf16 matmuls keep the tensor cores busy (not launch-bound)
# on CUDA a chunk's compute is matmuls of the largest of these sizes that fits its share: whole
# 4096² matmuls (~0.2 ms on an H100) overshot shares below that, 3-40× at k = 16-64
CUDA_MM_SIZES = (256, 512, 1024, 2048, CUDA_MM_SIZE)


def calibrate_matmul_cuda(size: int = CUDA_MM_SIZE) -> float:
    """Seconds per bf16 ``size``² matmul on this GPU, from CUDA events over 20 back-to-back calls."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(20):
        a @ a
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / 20


def calibrate_matmul_sizes_cuda(sizes=CUDA_MM_SIZES) -> dict[int, float]:
    """Seconds per bf16 matmul at each of ``sizes`` on this GPU (:func:`calibrate_matmul_cuda`)."""
    return {size: calibrate_matmul_cuda(size) for size in sizes}


def cuda_step(chunks, compute, with_compute: bool, with_comm: bool, comm_stream):
    """The chunked-overlap step on CUDA, timed with events: ``(step, read)``. ``step()`` enqueues
    it (compute i on the current stream; all-reduce i on ``comm_stream`` once compute i is done,
    between two events that mark the collective's start and completion); after the device has
    synchronised, ``read()`` returns the timeline (seconds from the step's start)."""
    import torch
    import torch.distributed as dist

    def event():
        return torch.cuda.Event(enable_timing=True)

    marks = []

    def step():
        marks.clear()
        origin = event()
        origin.record()
        t_start = time.perf_counter()
        for i, chunk in enumerate(chunks):
            c0, c1 = event(), event()
            c0.record()
            if with_compute:
                compute(t_start, i)
            c1.record()
            mark = {"chunk": i, "origin": origin, "c0": c0, "c1": c1}
            if with_comm:
                comm_stream.wait_event(c1)
                with torch.cuda.stream(comm_stream):
                    mark["m0"], mark["m1"] = event(), event()
                    mark["m0"].record()
                    dist.all_reduce(chunk)  # completion is enqueued on comm_stream: m1 marks it
                    mark["m1"].record()
            marks.append(mark)
        torch.cuda.current_stream().wait_stream(comm_stream)

    def read():
        timeline = []
        for m in marks:
            at = m["origin"].elapsed_time
            ev = {
                "chunk": m["chunk"],
                "compute_start_s": at(m["c0"]) / 1e3,
                "compute_end_s": at(m["c1"]) / 1e3,
            }
            if "m0" in m:
                ev["comm_start_s"], ev["comm_end_s"] = at(m["m0"]) / 1e3, at(m["m1"]) / 1e3
            timeline.append(ev)
        return timeline

    return step, read
