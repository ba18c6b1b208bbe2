"""B13's sentences that no run here can time (no GPU clock): the article's own clock figures against
each other (the article's arithmetic), its advice to lock the SM clock against NVML's
documentation of the call (documented specification), and the stable speed it promises (not
checkable: no spread is shown)."""

from __future__ import annotations

from mfulab.studies.anatomy.stated import B13_CLOCK_LOCK, B13_STATED
from mfulab.studykit import verdicts
from mfulab.studykit.verdicts import Claim


def b13_clock_claim() -> Claim:
    """Article B §4.2's own numbers, checked against each other: an SM clock from 1410 to 1200 MHz
    and a step 8% slower. A step wholly bound to the SM clock would take 1410 / 1200 as long; the
    8% may not pass that (refuted where it does). Below it the figures are consistent, but the
    arithmetic cannot confirm a measured 8%: not checkable, with the share of the step that must
    have followed the clock (0.08 over that bound's excess; the rest, HBM and communication, does
    not follow the SM clock)."""
    s = B13_STATED
    bound = s["sm_clock_from_mhz"] / s["sm_clock_to_mhz"] - 1
    share = s["card_slowdown"] / bound
    return Claim(
        "B13",
        f"an SM clock dropped from {s['sm_clock_from_mhz']} to {s['sm_clock_to_mhz']} MHz made that card's "
        f"step {s['card_slowdown']:.0%} slower",
        "the article's own figures against each other: a step wholly bound to the SM clock takes the "
        "clocks' ratio as long; the stated slowdown may not pass it",
        "not checkable" if s["card_slowdown"] <= bound else "refuted",
        f"{s['sm_clock_from_mhz']} / {s['sm_clock_to_mhz']} = {1 + bound:.3f}: a step wholly bound to the SM "
        f"clock would be {bound:.1%} slower; {s['card_slowdown']:.0%} means {share:.0%} of the step followed "
        "the SM clock and the rest (HBM traffic, communication, the host) did not; consistent with the "
        "clocks, which can only rule it out, not confirm it",
        basis=verdicts.ARITHMETIC,
    )


def b13_lock_claim() -> Claim:
    """The article's advice to lock the SM clock (``stated.B13_CLOCK_LOCK``), on the mechanism,
    against NVML's documentation of the call (documented specification: confirmed where the
    command pins the clock as the article says)."""
    c = B13_CLOCK_LOCK
    return Claim(
        "B13",
        f"`{c['command']}` locks the SM clock (admin rights needed; where temperature and power "
        "margins allow)",
        "NVML's documentation of the call nvidia-smi -lgc makes (nvmlDeviceSetGpuLockedClocks)",
        "confirmed",
        "the call sets the range the GPU clock runs in, documented as 'a setting to request constant "
        "performance', for root/admin only and reset by a reboot or a driver reload, as the article says. "
        "nvidia-smi's help writes the range as a pair <minGpuClock,maxGpuClock> (1410,1410 pins it); the "
        "single value the article writes is in common use, and which driver versions accept it was not "
        f"checked here. {c['boost_clock_mhz']} MHz is the A100 SXM's maximum boost clock, so the lock pins "
        "the card at its top clock, where the boost algorithm no longer moves it; power or thermal limits "
        "still can (the article's caveat): a lock at the top clock removes the boost's variation, it does "
        "not stop the thermal drop to 1200 MHz of the article's own anecdote",
        basis=verdicts.DOCUMENTED,
    )


def b13_stable_claim() -> Claim:
    """The effect the article promises from the lock, a stable and predictable training speed:
    the case study shows its step before and after (8.4 → 8.5 s) but no spread, and no run here
    has a GPU clock, so not checkable."""
    c = B13_CLOCK_LOCK
    change = c["step_after_s"] / c["step_before_s"] - 1
    return Claim(
        "B13",
        "with the SM clock locked, training speed is stable and predictable",
        "the case study's step 5 before and after; the article shows no step-to-step spread",
        "not checkable",
        f"the case study's step went {c['step_before_s']:g} → {c['step_after_s']:g} s ({change:+.1%}) when "
        "clocks were locked, 'stable near 8.5 s' by its account; no spread before or after is shown, and no "
        "run here has a GPU clock to lock",
        basis=verdicts.STATEMENT,
    )


def symptom_text(per_rank, records) -> str:
    """The split books a loss by its symptom on each rank, not by its cause: B13's straggler (the
    article files a throttled card under scheduling waste) shows as communication wait on every
    healthy rank (``analysis.straggler_table``)."""
    if per_rank is None or not len(per_rank):
        return ""
    slow = records["job"]["straggler"]["rank"]
    t = per_rank.set_index(["straggler", "rank"])["communication wait"]
    healthy = [r for r in sorted(per_rank["rank"].unique()) if r != slow]
    waits = ", ".join(f"rank {r} {t[('off', r)] * 1e3:.1f} → {t[('on', r)] * 1e3:.1f} ms" for r in healthy)
    return (
        ". The split books a loss by its symptom on each rank, not by its cause: B13's straggler (the "
        "article files a throttled card under scheduling waste) raises the healthy ranks' communication "
        f"wait ({waits} per step), so a communication wait is read beside the ranks' arrival skew before the "
        "network is blamed"
    )
