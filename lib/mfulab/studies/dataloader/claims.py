"""The claims of the ``dataloader`` study: B11 (``throughput``, ``training_gain``; B11's
persistent workers in ``settings``) and B12 (``checkpoint``). :func:`outcome` builds the tables the
notebook shows once, composes the rows (:func:`claim_rows`) and the headline metrics; the notebook
and ``make stability`` call it."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from mfulab.results import run_identity
from mfulab.studies.dataloader import (
    analysis,
    choosing,
    contention,
    hiding,
    image_job,
    prefetch,
    tar_readers,
    text_job,
    throughput,
    training_gain,
)
from mfulab.studies.dataloader.checkpoint import b12_existence, b12_magnitude, magnitude_sensitivity
from mfulab.studies.dataloader.settings import (
    b11_pin_memory_claim,
    b11_prefetch_claim,
    b11_settings,
    b11_shm_claims,
    b11_uniform_prefetch_claim,
)
from mfulab.studykit import verdicts
from mfulab.studykit.outcome import Outcome
from mfulab.studykit.verdicts import Claim


def tables(records) -> dict[str, pd.DataFrame]:
    """Every table the chapter shows, computed once (saved as ``tables/<name>.csv``)."""
    sweep = analysis.sweep_table(records)
    t = {
        "written": analysis.written_table(records),
        "loader_sweep": sweep,
        "warm_summary": analysis.warm_summary(sweep),
        "cold": analysis.cold_table(records),
        "b11_latency_sensitivity": throughput.latency_sensitivity(records),
        "restart": analysis.restart_table(sweep),
        "stall": analysis.stall_table(records),
    }
    t["required_vs_available"] = text_job.required_vs_available(records, t["cold"])
    t["b11_network_case_study"] = training_gain.network_at_case_study()
    if (decode_s := image_job.median_decode_s(records)) is not None:
        t["image_job"] = image_job.image_job_table(decode_s)
    t["b11_latency_hiding"] = hiding.hiding_table(records)
    t["b11_prefetch"] = prefetch.prefetch_table(records)
    t["format_choice"] = choosing.choice_table(t)
    if "checkpoint" in records:
        t["checkpoint"] = analysis.checkpoint_table(records)
        t["b12_magnitude_sensitivity"] = magnitude_sensitivity(records)
    if "contention" in records:
        t["contention"] = contention.contention_table(records)
    if records.get("tar_readers"):
        t["tar_readers"] = tar_readers.reader_table(records["tar_readers"])
    return t


def claim_rows(records, t=None) -> list[Claim]:
    """B11 (training throughput: the article's own case study, then this machine's training loop, with
    the loader alone on a local disk as its evidence's second reading; training throughput behind a
    network file system at the case study's job; worker count; persistent workers), B12
    (existence and magnitude, when
    the checkpoint part ran; the mechanism, when the contention part ran)."""
    hid = hiding.hiding_table(records) if t is None else t["b11_latency_hiding"]
    if t is None:
        need = text_job.required_vs_available(records, analysis.cold_table(records))
    else:
        need = t["required_vs_available"]
    out = [training_gain.b11_case_study(), training_gain.b11_wait_gone()]
    training = training_gain.b11_training(records, need)  # the loader alone: its second reading
    if training is not None:
        out.append(training)
    images = None if t is None else t.get("image_job")
    out.append(training_gain.b11_network(records, hiding_table=hid, image_table=images))
    out += [throughput.b11_workers(records, need), b11_settings(records), b11_prefetch_claim(records)]
    if (uniform_row := b11_uniform_prefetch_claim(records)) is not None:
        out.append(uniform_row)
    out.append(b11_pin_memory_claim())
    out += b11_shm_claims(records)
    if "checkpoint" in records:
        magnitude = b12_magnitude(records)
        spike = contention.contention_spike_text(records)  # §5.3's stated cause, a second reading
        out += [b12_existence(records), replace(magnitude, evidence=magnitude.evidence + spike)]
    if "contention" in records:
        out.append(contention.b12_mechanism(records))
    return out


def outcome(records, p) -> Outcome:
    """The tables, the claims rows and the headline metrics, each computed once."""
    t = tables(records)
    claim_list = claim_rows(records, t)
    values = {"best_warm_setting": analysis.best_warm_setting(records)}  # quoted by the notebook
    return Outcome(claim_list, headline_metrics(records, claim_list, t), t, values=values)


def headline_metrics(records, claim_list, t) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    rows = analysis.throughput_rows(records)
    stall = t["stall"].to_dict(orient="records")
    return {
        **run_identity(records),
        "usable_cpus": throughput.usable_cpus(records),
        "corpus": records["corpus"],
        "written": records["written"],
        "all_epochs_intact": bool(t["loader_sweep"].intact.all()),
        "throughput": rows,
        "stall": stall,
        "memmap_over_json_files_throughput": analysis.memmap_over_json_files_throughput(rows),
        "tar_over_json_files_cold_throughput": analysis.tar_over_json_files_cold_throughput(records),
        "worst_stall_fraction_real": analysis.worst_stall_fraction_real(stall),
        "claims": verdicts.records(claim_list),
    }
