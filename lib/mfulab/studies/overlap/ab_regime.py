"""The α–β model where it applies on this machine: the all-reduce sizes whose buffers no
longer fit the last-level cache, so that the time is a latency plus bytes over a bandwidth
(Hockney's model, as nccl-tests reads busbw at large sizes). Below that, on a CPU, a call's time
is gloo's thread scheduling and cache effects, which the model does not describe.

``regime_fit`` fits α–β to this run's sizes in that regime (``comm.fit_alpha_beta``) and reports
its residuals there, beside the calibration's residuals on the same sizes: the first says whether
the model's form describes this machine, the second whether the machine's speed moved between
the calibration and this run."""

from __future__ import annotations

import numpy as np

from mfulab.analytic import comm

# A ring all-reduce on gloo keeps about four buffers of the message alive (input, receive,
# reduced, output), so from a quarter of the last-level cache they spill to DRAM: the regime
# starts there (1 MiB when the cache size is unknown). Our reading, not a measured boundary.
REGIME_SHARE_OF_LLC = 0.25
REGIME_FALLBACK_BYTES = 2**20
MIN_SIZES = 3  # a two-parameter fit on fewer sizes has no residual to speak of
# a fit whose median held-out error is within this describes the regime (our threshold: about the
# spread of one size's time between rounds on the 2-core box)
FORM_FITS_RESIDUAL = 0.15


def regime_floor_bytes(records) -> float:
    """The smallest all-reduce size of the bandwidth regime on this machine."""
    llc = records.get("last_level_cache_bytes") if records["device"] == "cpu" else None
    return llc * REGIME_SHARE_OF_LLC if llc else REGIME_FALLBACK_BYTES


def regime_fit(records, rows, calibration: dict) -> dict | None:
    """α–β fitted to this run's all-reduce sizes from ``regime_floor_bytes`` up (``rows``: the
    all-reduce rows, ``size_bytes`` and ``time_s``), its relative residuals there, and the
    calibration's (``calibration``: ``alpha_s``, ``link_bytes_per_s``) on the same sizes; None
    with fewer than ``MIN_SIZES`` sizes in the regime."""
    n = records["collectives"]["world_size"]
    floor = regime_floor_bytes(records)
    d = rows[rows.size_bytes >= floor]
    if len(d) < MIN_SIZES:
        return None
    fit = comm.fit_alpha_beta(d.size_bytes.to_numpy(float), d.time_s.to_numpy(float), n, "all_reduce")
    cal = [
        comm.collective_time(
            "all_reduce",
            s,
            n,
            alpha_s=calibration["alpha_s"],
            link_bytes_per_s=calibration["link_bytes_per_s"],
        )
        for s in d.size_bytes
    ]
    own = [abs(r) for r in fit["relative_residuals"]]
    cal_err = [(m - t) / t for m, t in zip(cal, d.time_s)]
    # each size predicted by a fit to the others: the form tested on a size it was not fitted on
    # (the in-sample median is near 0 by construction: α is the median over the smaller half)
    sizes, times = d.size_bytes.to_numpy(float), d.time_s.to_numpy(float)
    held_out = []
    for i in range(len(d)):
        keep = [j for j in range(len(d)) if j != i]
        f = comm.fit_alpha_beta(sizes[keep], times[keep], n, "all_reduce")
        t_hat = comm.collective_time(
            "all_reduce", sizes[i], n, alpha_s=f["alpha_s"], link_bytes_per_s=f["link_bytes_per_s"]
        )
        held_out.append(abs(t_hat - times[i]) / times[i])
    return {
        "held_out_median_abs_error": float(np.median(held_out)),
        "floor_bytes": floor,
        "sizes": len(d),
        "alpha_s": fit["alpha_s"],
        "link_bytes_per_s": fit["link_bytes_per_s"],
        "max_abs_residual": max(own),
        "median_abs_residual": float(np.median(own)),
        "calibration_median_error": float(np.median(cal_err)),  # the true median (an even count averages)
        "bandwidth_vs_calibration": fit["link_bytes_per_s"] / calibration["link_bytes_per_s"],
    }


def regime_sentence(fit: dict | None) -> str:
    """What the regime fit says, for the chapter's text."""
    if fit is None:
        return (
            "fewer than three all-reduce sizes lie beyond the last-level cache here (buffers served from "
            "DRAM, the regime a cluster's messages live in): no fit to show; the latency/bandwidth "
            "crossover of the busbw figure is another line, the α–β model's"
        )
    describes = fit["held_out_median_abs_error"] <= FORM_FITS_RESIDUAL
    return (
        f"from {fit['floor_bytes'] / 2**20:g} MiB up ({fit['sizes']} sizes: the buffers spill out of the "
        f"last-level cache), α–β fitted to this run's times misses each size, predicted from a fit to "
        f"the others, by a median {fit['held_out_median_abs_error']:.0%} (in sample at most "
        f"{fit['max_abs_residual']:.0%}): "
        + (
            "the model's form describes this machine there"
            if describes
            else f"more than {FORM_FITS_RESIDUAL:.0%}, so not even its form describes this run"
        )
        + f". Its B is {fit['bandwidth_vs_calibration']:.2f}× the calibration's, and the calibration's model "
        f"misses the same sizes by {fit['calibration_median_error']:+.0%} (median)"
        + (
            ": the machine's speed moved between the calibration and this run, which is why the verdicts "
            "rest on measured steps"
            if abs(fit["calibration_median_error"]) > FORM_FITS_RESIDUAL
            else ""
        )
    )
