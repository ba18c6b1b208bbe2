"""Analysis of the ``overlap`` study: the collectives table and the α–β check (claim B9), the
measured sweep with its paired comparisons (A3, A5, A18), and the articles' scale (A4, A5;
the models are in ``alpha_beta``).

Verdicts rest on this run's own measured times: A3 on the interleaved step times, A5 on the
measured communication time per step. The calibration's α–β (one per machine) draws the
model lines and is checked against this run's all-reduce times (``alpha_beta_check``).
Every function reads the plain records of ``bench.measure`` (here or from another machine).
"""

from __future__ import annotations

import numpy as np

from mfulab.analytic import comm
from mfulab.measure.timing import compare_timings, summarize
from mfulab.studies.overlap.alpha_beta import chunked_overlap


# ---------------------------------------------------------------------------- collectives, α–β
def collectives_table(records):
    import pandas as pd

    return pd.DataFrame(records["collectives"]["rows"])


def _all_reduce_rows(records):
    return collectives_table(records).query("op == 'all_reduce'").sort_values("size_bytes")


def fitted_alpha_beta(records) -> dict:
    """The all-reduce α (per ring step) and link bandwidth of this machine's calibration for
    this backend and rank count (records from before the calibration: fitted to this run)."""
    if "alpha_beta" in records:
        return records["alpha_beta"]
    return own_alpha_beta(records)


def own_alpha_beta(records) -> dict:
    """α–β of this run's all-reduce times, fitted as the calibration fits them
    (``comm.fit_alpha_beta``: B from the large sizes, α from the small ones), with the
    per-call cost t(S → 0) = 2(n−1)·α that A5 reads. A check on the calibration, not a
    second figure for the machine."""
    d = _all_reduce_rows(records)
    n = records["collectives"]["world_size"]
    fit = comm.fit_alpha_beta(d.size_bytes.to_numpy(float), d.time_s.to_numpy(float), n, "all_reduce")
    return {
        "alpha_s": fit["alpha_s"],
        "per_call_s": comm.ring_steps("all_reduce", n) * fit["alpha_s"],
        "link_bytes_per_s": fit["link_bytes_per_s"],
    }


def alpha_beta_check(records):
    """Per all-reduce size: this run's median time against the machine's α–β (the
    calibration's ring model), with the relative error (model − measured) ÷ measured."""
    import pandas as pd

    d = _all_reduce_rows(records)
    n, fit = records["collectives"]["world_size"], fitted_alpha_beta(records)
    rows = []
    for r in d.itertuples():
        model = comm.collective_time(
            "all_reduce", r.size_bytes, n, alpha_s=fit["alpha_s"], link_bytes_per_s=fit["link_bytes_per_s"]
        )
        rows.append(
            {
                "size_bytes": r.size_bytes,
                "measured_s": r.time_s,
                "model_s": model,
                "model_error": (model - r.time_s) / r.time_s,
            }
        )
    return pd.DataFrame(rows)


def fit_check(records):
    """Check: this run's fit vs the calibration. α, the per-call cost 2(n−1)α and B fitted to
    this run's all-reduce times as the calibration fits them (``own_alpha_beta``), beside the
    calibration's, with the relative difference (this run ÷ calibration − 1). A check of the
    calibration, not a second figure for the machine: every model here uses the calibration."""
    import pandas as pd

    n = records["collectives"]["world_size"]
    cal, own = fitted_alpha_beta(records), own_alpha_beta(records)
    cal = {**cal, "per_call_s": comm.ring_steps("all_reduce", n) * cal["alpha_s"]}
    rows = [  # (label with its unit, key, scale to that unit)
        ("per-step latency α (µs)", "alpha_s", 1e6),
        ("per-call cost 2(n−1)α (ms)", "per_call_s", 1e3),
        ("link bandwidth B (GB/s)", "link_bytes_per_s", 1e-9),
    ]
    return pd.DataFrame(
        [
            {
                "check: this run's fit vs the calibration": label,
                "calibration": cal[key] * unit,
                "this run's fit": own[key] * unit,
                "relative difference": own[key] / cal[key] - 1 if cal[key] else float("nan"),
            }
            for label, key, unit in rows
        ]
    ).set_index("check: this run's fit vs the calibration")


def alpha_beta_residuals(records) -> list[float]:
    """The calibration's ring model against this run's all-reduce times, per size."""
    return alpha_beta_check(records).model_error.tolist()


def per_call_s(records) -> float:
    """The machine's per-call cost of an all-reduce, 2(n−1)·α with the calibration's α: what
    every call pays before a byte moves (t(S → 0) of the ring model)."""
    n = records["collectives"]["world_size"]
    return comm.ring_steps("all_reduce", n) * fitted_alpha_beta(records)["alpha_s"]


def crossover_bytes(records) -> float:
    """The message size at which the per-call cost 2(n−1)α equals the bandwidth term
    2(n−1)/n·S/B (the calibration's α–β): S = n·α·B. Below it a call is latency-bound."""
    fit = fitted_alpha_beta(records)
    return records["collectives"]["world_size"] * fit["alpha_s"] * fit["link_bytes_per_s"]


def predicted_comm_s(records, k: int) -> dict:
    """Communication per step of k chunks from the machine's α–β (the calibration): calls ×
    (per-call cost + bytes per call ÷ bandwidth) = k·2(n−1)α + bus_factor·S/B; the first term
    is what more chunks add."""
    fit = fitted_alpha_beta(records)
    n, nbytes = records["collectives"]["world_size"], records["params"]["overlap_bytes"]
    latency_part = k * per_call_s(records)
    bandwidth_part = comm.bus_factor("all_reduce", n) * nbytes / fit["link_bytes_per_s"]
    return {
        "latency_part_s": latency_part,
        "bandwidth_part_s": bandwidth_part,
        "total_s": latency_part + bandwidth_part,
    }


# ---------------------------------------------------------------------------- measured sweep
def _rows(records, mode):
    return {r["k"]: r for r in records["overlap"]["rows"] if r["mode"] == mode}


def timing(records, mode: str, k: int, series: str):
    """Paired per-round samples of one (mode, k) as a ``timing.Timing``; ``series``:
    overlapped | compute_only | comm_only | overlapped_in_flight | comm_only_in_flight."""
    return summarize(_rows(records, mode)[k][f"{series}_times_s"], label=f"{series} k={k}", paired=True)


def has_in_flight(records) -> bool:
    return bool(records["overlap"].get("in_flight_measured"))


def overlap_table(records):
    """Medians and quartiles per compute mode and k: overlapped step, compute only,
    communication only, communication in flight inside the overlapped step, exposed
    communication, the model's step with the calibration's α–β and, on CUDA, how much longer
    the compute takes while NCCL runs beside it (``compute_slowdown_under_comm``)."""
    import pandas as pd

    fit = fitted_alpha_beta(records)
    n, nbytes = records["overlap"]["world_size"], records["params"]["overlap_bytes"]
    series = ["overlapped", "compute_only", "comm_only"] + (
        ["overlapped_in_flight"] if has_in_flight(records) else []
    )
    rows = []
    for r in records["overlap"]["rows"]:
        row = {"compute": f"{r['mode']} compute", "mode": r["mode"], "k": r["k"]}
        for s in series:
            t = timing(records, r["mode"], r["k"], s)
            row.update({f"{s}_s": t.median_s, f"{s}_q1_s": t.q1_s, f"{s}_q3_s": t.q3_s})
        model = chunked_overlap(
            compute_s=row["compute_only_s"],
            nbytes=nbytes,
            k=r["k"],
            n=n,
            alpha_s=fit["alpha_s"],
            link_bytes_per_s=fit["link_bytes_per_s"],
        )
        row["exposed_comm_s"] = float(
            np.median(np.subtract(r["overlapped_times_s"], r["compute_only_times_s"]))
        )
        row["compute_plus_comm_s"] = row["compute_only_s"] + row["comm_only_s"]
        row["model_step_s"] = model["step_s"]
        row["comm_share_of_step"] = row["exposed_comm_s"] / row["overlapped_s"]
        if "overlapped_compute_busy_s" in r:  # CUDA: NCCL's kernels slow the compute they overlap
            row["compute_slowdown_under_comm"] = float(
                np.median(r["overlapped_compute_busy_s"]) / np.median(r["compute_only_compute_busy_s"])
            )
        rows.append(row)
    return pd.DataFrame(rows)


def best_k(records, mode: str) -> int | None:
    """The k > 1 whose overlapped step is reliably shortest: the smallest upper quartile, ties
    by the median (None: no k > 1 was measured). The k a tuner would keep: picking by the
    median alone chose, on a 2-core box, a k whose median was 0.5 ms better but whose slow
    rounds (twice the step) put A3's interval across 1 in one run of three."""
    ks = [k for k in _rows(records, mode) if k > 1]

    def reliably_fast(k):
        t = timing(records, mode, k, "overlapped")
        return (t.q3_s, t.median_s)

    return min(ks, key=reliably_fast) if ks else None


def a3_outcome(records, mode: str, k: int | None = None) -> dict | None:
    """A3 in one compute mode: per round, the serial step (k = 1), the overlapped step at ``k``
    (fixed in advance, ``stated.A3_K``; the best k where that k was not swept) and the bound
    max(compute, comm); the paired comparison of the overlapped step with
    the serial one (``vs_serial``: does overlap move the step toward the bound at all), the
    share of the possible saving recovered (from the medians: (serial − overlapped) ÷ (serial −
    bound)), and the paired comparison with the midpoint (serial + bound)/2 (``comparison``),
    which the overlapped step beats exactly when more than half of the saving is recovered."""
    rows = _rows(records, mode)
    k = k if k in rows else best_k(records, mode)
    if not rows or k is None or 1 not in rows:
        return None
    serial = np.array(rows[1]["overlapped_times_s"])
    overlapped = np.array(rows[k]["overlapped_times_s"])
    bound = np.maximum(rows[k]["compute_only_times_s"], rows[1]["comm_only_times_s"])
    midpoint = summarize((serial + bound) / 2, label="half the saving", paired=True)
    overlapped_t = summarize(overlapped, label=f"overlapped k={k}", paired=True)
    c = compare_timings(midpoint, overlapped_t)
    vs_serial = compare_timings(summarize(serial, label="serial k=1", paired=True), overlapped_t)
    # the ratio of the medians shown beside it, (serial − overlapped) ÷ (serial − bound): a
    # per-round ratio divides by a difference near 0 in some rounds, and neither its median nor
    # a ratio of median differences can be recomputed from the medians a reader sees
    serial_s, overlapped_s, bound_s = (float(np.median(x)) for x in (serial, overlapped, bound))
    possible_s = serial_s - bound_s
    recovered = (serial_s - overlapped_s) / possible_s if possible_s > 0 else float("nan")
    out = {
        "mode": mode,
        "k": k,
        "serial_s": serial_s,
        "overlapped_s": overlapped_s,
        "bound_s": bound_s,
        "comm_over_compute": float(
            np.median(rows[1]["comm_only_times_s"]) / np.median(rows[1]["compute_only_times_s"])
        ),
        "recovered_share": float(recovered),
        "comparison": c,
        "vs_serial": vs_serial,
        # the all-reduces' time in flight inside the overlapped step ÷ alone, at the same k: above 1
        # the compute slowed the communication (cores shared on a CPU, SMs and memory on a GPU)
        "comm_stretch": compare_timings(
            timing(records, mode, k, "overlapped_in_flight"), timing(records, mode, k, "comm_only_in_flight")
        )
        if has_in_flight(records)
        else None,
    }
    return out | {"recovered_text": recovered_text(out)}


def recovered_text(o: dict) -> str:
    """A3's share of the possible saving as a reader sees it (none is possible when the
    median serial step is not above the bound)."""
    if o["recovered_share"] != o["recovered_share"]:
        return "no possible saving (median serial step ≤ max(compute, comm))"
    return f"{o['recovered_share']:.0%} of the possible saving"


def comm_per_step_table(records):
    """A5: communication time per step against k — measured (communication only; in flight
    inside the overlapped step, per compute mode; communication only pooled over the modes
    that ran that k, ``comm_only_pooled``) beside this run's α–β prediction
    calls × (per-call cost + bytes per call ÷ B) (``predicted_comm_s``)."""
    import pandas as pd

    nbytes = records["params"]["overlap_bytes"]
    modes_with = {}
    for r in records["overlap"]["rows"]:
        modes_with.setdefault(r["k"], []).append(r["mode"])
    rows = []
    for r in records["overlap"]["rows"]:
        k, pred = r["k"], predicted_comm_s(records, r["k"])
        row = {"mode": r["mode"], "k": k, "calls": k, "bytes_per_call": nbytes / k}
        row.update({f"predicted_{key}": v for key, v in pred.items()})
        row["comm_only_s"] = timing(records, r["mode"], k, "comm_only").median_s
        row["comm_only_pooled_s"] = comm_only_pooled(records, k, modes_with[k]).median_s
        if has_in_flight(records):
            row["in_flight_s"] = timing(records, r["mode"], k, "overlapped_in_flight").median_s
        rows.append(row)
    return pd.DataFrame(rows)


def a5_modes(records, k_a: int = 4, k_b: int = 16) -> list[str]:
    """The compute modes whose sweep has both chunk counts of the A5 comparison."""
    return [m for m in records["params"]["modes"] if {k_a, k_b} <= set(_rows(records, m))]


def comm_only_pooled(records, k: int, modes=None):
    """Communication-only step times at k, the rounds of every compute mode's interleaved run
    (``modes``; default: those of the A5 comparison) in one paired series: no compute runs in
    them, so the modes measure the same thing."""
    modes = a5_modes(records) if modes is None else modes
    times = [t for m in modes for t in _rows(records, m)[k]["comm_only_times_s"]]
    return summarize(times, label=f"comm only k={k}", paired=True)


def a5_series(records, k: int):
    """A5's communication-only step times at k: the sweep's pooled rounds (``comm_only_pooled``)
    followed by the A5 pass's own rounds (``a5_rounds``; absent in older records), in one paired
    series (the same round order at every k)."""
    own = records["overlap"].get("a5_comm_only_times_s", {}).get(str(k), [])
    return summarize(
        list(comm_only_pooled(records, k).times_s) + list(own), label=f"comm only k={k}", paired=True
    )


def a5_comparisons(records, k_a: int = 4, k_b: int = 16) -> dict:
    """Communication time per step at k_b against k_a, paired over the rounds:
    ``comm_only`` — the step's k all-reduces alone (``a5_series``); ``<mode>:in_flight``
    — communication in flight inside the overlapped step of that compute mode (gloo only).
    ``ratio`` = time(k_b) / time(k_a): above 1, k_b communicates longer."""
    modes = a5_modes(records, k_a, k_b)
    if not modes:
        return {}
    out = {"comm_only": compare_timings(a5_series(records, k_b), a5_series(records, k_a))}
    if has_in_flight(records):
        for m in modes:
            out[f"{m}:in_flight"] = compare_timings(
                timing(records, m, k_b, "overlapped_in_flight"),
                timing(records, m, k_a, "overlapped_in_flight"),
            )
    return out


def _benchmark_time_s(records, size_bytes: float, column: str = "time_s") -> float | None:
    """This run's median all-reduce time at exactly ``size_bytes`` (``column="q1_s"``: its lower
    quartile, which leaves out the stalls a shared CPU puts in some calls; None: not benchmarked)."""
    d = _all_reduce_rows(records)
    hit = d[d.size_bytes == int(size_bytes)]
    return float(hit[column].iloc[0]) if len(hit) else None


def a5_gap(records, k_a: int = 4, k_b: int = 16) -> dict | None:
    """How much of A5's measured gap the per-call cost explains. Per step, with the medians of
    the communication-only rounds (``a5_series``):

        gap_s            = comm(k_b) − comm(k_a)                       measured
        alpha_part_s     = (k_b − k_a) · 2(n−1)·α                      the calibration's per-call
                                                                         cost × the extra calls
        isolated_calls_s = k_b·t(S/k_b) − k_a·t(S/k_a)                 this run's benchmark times
                                                                         of single calls (α plus
                                                                         any bandwidth lost at the
                                                                         smaller size); None when a
                                                                         size was not benchmarked
        rest_s           = gap − the larger of the two explanations    unexplained by either

    The quartiles of both series show how the rounds spread."""
    if not a5_modes(records, k_a, k_b):
        return None
    nbytes = records["params"]["overlap_bytes"]
    t_a, t_b = a5_series(records, k_a), a5_series(records, k_b)
    gap_s = t_b.median_s - t_a.median_s
    alpha_part_s = (k_b - k_a) * per_call_s(records)
    single_a, single_b = _benchmark_time_s(records, nbytes / k_a), _benchmark_time_s(records, nbytes / k_b)
    isolated_s = k_b * single_b - k_a * single_a if single_a is not None and single_b is not None else None
    q1_a, q1_b = (_benchmark_time_s(records, nbytes / k, "q1_s") for k in (k_a, k_b))
    isolated_q1_s = k_b * q1_b - k_a * q1_a if q1_a is not None and q1_b is not None else None
    explained_s = max(alpha_part_s, isolated_s if isolated_s is not None else alpha_part_s)
    return {
        "k_a": k_a,
        "k_b": k_b,
        "extra_calls": k_b - k_a,
        "per_call_s": per_call_s(records),
        "comm_a": t_a,
        "comm_b": t_b,
        "gap_s": gap_s,
        "alpha_part_s": alpha_part_s,
        "alpha_share": alpha_part_s / gap_s if gap_s > 0 else float("nan"),
        "isolated_calls_s": isolated_s,
        "isolated_share": isolated_s / gap_s if gap_s > 0 and isolated_s is not None else float("nan"),
        "isolated_calls_q1_s": isolated_q1_s,
        "rest_s": gap_s - explained_s,
    }


def step_best_k_text(best: dict) -> str:
    """The k with the shortest measured step per compute mode (``best``: mode → k, from
    ``analysis.best_k``; the article's "4–8 works best" is about the step, not the
    communication alone)."""
    found = [f"k={k} ({m} compute)" for m, k in best.items() if k is not None]
    return (
        "among the chunk counts k > 1, the reliably fastest step (smallest upper quartile; the serial "
        "k = 1 is A3's baseline, not a candidate) is at " + ", ".join(found)
        if found
        else ""
    )


def a5_regime(records, art, per_call: float) -> dict:
    """The regime of A5's mechanism: the per-call share 2(n−1)α ÷ t(S/16) of one 16-chunk call
    (α–β model) here and at the article's scale. A call is per-call-dominated when the share
    is at least one half (its message below the crossover n·α·B); the regimes match when both
    sides are on the same side of that line."""
    p16 = predicted_comm_s(records, 16)
    share_here = per_call / (p16["total_s"] / 16)
    share_article = art["a5_latency_share_k16"]
    return {
        "share_here": share_here,
        "share_article": share_article,
        "matches": (share_here >= 0.5) == (share_article >= 0.5),
    }
