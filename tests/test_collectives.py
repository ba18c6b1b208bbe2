"""The collective benchmark's structure, nccl-tests style: one pair of buffers per size (not
one per call), warm-up and timed calls, then a separate correctness run checked where the
result lives. Run in a one-rank gloo group in this process."""

import pytest
import torch
import torch.distributed as dist

from mfulab.measure import collectives


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_benchmark_reuses_buffers_and_checks_once_per_size(one_rank_group, monkeypatch):
    allocated, calls = [], []
    real_buffers, real_run = collectives._buffers, collectives._run_op

    def buffers(*args, **kwargs):
        allocated.append(args[1])
        return real_buffers(*args, **kwargs)

    def run(op, inp, out, group=None):
        calls.append(op)
        return real_run(op, inp, out)

    monkeypatch.setattr(collectives, "_buffers", buffers)
    monkeypatch.setattr(collectives, "_run_op", run)
    rows = collectives.benchmark(
        ops=["all_reduce", "all_gather"], sizes_bytes=[4096, 65536], warmup=2, iters=5, device="cpu"
    )
    assert len(rows) == 4 and all(r["wrong"] == 0 and r["n"] == 5 for r in rows)
    assert len(allocated) == 2 * 4  # timing buffers + fresh correctness buffers, per op and size
    assert len(calls) == (2 + 5 + 1) * 4  # warm-up, timed, correctness
    assert all(r["calls_per_sample"] == 1 for r in rows)  # on CPU one synchronous call per sample


def test_expected_result_is_built_where_the_result_lives(monkeypatch):
    made = []
    real_full = torch.full

    def full(*args, **kwargs):
        made.append(kwargs.get("device"))
        return real_full(*args, **kwargs)

    monkeypatch.setattr(torch, "full", full)
    result = torch.full((8,), 3.0)
    assert collectives.count_wrong("all_reduce", result, 2) == 0
    assert made[-1] == result.device  # no CPU tensor copied to the device on every check
