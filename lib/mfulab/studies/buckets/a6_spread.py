"""A6's "the bucket size's effect on MFU can reach 5–8 points", per scenario of the sensitivity
table (``sensitivity``): decided on the step ratio, the quantity whose error the step model knows
(``studykit.step_error.SWITCH_MARGIN``), both ways alike."""

from __future__ import annotations

from mfulab.studies.buckets.stated import A6_MFU_POINTS, A6_PLAUSIBLE_CAPS_MIB
from mfulab.studykit.step_error import SWITCH_MARGIN


def spread_answer(mfu_by_model: dict, margin: float = SWITCH_MARGIN) -> bool | None:
    """A6's "can reach 5–8 points" in one scenario (``verdicts.any_scenario``), decided on the
    quantity the step model can be wrong about, a step ratio, both ways alike. Per model, over the
    plausible caps: the modelled ratio R = max ÷ min MFU (at fixed FLOPs, the slowest step over the
    fastest), and the smallest ratio the claim needs at that model's best MFU M,
    C = M ÷ (M − 5 points). A model says yes where R reaches C within the margin (R ≥ C ÷ (1 +
    margin)) and lies beyond the margin from 1 (a spread the model can tell from its own error;
    a spread past 8 points also "reaches" 5–8); no where even R × (1 + margin) stays below C; None
    otherwise. The scenario says yes when some model does, no when every model does."""
    lo_caps, hi_caps = A6_PLAUSIBLE_CAPS_MIB
    needed_points = A6_MFU_POINTS[0] / 100
    answers = []
    for mfu_by_cap in mfu_by_model.values():
        mfus = [m for c, m in mfu_by_cap.items() if lo_caps <= c <= hi_caps]
        best, worst = max(mfus), min(mfus)
        modelled = best / worst
        needed = best / (best - needed_points) if best > needed_points else float("inf")
        if modelled >= needed / (1 + margin) and modelled - 1 >= margin:
            answers.append(True)
        elif modelled * (1 + margin) < needed:
            answers.append(False)
        else:
            answers.append(None)
    if any(a is True for a in answers):
        return True
    return False if answers and all(a is False for a in answers) else None


def spread_in_claim(points: float) -> bool:
    """Whether a spread (MFU points) lies in the article's 5–8 points (rounded to a tenth: the
    article states whole points)."""
    lo, hi = A6_MFU_POINTS
    return bool(lo <= round(points, 1) <= hi)
