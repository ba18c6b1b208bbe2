"""One claim, several chapters: every claim id that more than one chapter judges, its rows side
by side on each machine, and the rows that disagree.

Two rows of one claim id from different chapters *disagree* when they rest on the same basis
and reach different verdicts, neither of which leaves the question open on this machine: the
same kind of evidence about one claim should tell the same thing (two analyses at the
article's configuration, one confirming and one finding a scenario that reverses it, cannot
both be the last word). *Inconclusive on this machine* and *not checkable* decide nothing, so
they disagree with no row: a run that lacks a claim's regime does not contradict one that has
it. Rows on different bases answer different questions (a toy regime shows a mechanism, the
article's own arithmetic checks its numbers, a published measurement settles a figure) and are
listed side by side, not flagged. A flagged pair may still test two sentences of one claim:
the table keeps both sentences so a reader can tell. Rows on one basis where one is open and the
other decided are marked apart (``open_beside``): one run lacks what the other had (chapter
01's single process shows one of B2's losses where 07's job shows more), which is no
contradiction, but a reader should see it.
"""

from __future__ import annotations

from collections import defaultdict

OPEN = ("inconclusive on this machine", "not checkable")  # verdicts that decide nothing


def _same_basis(items, study, c, n_open: int) -> list[str]:
    """The other chapters' rows on ``c``'s basis with another verdict, ``n_open`` of the two
    verdicts open (0: a disagreement; 1: one open beside one decided), as ``study: verdict``."""
    return [
        f"{s}: {o['verdict']}"
        for s, o in items
        if s != study
        and o.get("basis") == c.get("basis")
        and o["verdict"] != c["verdict"]
        and OPEN.count(o["verdict"]) + OPEN.count(c["verdict"]) == n_open
    ]


def across_chapters(records):
    """One row per (machine, claim id judged by ≥ 2 chapters, chapter row): the study, the
    claim's sentence, basis and verdict, and ``disagrees_with``: the other chapters' rows on the
    same basis with another verdict, neither of them open (``study: verdict``), empty where none."""
    import pandas as pd

    rows = []
    for machine in records["machines"]:
        by_id = defaultdict(list)
        for study, by_machine in records["metrics"].items():
            for c in (by_machine.get(machine) or {}).get("claims") or []:
                by_id[c["id"]].append((study, c))
        for claim_id, items in sorted(by_id.items()):
            if len({study for study, _ in items}) < 2:
                continue
            for study, c in items:
                others, beside = _same_basis(items, study, c, 0), _same_basis(items, study, c, 1)
                rows.append(
                    {
                        "machine": machine,
                        "claim_id": claim_id,
                        "study": study,
                        "claim": c["claim"],
                        "basis": c.get("basis", ""),
                        "verdict": c["verdict"],
                        "disagrees_with": "; ".join(dict.fromkeys(others)),
                        "open_beside": "; ".join(dict.fromkeys(beside)),
                    }
                )
    columns = ["machine", "claim_id", "study", "claim", "basis", "verdict", "disagrees_with", "open_beside"]
    return pd.DataFrame(rows, columns=columns)


def flagged_detail(records, table):
    """The rows of ``table`` (:func:`across_chapters`) that disagree, each with how its chapter
    judged it (the claim row's ``measured``: the configuration and the quantity), so a reader
    can tell two sentences or two configurations of one claim from a contradiction."""
    import pandas as pd

    flagged = table[table.disagrees_with != ""]
    rows = []
    for r in flagged.itertuples():
        claims = (records["metrics"].get(r.study, {}).get(r.machine) or {}).get("claims") or []
        how = next(
            (c.get("measured", "") for c in claims if c["id"] == r.claim_id and c["claim"] == r.claim), ""
        )
        rows.append(
            {
                "machine": r.machine,
                "claim_id": r.claim_id,
                "study": r.study,
                "claim": r.claim,
                "verdict": r.verdict,
                "how": how,
            }
        )
    return pd.DataFrame(rows, columns=["machine", "claim_id", "study", "claim", "verdict", "how"])


def across_note(table) -> str:
    """One sentence (markdown): how many claim ids several chapters judge, and which of them
    have rows that disagree on one basis."""
    if table.empty:
        return "No claim is judged by more than one chapter in these results."
    ids = sorted(set(table.claim_id))
    flagged = table[table.disagrees_with != ""]
    named = sorted(set(zip(flagged.machine, flagged.claim_id)))
    text = f"{len(ids)} claim ids are judged in more than one chapter ({', '.join(ids)})"
    beside = table[table.open_beside != ""]
    opened = sorted(set(zip(beside.machine, beside.claim_id)))
    open_text = (
        "; on the same basis, one chapter open where another decides (one run lacks what the other "
        "had, no contradiction): " + ", ".join(f"{cid} on {machine}" for machine, cid in opened)
        if opened
        else ""
    )
    if not named:
        return text + "; no two chapters reach different verdicts on the same basis" + open_text + "."
    listed = ", ".join(f"{cid} on {machine}" for machine, cid in named)
    return (
        text
        + f"; rows that disagree on the same basis: {listed} (both sentences are in the table)"
        + open_text
        + "."
    )
