"""Claims tables: one row per claim of ``docs/claims.md`` with a computed verdict.

A verdict is never typed in by hand: each study computes it from its own numbers and the
thresholds it states, with the helpers below, and the evidence string carries the numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# "shown": a descriptive claim (a breakdown exists, a quantity can be read off) that the run
# displays; there is no threshold to pass, so it is not "confirmed".
VERDICTS = ("confirmed", "refuted", "inconclusive on this machine", "analytic only", "not checkable", "shown")


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    measured: str  # what was measured or computed
    verdict: str
    evidence: str  # the numbers, with their spread

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")


def table(claims: list[Claim]):
    """The claims as a DataFrame (columns: id, claim, measured, verdict, evidence)."""
    import pandas as pd

    return pd.DataFrame(
        [asdict(c) for c in claims], columns=["id", "claim", "measured", "verdict", "evidence"]
    )


def summary_line(claims: list[Claim]) -> str:
    """The closing bullet of every notebook: each claim id with its verdict; an id with
    several rows (readings, cases) lists each row's verdict in table order."""
    by_id: dict[str, list[str]] = {}
    for c in claims:
        by_id.setdefault(c.id, []).append(c.verdict)
    parts = [
        f"**{cid}**: {vs[0]}" if len(vs) == 1 else f"**{cid}**: " + " / ".join(vs) + f" ({len(vs)} rows)"
        for cid, vs in by_id.items()
    ]
    return "* " + "; ".join(parts) + "."


def records(claims: list[Claim]) -> list[dict]:
    return [asdict(c) for c in claims]


def agrees(stated: float, recomputed: float, *, rel_tol: float) -> bool:
    """True when a stated figure matches our recomputation within ``rel_tol`` (relative)."""
    return abs(stated - recomputed) <= rel_tol * abs(recomputed)


def verdict_from_comparison(comparison, *, claimed: str) -> str:
    """For a claim that the candidate is ``claimed`` ("faster" or "slower") than the baseline,
    from a ``timing.Comparison``: confirmed when its interval says so, refuted when it says
    the opposite, otherwise inconclusive on this machine."""
    if claimed not in ("faster", "slower"):
        raise ValueError(f"claimed must be 'faster' or 'slower', got {claimed!r}")
    if comparison.verdict == claimed:
        return "confirmed"
    if comparison.verdict == "inconclusive":
        return "inconclusive on this machine"
    return "refuted"


def verdict_from_agreement(ok: bool) -> str:
    return "confirmed" if ok else "refuted"


def verdict_from_interval(lo: float, hi: float, *, threshold: float) -> str:
    """For a claimed effect "ratio ≥ threshold" measured as an interval [lo, hi] of the ratio:
    confirmed when lo ≥ threshold, refuted when hi < threshold or the interval excludes any
    effect in the claimed direction (hi ≤ 1), otherwise inconclusive on this machine."""
    if lo >= threshold:
        return "confirmed"
    if hi < threshold and (hi < 1.0 or lo > 1.0):
        return "refuted"
    return "inconclusive on this machine"
