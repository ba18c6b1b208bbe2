"""Article A §6.1's 8-card advice set against the planner's 8-card rows
(``planner_at_scale.planner_answers``)."""

from __future__ import annotations


def eight_card_text(eight) -> str:
    """Article A §6.1's "on one 8-card machine TP 8, PP 1 is usually best", set against the planner's
    8-card rows (``planner_answers``): within Megatron-Core's layouts (the article's framework) a
    layout comparison, against ±``LAYOUT_MARGIN``; against the best of any framework a switch,
    against ±``SWITCH_MARGIN``. Context, not a verdict."""
    from mfulab.studykit.step_error import LAYOUT_MARGIN, SWITCH_MARGIN

    within = ", ".join(f"{r.tp8_pp1_over_best_megatron:.2f}× on the {r.device}" for r in eight.itertuples())
    beyond = (eight.tp8_pp1_over_best_megatron > 1 + LAYOUT_MARGIN).all()
    inside = (eight.tp8_pp1_over_best_megatron <= 1 + LAYOUT_MARGIN).all()
    any_framework = ", ".join(
        f"{r.tp8_pp1_over_best:.2f}× the best ({r.layout}) on the {r.device}" for r in eight.itertuples()
    )
    switch_inside = (eight.tp8_pp1_over_best <= 1 + SWITCH_MARGIN).all()
    return (
        f"On 8 cards, within Megatron-Core's layouts the best TP 8 · PP 1 step is {within} the best "
        f"Megatron-Core layout: against the model's ±{LAYOUT_MARGIN:.0%} for two layouts, "
        + (
            "beyond it on every card, so at the article's 13B and batch the model does not pick TP 8 · PP 1"
            if beyond
            else "inside it on every card: the model cannot tell the layouts apart"
            if inside
            else "beyond it on some card and inside on another"
        )
        + f". Against the best layout of any framework it is {any_framework}: that best changes the "
        f"framework too, a switch, {'inside' if switch_inside else 'beyond'} the ±{SWITCH_MARGIN:.0%} "
        'margin for one. Context, not a verdict: the article\'s "usually" is about 8-card machines in '
        "general."
    )
