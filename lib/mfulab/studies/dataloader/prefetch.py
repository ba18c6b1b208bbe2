"""Does a larger ``prefetch_factor`` hide I/O? Article B §4.1 (layer 2): 「prefetch_factor加大可以
让CPU提前准备多个batch的数据，隐藏IO延迟」 (a larger prefetch_factor lets the CPU prepare several
batches ahead, hiding I/O latency); layer 3 applies it to a loader that is 均匀地慢 (uniformly
slow). Measured here in the two cases its readings name (toy regime: a sleep stands for the I/O,
a timed wait for the accelerator's step, so no core is busy with either).

The model. PyTorch's ``DataLoader`` keeps up to W × prefetch_factor batches in flight, handed out
in order (worker k builds batches k, k + W, ...). A batch that takes ``burst`` to load is started
about W × prefetch_factor steps before the loop needs it, so the loop waits for it

    wait per burst ≈ max(0, burst − W · prefetch_factor · step)

(bursty: the other batches load quickly), while a loader slower on average than the step waits

    wait per step = max(0, load / W − step)        (uniform: every batch takes ``load``)

whatever the prefetch_factor: a buffer drains at the loader's mean rate.

The experiment (headless, torch): a dataset whose every sample sleeps its batch's latency / B
and returns its own index; per case × prefetch_factor, ``prefetch_steps`` steps after
``prefetch_warmup_steps``; every setting once per round in an order shuffled per round. The
gate: every batch holds exactly the indices the sampler asked for, in order.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

CASES = ("bursty", "uniform")
# a reading is decided on the paired ratio of the mean wait per step at the largest prefetch_factor
# over the smallest, per round: it hides when every round's ratio is below HIDES_BELOW (the wait at
# least halved), it does not when every one is above NO_EFFECT_ABOVE (within a fifth of no change:
# the rounds' own spread on this box); otherwise the toy cannot tell
HIDES_BELOW = 0.5
NO_EFFECT_ABOVE = 0.8


class BatchLatency:
    """Sample i sleeps ``latency_s[i // batch] / batch`` and returns i, so batch j costs
    ``latency_s[j]`` to build. Module level, so a worker process can unpickle it."""

    def __init__(self, latency_s: list[float], batch: int):
        self.latency_s, self.batch = latency_s, batch

    def __len__(self):
        return len(self.latency_s) * self.batch

    def __getitem__(self, i):
        time.sleep(self.latency_s[i // self.batch] / self.batch)
        return i


def latencies(p, case: str, n_batches: int) -> list[float]:
    """Each batch's load time in ``case``: bursty (every ``prefetch_burst_every``-th batch takes
    ``prefetch_burst_s``, the rest ``prefetch_base_s``) or uniform (each ``prefetch_uniform_s``)."""
    if case == "uniform":
        return [p.prefetch_uniform_s] * n_batches
    return [
        p.prefetch_burst_s if j % p.prefetch_burst_every == 0 else p.prefetch_base_s for j in range(n_batches)
    ]


SETUP = ("workers", "batch", "step_s", "base_s", "burst_s", "burst_every", "uniform_s")


def predicted_wait_s(setup: dict, case: str, prefetch_factor: int) -> float:
    """The model's mean wait per step (module docstring); ``setup``: the run's :data:`SETUP`."""
    w, step = setup["workers"], setup["step_s"]
    if case == "uniform":
        return max(0.0, setup["uniform_s"] / w - step)
    return max(0.0, setup["burst_s"] - w * prefetch_factor * step) / setup["burst_every"]


def _one_run(p, case: str, prefetch_factor: int) -> dict:
    import torch.utils.data as tud

    n = p.prefetch_warmup_steps + p.prefetch_steps
    dataset = BatchLatency(latencies(p, case, n), p.prefetch_batch)
    waits, intact = [], True
    with warnings.catch_warnings():  # workers that sleep need no core of their own
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        it = iter(
            tud.DataLoader(
                dataset,
                batch_size=p.prefetch_batch,
                num_workers=p.prefetch_workers,
                prefetch_factor=prefetch_factor,
            )
        )
    try:
        for step in range(n):
            t0 = time.perf_counter()
            batch = next(it)
            waits.append(time.perf_counter() - t0)
            expected = list(range(step * p.prefetch_batch, (step + 1) * p.prefetch_batch))
            intact = intact and batch.tolist() == expected
            time.sleep(p.prefetch_step_s)
    finally:
        del it  # the workers exit with their iterator
    steady = waits[p.prefetch_warmup_steps :]
    return {"mean_wait_s": float(np.mean(steady)), "waits_s": waits, "intact": intact}


def prefetch_rounds(p) -> dict:
    """Every case × prefetch_factor once per round for ``p.prefetch_rounds`` rounds (module
    docstring): per run the mean wait per step after the warm-up and the batches' gate."""
    from mfulab.measure.timing import progress

    settings = [(c, int(f)) for c in CASES for f in p.prefetch_factors]
    rng = np.random.default_rng(p.seed + 5)
    runs = []
    for rnd in progress(range(p.prefetch_rounds), "prefetch_factor (bursty and uniform loader)"):
        for i in rng.permutation(len(settings)):
            case, factor = settings[i]
            runs.append({"round": rnd, "case": case, "prefetch_factor": factor, **_one_run(p, case, factor)})
    return {"setup": {k: getattr(p, f"prefetch_{k}") for k in SETUP}, "runs": runs}


def prefetch_table(records):
    """Per case × prefetch_factor: the model's and the measured mean wait per step (median over
    rounds, with min and max) and the gate. Empty when not measured."""
    import pandas as pd

    measured = records.get("prefetch") or {}
    runs = measured.get("runs") or []
    rows = []
    for (case, factor), group in pd.DataFrame(runs).groupby(["case", "prefetch_factor"]) if runs else []:
        waits_ms = group.mean_wait_s * 1e3
        rows.append(
            {
                "case": case,
                "prefetch_factor": factor,
                "predicted_wait_ms": predicted_wait_s(measured["setup"], case, factor) * 1e3,
                "measured_wait_ms": float(waits_ms.median()),
                "measured_lo_ms": float(waits_ms.min()),
                "measured_hi_ms": float(waits_ms.max()),
                "intact": bool(group.intact.all()),
            }
        )
    return pd.DataFrame(rows)


def hides(records, case: str) -> dict | None:
    """The paired ratio, per round, of the mean wait at the largest prefetch_factor over the
    smallest in ``case``, and what it says: True (it hides: every ratio below ``HIDES_BELOW``),
    False (no effect: every one above ``NO_EFFECT_ABOVE``), None (the toy cannot tell). None
    where not measured."""
    runs = [r for r in (records.get("prefetch") or {}).get("runs", []) if r["case"] == case]
    if not runs:
        return None
    lo, hi = min(r["prefetch_factor"] for r in runs), max(r["prefetch_factor"] for r in runs)
    by_round = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["prefetch_factor"]] = r["mean_wait_s"]
    ratios = [w[hi] / w[lo] if w[lo] > 0 else float("inf") for w in by_round.values() if lo in w and hi in w]
    answer = True if max(ratios) < HIDES_BELOW else False if min(ratios) > NO_EFFECT_ABOVE else None
    return {
        "smallest": lo,
        "largest": hi,
        "ratios": ratios,
        "hides": answer,
        "intact": all(r["intact"] for r in runs),
    }
