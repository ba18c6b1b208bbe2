"""Claims tables: one row per claim of ``docs/claims.md`` with a computed verdict.

A verdict is never typed in by hand: each study computes it from its own numbers and the
thresholds it states, with the helpers below, and the evidence string carries the numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mfulab.results import save_metrics, save_table

# "shown": a mechanism displayed in a toy regime, a property true by construction, or a descriptive
# claim (a breakdown exists, a quantity can be read off): nothing the claim's regime could fail.
# "not shown": the mechanism did not appear in the toy regime (which says nothing of the claim's).
# "(analysis)": decided by an analysis at the article's own configuration.
VERDICTS = (
    "confirmed",
    "refuted",
    "confirmed (analysis)",
    "refuted (analysis)",
    "inconclusive on this machine",
    "analytic only",
    "not checkable",
    "shown",
    "not shown",
)
# THE RULE (docs/claims.md): every verdict names its basis, and the basis sets the label.
MEASURED = "measured here"  # the claim's effect, measured on this machine in the claim's regime
PUBLISHED = "published measurement"  # a cited figure from a run the source describes
DOCUMENTED = "documented specification"  # a datasheet, a paper's stated design, a tool's documentation
ANALYSIS = "analysis at the article's configuration"  # the article's stated TP, SP, kernel, cluster
# an analysis where the article states no configuration of its own: published layouts, a range
# the sentence covers, inputs the row names (labelled as ANALYSIS is: "(analysis)")
ASSUMED = "analysis at assumed configurations"
ARITHMETIC = "the article's own arithmetic"  # its stated numbers, recomputed
TOY = "toy regime"  # a mechanism measured here outside the claim's regime (2 ranks, emulation, tiny sizes)
CONSTRUCTION = "by construction"  # a documented behaviour or an identity, counted exactly
STATEMENT = "the article's words alone"  # nothing to recompute or measure: an anecdote, a rule of thumb
BASES = (MEASURED, PUBLISHED, DOCUMENTED, ANALYSIS, ASSUMED, ARITHMETIC, TOY, CONSTRUCTION, STATEMENT)
ANALYSES = (ANALYSIS, ASSUMED)


def over_scenarios(answers) -> str:
    """THE RULE for an analytic row decided over scenarios (the stated case and a sensitivity
    table's variations, or every cluster size and batch a claim covers): each scenario answers
    the row's question yes (True), no (False) or neither (None: e.g. a tie, where the claim's
    quantity barely moves). ``confirmed`` when every scenario says yes, ``refuted`` when every
    one says no, ``analytic only`` otherwise: some scenario reverses the answer or leaves it
    open. :func:`label` adds the basis."""
    answers = _scenario_answers(answers, "over_scenarios")
    if all(a is True for a in answers):
        return "confirmed"
    return "refuted" if all(a is False for a in answers) else "analytic only"


def _scenario_answers(answers, rule: str) -> list:
    """The scenarios' answers as True / False / None, refused when there is none."""
    answers = [None if a is None else bool(a) for a in answers]
    if not answers:
        raise ValueError(f"{rule} needs at least one scenario's answer")
    return answers


def any_scenario(answers) -> str:
    """THE RULE for a claim of possibility ("can give", "may reach"), read over scenarios whose
    inputs all lie in stated or published ranges: one scenario where it happens is what the claim
    says. ``confirmed`` when some scenario says yes (True), ``refuted`` when every one says no,
    ``analytic only`` when none says yes and some leave it open (None). :func:`label` adds the
    basis; the row names the scenarios that say yes, so a reader can judge them."""
    answers = _scenario_answers(answers, "any_scenario")
    if any(a is True for a in answers):
        return "confirmed"
    return "refuted" if all(a is False for a in answers) else "analytic only"


def at_stated_case(stated, assumed) -> str:
    """THE RULE for an analytic row with one stated case (the article's own configuration) and a
    sensitivity table over the inputs the article leaves unstated (``assumed``: latencies, link
    figures, the GEMMs' share of MAMF, a kernel it does not name): the stated case's answer (True,
    False, or None when the model's error cannot tell) decides unless an assumed input reverses it
    (the opposite answer); a row in between does not reverse it. Rows that change the article's
    configuration itself (other flags, another sharding) are not inputs of the claim and are
    reported, not voted. ``confirmed``, ``refuted`` or ``analytic only``; :func:`label` adds the
    basis."""
    if stated is None:
        return "analytic only"
    stated = bool(stated)
    if any(a is not None and bool(a) != stated for a in assumed):
        return "analytic only"
    return "confirmed" if stated else "refuted"


def label(decision: str, basis: str) -> str:
    """The verdict a decision earns on its basis: in a toy regime or by construction a
    "confirmed" is only *shown* (and a toy "refuted" is *not shown*: the regime cannot refute
    the claim; an exact count can); an analysis's decision is marked "(analysis)"."""
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}; got {basis!r}")
    if basis == STATEMENT and decision != "not checkable":
        raise ValueError(f"a claim resting on {STATEMENT!r} can only be 'not checkable'; got {decision!r}")
    if basis in (TOY, CONSTRUCTION) and decision == "confirmed":
        return "shown"
    if basis == TOY and decision == "refuted":
        return "not shown"
    if basis in ANALYSES and decision in ("confirmed", "refuted"):
        return f"{decision} (analysis)"
    return decision


@dataclass(frozen=True)
class Claim:
    """One claims row. ``verdict`` is the decision its study computed; the row keeps
    :func:`label` of it under its ``basis`` (so a toy regime's "confirmed" reads "shown")."""

    id: str
    claim: str
    measured: str  # what was measured or computed
    verdict: str
    evidence: str  # the numbers, with their spread
    basis: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")
        object.__setattr__(self, "verdict", label(self.verdict, self.basis))
        analytic = self.verdict in ("confirmed (analysis)", "refuted (analysis)", "analytic only")
        if analytic != (self.basis in ANALYSES) and self.verdict != "not checkable":
            raise ValueError(f"{self.id}: verdict {self.verdict!r} does not go with basis {self.basis!r}")


def table(claims: list[Claim]):
    """The claims as a DataFrame (columns: id, claim, measured, verdict, basis, evidence)."""
    import pandas as pd

    return pd.DataFrame(
        [asdict(c) for c in claims], columns=["id", "claim", "measured", "verdict", "basis", "evidence"]
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


def evidence_parts(evidence: str) -> list[str]:
    """The evidence string cut into its clauses: at every "; " outside brackets (a clause's
    own parenthesis stays whole)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(evidence):
        depth += ch in "([" and 1 or -(ch in ")]")
        if depth <= 0 and evidence.startswith("; ", i):
            parts.append(evidence[start:i])
            start = i + 2
            depth = 0
    parts.append(evidence[start:])
    return [p.strip() for p in parts if p.strip()]


KEY_NUMBER_CHARS = 160  # the summary table's first clause of the evidence, cut to this


def _cell(text: str, limit: int | None = None) -> str:
    """Text for a markdown table cell: pipes escaped, one line, cut at ``limit`` with an ellipsis,
    at the last word boundary before it (a cut never splits a word or a number)."""
    text = " ".join(text.split()).replace("|", "\\|")
    if limit is None or len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:(") + " …"


def claims_markdown(claims: list[Claim]) -> str:
    """The claims as the chapter shows them. First a summary table a reader can scan: per row
    the id, verdict, basis, the article's sentence and the evidence's first clause (its key
    number). Then, folded, every row in full: the verdict sentence, its numbers as a list, one
    clause per line, and what was measured or computed last. The full table is
    ``tables/claims.csv``."""
    summary = ["| id | verdict | basis | the article says | key number |", "|---|---|---|---|---|"]
    blocks = []
    for c in claims:
        parts = evidence_parts(c.evidence)
        summary.append(
            f"| {c.id} | **{c.verdict}** | {c.basis} | {_cell(c.claim)} | "
            f"{_cell(parts[0] if parts else '', KEY_NUMBER_CHARS)} |"
        )
        head = f"**{c.id} · {c.verdict}** ({c.basis}): {c.claim}"
        lines = [f"- {part}" for part in parts]
        lines.append(f"- *how*: {c.measured}")
        blocks.append(head + "\n\n" + "\n".join(lines))
    return (
        "\n".join(summary)
        + "\n\n<details><summary>Every row in full: its numbers and how they were obtained</summary>\n\n"
        + "\n\n".join(blocks)
        + "\n\n</details>"
    )


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
    confirmed when lo ≥ threshold; refuted when hi < threshold and the interval excludes 1 (an
    effect smaller than claimed, or none in the claimed direction); otherwise inconclusive on
    this machine (an interval that holds 1 cannot tell a small effect from none)."""
    if lo >= threshold:
        return "confirmed"
    if hi < threshold and (hi < 1.0 or lo > 1.0):
        return "refuted"
    return "inconclusive on this machine"


def verdict_below(lo: float, hi: float, *, threshold: float) -> str:
    """For a claimed bound "ratio < threshold" (a gain too small to matter) measured as an
    interval [lo, hi] of the ratio: confirmed when hi < threshold, refuted when lo ≥ threshold,
    otherwise inconclusive on this machine."""
    if hi < threshold:
        return "confirmed"
    if lo >= threshold:
        return "refuted"
    return "inconclusive on this machine"


def verdict_under_ceiling(lo: float, ceiling_hi: float, *, threshold: float) -> str:
    """A claimed effect "ratio ≥ threshold" whose mechanism has a ceiling (the effect if the
    part it speeds up took no time at all, Amdahl): confirmed when the measured interval's lower
    bound ``lo`` reaches the threshold; refuted when even ``ceiling_hi``, the upper bound of the
    largest ceiling over every measured setting, stays below it (no speed-up of that part could
    deliver the claim); otherwise inconclusive on this machine."""
    if lo >= threshold:
        return "confirmed"
    if ceiling_hi < threshold:
        return "refuted"
    return "inconclusive on this machine"


def confirmable_bound(drift: float, claimed: float) -> float:
    """The smallest upper bound under which a size in ``[claimed, bound]`` can be confirmed at
    all: an interval at least ``(1 + drift)²`` wide (the run-to-run drift on each side) must fit."""
    return claimed * (1 + drift) ** 2


def verdict_in_range(lo: float, hi: float, *, claimed: float, bound: float, drift: float) -> str:
    """A claimed effect of at least ``claimed`` (a ratio) that a mechanism caps at ``bound``,
    from the drift-widened interval [lo, hi] of the measured ratio: confirmed only inside
    ``[claimed, bound]``; refuted below ``claimed`` (and not below 1.0); inconclusive when no
    interval can be confirmed (``bound`` < :func:`confirmable_bound`) or the interval lies where
    the mechanism cannot put it (above ``bound``, or wholly below 1.0: noise or another effect)."""
    if bound < confirmable_bound(drift, claimed) or lo > bound or hi < 1.0:
        return "inconclusive on this machine"
    if lo >= claimed and hi <= bound:
        return "confirmed"
    if hi < claimed:
        return "refuted"
    return "inconclusive on this machine"


def verdict_in_band(lo: float, hi: float, *, band: tuple[float, float], drift: float) -> str:
    """A claimed size pinned to ``band`` (a ratio range), from the drift-widened interval
    [lo, hi] of the measured ratio: refuted when it lies wholly below or wholly above the band;
    confirmed only when it lies inside the band widened by ``drift`` on each side (a size is
    confirmed by an interval that excludes other sizes, not by one that merely touches the
    band); otherwise inconclusive on this machine."""
    band_lo, band_hi = min(band), max(band)
    if hi < band_lo or lo > band_hi:
        return "refuted"
    tolerance = 1 + drift
    inside = lo >= band_lo / tolerance and hi <= band_hi * tolerance
    return "confirmed" if inside else "inconclusive on this machine"


# B2 (article B §1.2): where a step's lost time goes. The article draws the step as a pie of
# useful Tensor-Core time and four kinds of loss: 算子效率低 (slow operators: memory-bound or
# badly shaped kernels), 通信等待 (communication wait), 数据等待 (data wait) and 调度浪费
# (scheduling waste: synchronous checkpoints, throttled cards, poor CPU pinning). Compute is not
# a loss; only its part above the model FLOPs at the measured matmul ceiling is
# (:func:`b2_compute_split`). One vocabulary for every study that splits a step (mfu: one
# process; dataloader: a loader's wait; anatomy: DDP ranks), each study saying what it times under
# each name, and one rule for when the split is shown.
B2_USEFUL = "useful compute"  # the pie's first slice, not a loss
B2_CATEGORIES = ("slow operators", "communication wait", "data wait", "scheduling waste")
B2_MIN_PRESENT = 3  # of the four losses: fewer present, and the run cannot show a split
B2_PRESENT_SHARE = 0.01  # a loss is present at >= 1% of the step (every study's default floor)


def b2_compute_split(compute_s: float, model_flops: float, ceiling_flops_per_s: float) -> dict:
    """A step's compute time split into B2's useful compute and its *slow operators* loss:

        useful_s = min(compute_s, model_flops / ceiling_flops_per_s)
        slow_operators_s = compute_s - useful_s

    ``model_flops``: the model FLOPs the compute ran (the study's MFU convention);
    ``ceiling_flops_per_s``: the measured matmul ceiling of the cores or device that ran them.
    What a kernel loses below the ceiling (small shapes, non-matmul ops, launches, memory-bound
    attention) is the article's 算子效率低."""
    if compute_s < 0 or model_flops < 0 or not ceiling_flops_per_s > 0:
        raise ValueError(
            f"b2_compute_split: compute_s={compute_s}, model_flops={model_flops} must be >= 0 and "
            f"ceiling_flops_per_s={ceiling_flops_per_s} > 0"
        )
    useful_s = min(compute_s, model_flops / ceiling_flops_per_s)
    return {B2_USEFUL: useful_s, "slow operators": compute_s - useful_s}


def b2_verdict(present) -> str:
    """B2 is descriptive: its split is *shown* when at least :data:`B2_MIN_PRESENT` of the four
    losses :data:`B2_CATEGORIES` are present in the run (each at least its study's floor,
    :data:`B2_PRESENT_SHARE` by default);
    with fewer this run cannot reach the regime that shows it (inconclusive on this machine: the
    sentence itself is checkable, on a run with every category, as chapter 07's)."""
    unknown = set(present) - set(B2_CATEGORIES)
    if unknown:
        raise ValueError(f"not B2 categories: {sorted(unknown)} (B2_CATEGORIES: {B2_CATEGORIES})")
    return "shown" if len(set(present)) >= B2_MIN_PRESENT else "inconclusive on this machine"


def publish_claims(out_dir, claim_list, metrics: dict):
    """Save the claims table (``tables/claims.csv``) and the headline metrics; return the
    table for display."""
    df = table(claim_list)
    save_table(out_dir, "claims", df)
    save_metrics(out_dir, metrics)
    return df
