"""The analytic costs of parallel layouts against values derived by hand from their sources."""

import pytest

from mfulab.analytic import comm, parallel
from mfulab.analytic.config import preset
from mfulab.errors import ParameterError


def test_bubble_by_hand():
    # Narayanan et al. 2021 §2.2: (p − 1)/(v·m); p = 4, m = 8: 3/8, and 3/16 with two chunks
    assert parallel.pipeline_bubble_fraction(p=4, m=8) == pytest.approx(0.375)
    assert parallel.pipeline_bubble_fraction(p=4, m=8, v=2) == pytest.approx(0.1875)
    assert parallel.pipeline_bubble_fraction(p=1, m=1) == 0


def test_schedule_costs_by_hand():
    interleaved = parallel.pipeline_schedule_costs(p=4, m=8, v=2, schedule="interleaved")
    assert interleaved["activation_layers_factor"] == pytest.approx(1 + 3 / 8)  # Korthikanti §4.2.3
    assert interleaved["p2p_messages_factor"] == 2
    assert parallel.pipeline_schedule_costs(p=4, m=8, schedule="gpipe")["activation_layers_factor"] == 2
    assert parallel.pipeline_schedule_costs(p=4, m=8)["activation_layers_factor"] == 1
    # at m = p the interleaved schedule cannot keep more than the step's m micro-batches (1F1B's p)
    at_m_eq_p = parallel.pipeline_schedule_costs(p=4, m=4, v=2, schedule="interleaved")
    assert at_m_eq_p["activation_layers_factor"] == 1


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(p=4, m=2), "at least p micro-batches"),
        (dict(p=4, m=6, v=2), "multiple of p"),
        (dict(p=1, m=4, v=2), "need pipeline parallelism"),
        (dict(p=4, m=8, v=2, n_layers=12), "do not split"),
        (dict(p=0, m=8), "whole number"),
    ],
)
def test_layouts_that_cannot_exist_are_refused_with_the_reason(kw, match):
    with pytest.raises(ParameterError, match=match):
        parallel.check_pipeline(**kw)


def test_tp_elements_for_one_layer_by_hand():
    cfg = preset("gpt2-124m").with_(seq_len=1024)
    bsh = 1 * 1024 * 768
    plain = parallel.tp_comm_elements_per_layer(cfg, micro_batch=1, tp=2)
    assert plain["collectives"] == [{"op": "all_reduce", "count": 4, "elements": bsh}]
    assert plain["elements_sent_per_device"] == pytest.approx(4 * 2 * (1 / 2) * bsh)
    sp = parallel.tp_comm_elements_per_layer(cfg, micro_batch=1, tp=2, sequence_parallel=True)
    assert {c["op"]: c["count"] for c in sp["collectives"]} == {"all_gather": 4, "reduce_scatter": 4}
    assert sp["elements_sent_per_device"] == pytest.approx(plain["elements_sent_per_device"])  # same bytes
    tp8 = parallel.tp_comm_elements_per_layer(cfg, micro_batch=2, tp=8)
    assert tp8["elements_sent_per_device"] == pytest.approx(8 * 7 / 8 * 2 * bsh)
    assert parallel.tp_comm_elements_per_layer(cfg, micro_batch=1, tp=1)["elements_sent_per_device"] == 0


def test_tp_time_goes_through_the_ring_model():
    cfg = preset("gpt2-124m").with_(seq_len=1024)
    t = parallel.tp_comm_time_per_layer(cfg, micro_batch=1, tp=4, alpha_s=1e-5, link_bytes_per_s=1e11)
    one = comm.collective_time("all_reduce", 1024 * 768 * 2, 4, alpha_s=1e-5, link_bytes_per_s=1e11)
    assert t == pytest.approx(4 * one)


def test_offload_bytes_by_hand():
    psi = 1e9
    z = parallel.offload_bytes_per_step(psi, dp=8, host_link_bytes_per_s=25e9)
    assert z["device_to_host_bytes"] == z["host_to_device_bytes"] == pytest.approx(2 * psi / 8)
    assert z["time_s"] == pytest.approx(2 * psi / 8 / 25e9)
    moments = parallel.offload_bytes_per_step(psi, dp=8, mode="adam-moments")
    assert moments["host_to_device_bytes"] == pytest.approx(8 * psi / 8)
    with pytest.raises(ParameterError, match="offload mode"):
        parallel.offload_bytes_per_step(psi, mode="nvme")


def test_moe_all_to_all_by_hand():
    one_way = 4096 * 4096 * 2 * 2  # tokens · h · k · e
    assert parallel.moe_all_to_all_bytes_per_layer(tokens=4096, hidden=4096, top_k=2) == 4 * one_way
    assert (
        parallel.moe_all_to_all_bytes_per_layer(tokens=4096, hidden=4096, top_k=2, backward=False)
        == 2 * one_way
    )
    even = parallel.moe_all_to_all_time(
        tokens=4096, hidden=4096, top_k=2, n_ranks=8, alpha_s=0.0, link_bytes_per_s=1e11
    )
    skewed = parallel.moe_all_to_all_time(
        tokens=4096, hidden=4096, top_k=2, n_ranks=8, alpha_s=0.0, link_bytes_per_s=1e11, imbalance=1.5
    )
    assert even["wait_s"] == 0 and even["mean_rank_s"] == pytest.approx(4 * one_way * 7 / 8 / 1e11)
    assert skewed["slowest_rank_s"] == pytest.approx(1.5 * even["mean_rank_s"])
    with pytest.raises(ParameterError, match="imbalance"):
        parallel.moe_all_to_all_time(
            tokens=1, hidden=1, top_k=1, n_ranks=2, alpha_s=0, link_bytes_per_s=1, imbalance=0.5
        )
