"""Claim A8 at the article's scale (7B, sequence 4096, batch 16: "activation memory −40%"),
analytically, and how much that comparison rests on assumptions the article does not state.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
Table 2: one layer keeps s·b·h·(34 + 5·a·s/h) bytes for backward (bf16, attention dropout
on, no tensor parallelism); with tensor parallelism t and no sequence parallelism,
s·b·h·(10 + 24/t + 5·a·s/(h·t)); with sequence parallelism every term is divided by t. A fused
(flash) kernel keeps none of the a·s² terms (scores, softmax output, dropout mask and output),
only a 4-byte log-sum-exp per row and head (``memory.activation_bytes_per_layer`` with
``attention="fused"``). Without
attention dropout the a·s² term is 2·a·s/h (the softmax output only) and the hidden dropouts
(after the attention projection and the MLP) keep their masks: 34 + 2·a·s/h. With *all*
dropout off (Table 2's GPT layer: GeLU MLP, LayerNorm; a SwiGLU layer keeps other bytes) the
two 1-byte hidden masks go as well: 32 + 2·a·s/h. Model states:
(2 + 2 + 12)·Ψ bytes for mixed-precision Adam (ZeRO, Rajbhandari et al. 2020, Fig. 1).
"""

from __future__ import annotations

import math

from mfulab.analytic import flops, memory
from mfulab.analytic.config import preset
from mfulab.studies.fusion.stated import (
    A8_MEMORY_TOLERANCE,
    A8_SENSITIVITY,
    A8_SETTING,
    A8_STATED,
    A8_STEP_ASSUMPTIONS,
    A8_STEP_CARDS,
    A8_STEP_DEVICE,
    A8_STEP_MARGIN,
)
from mfulab.studykit.step_error import reproduces_ratio
from mfulab.units import GB

BF16_BYTES = 2  # Table 2's element size
DROPOUT_SETTINGS = ("all", "hidden only", "none")  # which dropouts are on


def attention_dropout_bytes_per_layer(cfg, *, micro_batch: int, tp: int = 1) -> float:
    """Bytes attention dropout keeps per layer (Korthikanti Table 2's a·s² terms): its 1-byte
    mask and its bf16 output, a·s²·b·(1 + 2), split by heads over ``tp``."""
    s, a = cfg.seq_len, cfg.n_heads
    return a * s * s * micro_batch * (1 + BF16_BYTES) / tp


def _reading(
    *,
    micro_batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    dropout: str = "all",
    states: str = "none",
    zero1_devices: int = 1,
    recompute: str = "none",
) -> dict:
    """Per device: one layer's activations naive vs fused × layers, plus model states when
    ``states`` is "ZeRO-0" (one device holds all) or "ZeRO-1" (optimizer states over
    ``zero1_devices``); the cut the fused kernel makes. ``dropout``: "all" (Table 2 as printed), "hidden
    only" (attention dropout off: Table 2 less ``attention_dropout_bytes_per_layer``) or "none"
    (``memory.activation_bytes_per_layer(dropout=False)``: no mask anywhere). ``recompute``:
    "selective" recomputes the attention core in both (Korthikanti §4.2), so neither keeps a·s²
    terms and the fused kernel has nothing left to cut."""
    if dropout not in DROPOUT_SETTINGS:
        raise ValueError(f"dropout must be one of {DROPOUT_SETTINGS}, got {dropout!r}")
    cfg = preset(A8_SETTING["preset"]).with_(seq_len=A8_SETTING["seq_len"])
    kw = dict(
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sequence_parallel,
        dropout=dropout != "none",
        recompute=recompute,
    )
    attention_dropout_bytes = (
        attention_dropout_bytes_per_layer(cfg, micro_batch=micro_batch, tp=tp)
        if dropout == "hidden only" and recompute != "selective"
        else 0.0
    )
    naive_bytes = cfg.n_layers * (memory.activation_bytes_per_layer(cfg, **kw) - attention_dropout_bytes)
    fused_bytes = cfg.n_layers * memory.activation_bytes_per_layer(cfg, attention="fused", **kw)
    states_bytes = 0.0
    if states != "none":
        zero_stage, n = (0, 1) if states == "ZeRO-0" else (1, zero1_devices)
        states_bytes = memory.model_state_bytes_per_device(
            flops.param_count(cfg) / tp, n_devices=n, zero_stage=zero_stage
        )
    naive_total, fused_total = naive_bytes + states_bytes, fused_bytes + states_bytes
    return {
        "one_sequence_fits_card": fits_card(naive_bytes / micro_batch, tp),
        "naive_GB_per_sequence": naive_bytes / micro_batch / GB,
        "micro_batch": micro_batch,
        "tp": tp,
        "sequence_parallel": sequence_parallel,
        "attention_dropout": dropout == "all",
        "hidden_dropout": dropout != "none",
        "model_states": states if states != "ZeRO-1" else f"ZeRO-1 over {zero1_devices}",
        "recompute": recompute,
        "naive_GB_per_device": naive_total / GB,
        "fused_GB_per_device": fused_total / GB,
        "reduction": 1 - fused_total / naive_total,
    }


def fits_card(naive_bytes_per_sequence: float, tp: int) -> bool:
    """Whether a layout could have run the naive side of the comparison on the card the step row
    assumes (``A8_STEP_DEVICE``, ``A8_STEP_CARDS``): one sequence's naive activations per device
    plus the model states at that TP, the optimizer's sharded over the data-parallel ranks
    (ZeRO-1 over ``A8_STEP_CARDS // tp``, the most lenient common setting), within the card's
    memory (devices.yaml). A layout that cannot hold one sequence cannot be the article's."""
    from mfulab.analytic.devices import device_spec

    cfg = preset(A8_SETTING["preset"]).with_(seq_len=A8_SETTING["seq_len"])
    states = memory.model_state_bytes_per_device(
        flops.param_count(cfg) / tp, n_devices=max(1, A8_STEP_CARDS // tp), zero_stage=1
    )
    return naive_bytes_per_sequence + states <= device_spec(A8_STEP_DEVICE).memory_bytes


def article_scale() -> dict:
    """A8 at the article's setting by Table 2's count (its 34·s·b·h generalised to the model's
    SwiGLU MLP: 34.1 for Llama-2-7B's d_ff): activations per layer naive vs
    fused, the same with model states on one device, and the attention matmuls' FLOPs share."""
    cfg = preset(A8_SETTING["preset"]).with_(seq_len=A8_SETTING["seq_len"])
    batch = A8_SETTING["micro_batch"]
    naive = memory.activation_bytes_per_layer(cfg, micro_batch=batch)
    fused = memory.activation_bytes_per_layer(cfg, micro_batch=batch, attention="fused")
    states = memory.model_state_bytes_per_device(flops.param_count(cfg), n_devices=1, zero_stage=0)
    total_naive = cfg.n_layers * naive + states
    total_fused = cfg.n_layers * fused + states
    return {
        "per_layer_naive_bytes": naive,
        "per_layer_fused_bytes": fused,
        "activation_reduction": 1 - fused / naive,
        "with_model_states_reduction": 1 - total_fused / total_naive,
        "model_states_bytes": states,
        "attention_flops_share_palm": flops.attention_flops_share(cfg, convention="palm"),
    }


def sensitivity():
    """The cut the fused kernel makes under each reading of the article's setting (module docstring and
    ``stated.A8_SENSITIVITY``), one assumption varied at a time around the central reading,
    plus the combination with the smallest cut; ``vs_stated`` is the cut minus the stated 40%."""
    import pandas as pd

    batch = A8_SETTING["micro_batch"]
    big_tp = max(A8_SENSITIVITY["tensor_parallel"])
    cases = [("central: Table 2 as printed, activations only", {"micro_batch": batch})]
    cases += [("attention dropout off, hidden dropout on", {"micro_batch": batch, "dropout": "hidden only"})]
    cases += [("all dropout off (GPT layer, Table 2)", {"micro_batch": batch, "dropout": "none"})]
    cases += [
        (f"TP {t}, no sequence parallelism", {"micro_batch": batch, "tp": t})
        for t in A8_SENSITIVITY["tensor_parallel"]
    ]
    cases += [
        (
            f"TP {big_tp} with sequence parallelism",
            {"micro_batch": batch, "tp": big_tp, "sequence_parallel": True},
        )
    ]
    cases += [
        (
            f"TP {big_tp}, no sequence parallelism, {what}",
            {"micro_batch": batch, "tp": big_tp, "dropout": setting},
        )
        for what, setting in (
            ("attention dropout off", "hidden only"),
            ("all dropout off (GPT layer, Table 2)", "none"),
        )
    ]
    # a baseline that already recomputes the attention core (Megatron's selective recompute) keeps
    # no a·s² terms for the fused kernel to remove
    cases += [
        (f"selective recompute in both{where}", {"micro_batch": batch, "recompute": "selective", **extra})
        for where, extra in (("", {}), (f", TP {big_tp}, no sequence parallelism", {"tp": big_tp}))
    ]
    for b in (batch, *A8_SENSITIVITY["micro_batches"]):
        cases += [
            (f"model states counted (one device), micro-batch {b}", {"micro_batch": b, "states": "ZeRO-0"})
        ]
    n = A8_SENSITIVITY["zero1_devices"]
    cases += [
        (
            f"model states counted (ZeRO-1 over {n}), micro-batch 1",
            {"micro_batch": 1, "states": "ZeRO-1", "zero1_devices": n},
        )
    ]
    # article A §3.2's fused operator can fuse the dropout and the mask; whether its 7B run trained
    # with dropout is not stated (Llama-family 7B models train without it): every reading counts
    rows = [
        {"reading": what, **_reading(**kw), "dropout_off": kw.get("dropout", "all") != "all"}
        for what, kw in cases
    ]
    df = pd.DataFrame(rows)
    df["vs_stated"] = df.reduction - A8_STATED["activation_reduction"]
    return df


def _cut(reduction: float) -> str:
    """A cut in memory as the sentence writes it: "−38%", or "0%" where nothing is cut."""
    return f"−{reduction:.0%}" if round(reduction, 2) > 0 else "0%"


def memory_answers(df) -> list:
    """Per activation-only reading whose layout can hold one sequence on the card
    (``one_sequence_fits_card``): whether its cut reproduces the stated one within
    ``A8_MEMORY_TOLERANCE`` (the answers ``verdicts.over_scenarios`` decides A8's memory row on)."""
    stated = A8_STATED["activation_reduction"]
    voting = df[(df.model_states == "none") & df.one_sequence_fits_card]
    return [abs(r - stated) <= A8_MEMORY_TOLERANCE for r in voting.reduction]


def sensitivity_sentence(df=None) -> str:
    """What the table says about the stated −40%, on the claim's own quantity, activation memory:
    per activation-only reading that fits the card, its cut and whether it lies within
    ``A8_MEMORY_TOLERANCE`` of the stated one; the readings that cannot hold one sequence on the
    card and those that count model states (another quantity) beside them as context."""
    df = sensitivity() if df is None else df
    stated = A8_STATED["activation_reduction"]
    acts = df[df.model_states == "none"]
    voting, unfit = acts[acts.one_sequence_fits_card], acts[~acts.one_sequence_fits_card]
    with_states = df[df.model_states != "none"]
    near = voting[(voting.reduction - stated).abs() <= A8_MEMORY_TOLERANCE]
    far = voting.drop(near.index)
    return (
        f"activations alone, the claim's quantity, in the {len(voting)} readings whose layout holds one "
        f"sequence on a {A8_STEP_DEVICE} card: within {A8_MEMORY_TOLERANCE * 100:.0f} points of the stated "
        f"−{stated:.0%} under "
        + (" and ".join(f"“{r.reading}” ({_cut(r.reduction)})" for r in near.itertuples()) or "none")
        + "; beyond it under "
        + (", ".join(f"“{r.reading}” ({_cut(r.reduction)})" for r in far.itertuples()) or "none")
        + f"; the {len(unfit)} readings that cannot hold one sequence ("
        + " and ".join(f"TP {t}" for t in sorted(set(unfit.tp)))
        + f": not the article's setup, not voted) give {_cut(unfit.reduction.min())} to "
        f"{_cut(unfit.reduction.max())}" + "; counting model states too (another quantity, context only): "
        f"{_cut(with_states.reduction.min())} to {_cut(with_states.reduction.max())}"
    )


def step_table():
    """A8's step time, naive against fused attention, on the course's step model
    (``step.step_time``, its memory-bound attention terms included) at ``A8_STEP_CARDS`` of
    ``A8_STEP_DEVICE``: one row per reading (TP × micro-batch; the global batch is the article's
    batch of 16 sequences, as micro-batches accumulated, or one micro-batch per DP rank where that
    is more),
    then the step model's assumed inputs varied at the central reading that fits (TP 8,
    micro-batch 2: ``A8_STEP_ASSUMPTIONS``). Each row: both steps, the cut 1 − fused ÷ naive,
    whether both fit the card, and whether the cut reproduces the stated −18% (True within
    ``A8_STEP_MARGIN`` of it, relative; False beyond twice that; None between)."""
    import pandas as pd

    from mfulab.analytic import step

    cfg = preset(A8_SETTING["preset"]).with_(seq_len=A8_SETTING["seq_len"])
    stated = A8_STATED["step_time_reduction"]
    cases = [
        ("reading", "", tp, mb, {})
        for tp in (1, *A8_SENSITIVITY["tensor_parallel"])
        for mb in (A8_SETTING["micro_batch"], *A8_SENSITIVITY["micro_batches"])
    ]
    cases += [(name, f"{value:g}", 8, 2, {key: value}) for name, key, value in A8_STEP_ASSUMPTIONS]
    rows = []
    for varied, value, tp, mb, assumed in cases:
        dp = A8_STEP_CARDS // tp
        global_batch = mb * dp * math.ceil(A8_SETTING["micro_batch"] / (mb * dp))
        kw = {
            "n_devices": A8_STEP_CARDS,
            "tp": tp,
            "micro_batch": mb,
            "global_batch": global_batch,
            **assumed,
        }
        naive, fused = (
            step.step_time(cfg, **kw, device=A8_STEP_DEVICE, attention=a, dropout=True)
            for a in ("naive", "fused")
        )
        cut = 1 - fused["step_s"] / naive["step_s"]
        # the course's rule for a modelled ratio against an article's, on the naive/fused step ratio;
        # a stated ratio inside the margin from 1 cannot be told from no cut at all
        stated_ratio = 1 / (1 - stated)
        reproduces = (
            reproduces_ratio(naive["step_s"] / fused["step_s"], stated_ratio, A8_STEP_MARGIN)
            if stated_ratio - 1 > A8_STEP_MARGIN
            else f"cannot tell (inside ±{A8_STEP_MARGIN:.0%})"
        )
        rows.append(
            {
                "varied": varied,
                "value": value,
                "tp": tp,
                "micro_batch": mb,
                "global_batch": global_batch,
                "naive_step_s": naive["step_s"],
                "fused_step_s": fused["step_s"],
                "step_cut": cut,
                "fits": bool(naive["fits"] and fused["fits"]),
                "reproduces": reproduces,
            }
        )
    return pd.DataFrame(rows)


def a8_step_claim(table):
    """A8's "step time −18%" on :func:`step_table`. The layouts that fit the card are the stated
    case (the article names none, so each is a reading of it; ``verdicts.over_scenarios`` over
    them: yes when each reproduces the cut, no when none does); the step model's assumed inputs
    (HBM efficiency, backward traffic, GEMM share) vary it by ``verdicts.at_stated_case``, the
    course's rule for unstated inputs: only an input that gives the opposite answer reverses it.
    That decides only when the stated cut, as a naive/fused step ratio, lies beyond the decisive
    margin (the model's error on the ratio of two modelled runs); inside it the row is analytic
    only. Readings that do not fit are shown, not voted."""
    from mfulab.studykit import verdicts
    from mfulab.studykit.verdicts import Claim

    fitting = table[table.fits]
    stated = A8_STATED["step_time_reduction"]
    if not len(fitting):
        return []
    readings = fitting[fitting.varied == "reading"]
    assumed = fitting[fitting.varied != "reading"]
    others = table[~table.fits]
    # the margin is the model's error on the ratio of two modelled steps: a stated cut whose
    # naive/fused ratio lies inside it cannot be told from no cut, whatever the rows say
    stated_ratio = 1 / (1 - stated)
    ratio, margin = stated_ratio, A8_STEP_MARGIN
    decidable = stated_ratio - 1 > A8_STEP_MARGIN
    verdict = (
        verdicts.at_stated_case(
            {"confirmed": True, "refuted": False}.get(verdicts.over_scenarios(list(readings.reproduces))),
            list(assumed.reproduces),
        )
        if decidable
        else "analytic only"
    )
    undecidable_note = (
        ""
        if decidable
        else f"; the stated cut is a naive/fused step ratio of {stated_ratio:.2f}×, inside the step model's "
        f"±{A8_STEP_MARGIN:.0%} on the ratio of two modelled runs (studykit.step_error): the model cannot "
        "tell it from no cut, so the rows inform and do not decide"
    )
    return [
        Claim(
            "A8",
            f"7B, seq 4096, batch 16: step time −{stated:.0%} with fused attention (on {A8_STEP_CARDS} "
            "cards: assumed, the article gives no card count)",
            f"the step model on {A8_STEP_CARDS} {A8_STEP_DEVICE} cards (devices.yaml), naive against fused "
            "attention, over TP 1, 2, 8 and micro-batch 16, 2, 1, and its assumed HBM efficiency, backward "
            "traffic and GEMM share; the layouts that fit the card are the stated case, each must "
            f"reproduce the cut as a naive/fused step ratio ({ratio:.2f}×, within ±{margin:.0%}: "
            f"{ratio / (1 + margin):.2f}–{ratio * (1 + margin):.2f}×, and beyond ±{margin:.0%} from 1; "
            "beyond the band it misses), and an assumed input reverses that only with the opposite answer",
            verdict,
            (
                ""
                if decidable
                else f"the model cannot tell a {stated_ratio:.2f}× step ratio from 1.00× "
                f"(±{A8_STEP_MARGIN:.0%} on a switch), so these cuts are sizes, not agreement: "
            )
            + "modelled cut "
            + ", ".join(
                f"{r.step_cut:.0%} (TP {r.tp}, micro-batch {r.micro_batch}, {r.global_batch} sequences a "
                f"step: {r.naive_step_s:.2f} → {r.fused_step_s:.2f} s)"
                for r in readings.itertuples()
            )
            + f" in the readings that fit the card; {_cut_range(assumed)} over the assumed inputs ("
            + ", ".join(f"{r.varied} {r.value}: {r.step_cut:.0%}" for r in assumed.itertuples())
            + ")"
            + (
                f"; {_cut_range(others)} in the {len(others)} readings that do not fit (not voted)"
                if len(others)
                else ""
            )
            + ": naive attention's memory-bound softmax, masking and dropout over a·s² elements, more "
            "than its matmuls, make up the difference" + undecidable_note,
            basis=verdicts.ASSUMED,  # card count, TP and micro-batch: the article states none
        )
    ]


def _cut_range(df) -> str:
    lo, hi = df.step_cut.min(), df.step_cut.max()
    return f"{lo:.0%}–{hi:.0%}" if round(lo, 2) != round(hi, 2) else f"{lo:.0%}"
