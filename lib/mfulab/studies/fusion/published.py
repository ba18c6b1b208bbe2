"""B5's size from a published measurement at the claim's model size (``stated.B5_PUBLISHED_PAIRS``),
read by id from chapter 10's published-runs file, where each row is cited and checked."""

from __future__ import annotations

from mfulab.paths import repo_root
from mfulab.studies.fusion.stated import B5_PUBLISHED_FILE, B5_PUBLISHED_PAIRS, B5_STATED_TIME_CUT
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def b5_published_claim() -> list[Claim]:
    """B5's size from the published measurement at its model size (``stated.B5_PUBLISHED_PAIRS``:
    torchtitan's Llama 3 8B on H100s, eager FSDP against FSDP + torch.compile, tokens/s per GPU):
    the step-time cut 1 − eager ÷ compiled; confirmed when every pair lies in the stated 8–12%,
    refuted when none does, not checkable when they disagree."""
    import yaml

    path = repo_root() / B5_PUBLISHED_FILE
    if not path.exists():
        return []
    rows = {r["id"]: r for r in yaml.safe_load(path.read_text())["runs"]}
    pairs = [(rows[e], rows[c]) for e, c in B5_PUBLISHED_PAIRS if e in rows and c in rows]
    if not pairs:
        return []
    lo, hi = B5_STATED_TIME_CUT
    cuts = [
        1 - e["published"]["tokens_per_s_per_gpu"] / c["published"]["tokens_per_s_per_gpu"] for e, c in pairs
    ]
    inside = [lo <= cut <= hi for cut in cuts]
    verdict = "confirmed" if all(inside) else "refuted" if not any(inside) else "not checkable"
    listed = "; ".join(
        f"{e['layout']['n_devices']} GPUs: {e['published']['tokens_per_s_per_gpu']:,} → "
        f"{c['published']['tokens_per_s_per_gpu']:,} tokens/s per GPU, a {cut:.1%} shorter step"
        for (e, c), cut in zip(pairs, cuts)
    )
    side = "above" if min(cuts) > hi else "below" if max(cuts) < lo else "across"
    return [
        Claim(
            "B5",
            "torch.compile cuts an 8B model's step time by 8–12%",
            f"{pairs[0][0]['citation']}: Llama 3 8B, FSDP eager vs FSDP + torch.compile, bf16, the same "
            "layout; the cut is 1 − eager ÷ compiled tokens/s",
            verdict,
            f"{listed}; the published cuts lie {side} the stated {lo:.0%}–{hi:.0%} (same sign, "
            f"{'a larger gain' if side == 'above' else 'a different size'} than the article's own 8B run)",
            basis=verdicts.PUBLISHED,
        )
    ]
