"""Do prefetching workers hide a per-file latency? The model B11's network row rests on
(``training_gain.network_at_case_study``), checked on this machine with an emulated step.

The model. A batch of B samples, one file each, costs B × L to open at a latency L per file.
Loading inline (``num_workers=0``) the step waits for every open. With W workers, each worker
builds whole batches (PyTorch's ``DataLoader``: worker k makes batches k, k + W, ...), so W
batches arrive every B × L and the loop waits, per step in steady state,

    wait = max(0, B × L / W − step)              (inline: wait = B × L),

the reading and collating of the batch left out (as at the case study's job). ``prefetch_factor``
bounds the queue; it decides how long a burst can be absorbed, not the steady-state wait.

The experiment (headless, torch): the corpus's JSON files behind an injected latency (a sleep
before each file is read: a remote file system's round trip, during which the core is free) and
a step that is a timed wait (an accelerator's step: time passes, no core is busy). Per worker
count, ``hiding_steps`` steps after ``hiding_warmup_steps`` (the workers' start and the queue's
first fill); every worker count once per round, in an order shuffled per round. The gate: the
batches' checksums equal those of the same files read in order without latency.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from mfulab.measure.corpus import sample_checksum
from mfulab.measure.dataformats import Collate, JsonFiles


class SlowOpen:
    """The JSON files, one per sample, each read after a sleep of ``latency_s`` (module
    docstring). Module level, so a worker process can unpickle it."""

    def __init__(self, root, latency_s: float):
        self.reader = JsonFiles(root)
        self.latency_s = latency_s

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, i):
        time.sleep(self.latency_s)
        return self.reader[i]


def predicted_wait_s(*, batch: int, latency_s: float, workers: int, step_s: float) -> float:
    """The model's steady-state wait per step (module docstring)."""
    opens_s = batch * latency_s
    if workers == 0:
        return opens_s
    return max(0.0, opens_s / workers - step_s)


def _expected_checksums(root, *, batch: int, n_batches: int) -> list[int]:
    reader = JsonFiles(root)
    out = []
    for b in range(n_batches):
        total = 0
        for i in range(b * batch, (b + 1) * batch):
            key, toks = reader[i % len(reader)]
            total += sample_checksum(key, toks)
        out.append(total)
    return out


def _one_run(p, root, workers: int, expected: list[int]) -> dict:
    import torch.utils.data as tud

    n = p.hiding_warmup_steps + p.hiding_steps
    kw = {"num_workers": workers, "collate_fn": Collate(p.seq_len), "batch_size": p.hiding_batch}
    if workers:
        kw["prefetch_factor"] = p.prefetch_factor
    waits, intact = [], True
    with warnings.catch_warnings():  # more workers than cores: these sleep, they need no core
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        dataset = SlowOpen(root, p.hiding_latency_s)
        order = [i % len(dataset) for i in range(n * p.hiding_batch)]  # wraps round a small corpus
        it = iter(tud.DataLoader(dataset, sampler=order, **kw))
    try:
        for step in range(n):
            t0 = time.perf_counter()
            _, meta = next(it)
            waits.append(time.perf_counter() - t0)
            intact = intact and meta["count"] == p.hiding_batch and meta["checksum"] == expected[step]
            time.sleep(p.hiding_step_s)
    finally:
        del it  # the workers exit with their iterator
    steady = waits[p.hiding_warmup_steps :]
    return {"median_wait_s": float(np.median(steady)), "waits_s": waits, "intact": intact}


def hiding_rounds(p, root: Path) -> dict:
    """Every worker count of ``p.hiding_workers`` once per round for ``p.hiding_rounds`` rounds
    (module docstring); per run the steady-state median wait per step, every step's wait and
    the checksum gate."""
    from mfulab.measure.timing import progress

    root = Path(root)
    n = p.hiding_warmup_steps + p.hiding_steps
    expected = _expected_checksums(root, batch=p.hiding_batch, n_batches=n)
    rng = np.random.default_rng(p.seed + 3)
    runs = []
    for rnd in progress(range(p.hiding_rounds), "latency hiding (workers × emulated step)"):
        for i in rng.permutation(len(p.hiding_workers)):
            workers = int(p.hiding_workers[i])
            runs.append({"round": rnd, "workers": workers, **_one_run(p, root, workers, expected)})
    return {
        "latency_s": p.hiding_latency_s,
        "batch": p.hiding_batch,
        "step_s": p.hiding_step_s,
        "prefetch_factor": p.prefetch_factor,
        "warmup_steps": p.hiding_warmup_steps,
        "runs": runs,
    }


def hiding_table(records):
    """Per worker count: the batch's opens (B × L), the opens per worker, the model's wait and
    the measured steady-state wait per step (median over rounds, with min and max), their
    difference, and whether every batch passed the checksum gate. Empty when not measured."""
    import pandas as pd

    h = records.get("hiding")
    columns = [
        "workers",
        "opens_per_batch_ms",
        "opens_per_worker_ms",
        "step_ms",
        "predicted_wait_ms",
        "measured_wait_ms",
        "measured_lo_ms",
        "measured_hi_ms",
        "measured_minus_predicted_ms",
        "intact",
    ]
    if not h:
        return pd.DataFrame(columns=columns)
    rows = []
    for w in sorted({r["workers"] for r in h["runs"]}):
        runs = [r for r in h["runs"] if r["workers"] == w]
        medians = [r["median_wait_s"] for r in runs]
        opens_s = h["batch"] * h["latency_s"]
        pred_s = predicted_wait_s(batch=h["batch"], latency_s=h["latency_s"], workers=w, step_s=h["step_s"])
        measured_s = float(np.median(medians))
        rows.append(
            {
                "workers": w,
                "opens_per_batch_ms": opens_s * 1e3,
                "opens_per_worker_ms": opens_s / max(w, 1) * 1e3,
                "step_ms": h["step_s"] * 1e3,
                "predicted_wait_ms": pred_s * 1e3,
                "measured_wait_ms": measured_s * 1e3,
                "measured_lo_ms": min(medians) * 1e3,
                "measured_hi_ms": max(medians) * 1e3,
                "measured_minus_predicted_ms": (measured_s - pred_s) * 1e3,
                "intact": all(r["intact"] for r in runs),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def hiding_summary(table) -> str:
    """One clause for B11's network row: predicted against measured wait per worker count."""
    if table.empty:
        return ""
    r0 = table.iloc[0]
    parts = ", ".join(
        f"{int(r.workers)} workers {r.predicted_wait_ms:.1f} vs {r.measured_wait_ms:.1f} ms"
        for r in table.itertuples()
    )
    gate = "every batch intact" if table.intact.all() else "A BATCH FAILED ITS CHECKSUM"
    return (
        f". The hiding model, checked here (an emulated {r0.step_ms:g} ms step, "
        f"{r0.opens_per_batch_ms:g} ms of injected opens per batch; toy regime): predicted vs measured "
        f"wait per step, {parts}; {gate} (tables/b11_latency_hiding.csv)"
    )
