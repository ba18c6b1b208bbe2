"""The verdict matrix of the comparison: every claims row of every study, one column per
machine, what differs between machines, what flipped between fresh runs of one, and which
machines cannot be compared on a row (a run with more ranks than usable cores)."""

from __future__ import annotations

from mfulab.studies.compare import hosts
from mfulab.studies.compare.drift import MISSING
from mfulab.studykit import verdicts as verdict_rules
from mfulab.studykit.stability_report import numbered_ids

# bases another machine could change (a measurement taken there, including the timing that sizes
# a documented behaviour, by construction, and leaves it open where it disagrees); the others
# read the same anywhere
MACHINE_BASES = (verdict_rules.MEASURED, verdict_rules.TOY, verdict_rules.CONSTRUCTION)


def verdict_table(records):
    """Every claims row of every study, one column per machine: its verdict there (*missing*
    where the machine has no results of the study, or not that row), its basis, the claim;
    ``differs`` marks a row whose verdict is not the same on every machine that has it, and
    ``flipped on`` names the machines whose stability run saw it flip between fresh runs (a
    flipped verdict on one machine is no evidence of a difference between machines)."""
    import pandas as pd

    names = records["machines"]
    rows: dict = {}
    for study, by_machine in records["metrics"].items():
        for machine in names:
            claims = (by_machine.get(machine) or {}).get("claims") or []
            seen: dict = {}
            for label, c in zip(numbered_ids(x["id"] for x in claims), claims):  # as stability names them
                # joined on the claim's own words, not its position (round thirty-one's reader of
                # chapter 11: a row added at other code shifted every "B11 (n)" after it)
                words = (c["id"], c["claim"])
                seen[words] = seen.get(words, 0) + 1
                row = rows.setdefault(
                    (study, *words, seen[words]),
                    {
                        "study": study,
                        "claim_id": label,
                        "claim": c["claim"],
                        # what the row rests on, from the first machine that has it (the full text is
                        # the study's tables/claims.csv)
                        "evidence": _short(c.get("evidence", "")),
                        "labels": {},
                        "bases": {},
                    },
                )
                row[machine], row["labels"][machine] = c["verdict"], label
                row["bases"][machine] = c.get("basis", "")
    out = []
    for (study, *_), row in rows.items():
        labels, bases = row.pop("labels"), row.pop("bases")
        verdicts = {m: row.get(m, MISSING) for m in names}
        # each machine's verdict under its own basis (they differ only where the code did)
        basis = " | ".join(f"{m}: {b}" for m, b in bases.items()) if len(set(bases.values())) > 1 else ""
        basis = basis or next(iter(bases.values()))
        on_machine = any(b in MACHINE_BASES for b in bases.values())
        crowded = hosts.oversubscribed(records, study) if on_machine else []  # ranks taking turns
        present = {v for m, v in verdicts.items() if v != MISSING and m not in crowded}
        every = {v for v in verdicts.values() if v != MISSING}
        flips = records.get("flips", {}).get(study, {})
        flipped = [m for m in labels if labels[m] in flips.get(m, [])]
        runs = (records.get("stability_runs") or {}).get(study)
        unknown = [] if runs is None else [m for m in names if m not in runs and verdicts[m] != MISSING]
        code = other_code(records, study, [m for m in names if verdicts[m] != MISSING])
        out.append(
            {
                **row,
                "basis": basis,
                **verdicts,
                # a verdict that differs where the study's code differs may be the code's doing: such a
                # row is not compared ("n/a"), which is not "the same"
                "differs": "n/a (other code)" if code and len(every) > 1 else len(present) > 1 and not code,
                "other code": code,
                "flipped on": ", ".join(flipped),
                "no stability run on": ", ".join(unknown),
                "not comparable on": ", ".join(crowded),
                "differs only where not comparable": len(present) <= 1 < len(every),
                "rests on the machine": on_machine,
            }
        )
    columns = ["study", "claim_id", "claim", "basis", *names, "differs", "other code", "flipped on"]
    columns += ["no stability run on", "not comparable on", "differs only where not comparable"]
    columns += ["rests on the machine", "evidence"]
    return pd.DataFrame(out, columns=columns)


def differing(table):
    """The rows whose verdict differs between machines that ran the same code (``differs`` is
    True; "n/a (other code)" and False are not)."""
    return table.differs.apply(lambda x: x is True)


def other_code(records, study: str, machines: list[str]) -> str:
    """The machines whose results of ``study`` ran at other code than the rest (``hosts.revisions``:
    the library and notebook digest), each with its commit; empty where all ran one revision."""
    revs = {m: ((records.get("revisions") or {}).get(m) or {}).get(study) for m in machines}
    digests = {r["digest"] for r in revs.values() if r}
    if len(digests) <= 1:
        return ""
    return ", ".join(f"{m} at {r['commit']}" for m, r in revs.items() if r)


EVIDENCE_CHARS = 200  # the evidence column's excerpt; the full text is in each study's claims.csv


def _short(text: str) -> str:
    """The first :data:`EVIDENCE_CHARS` characters of a row's evidence, cut at a word."""
    text = str(text)
    if len(text) <= EVIDENCE_CHARS:
        return text
    return text[:EVIDENCE_CHARS].rsplit(" ", 1)[0] + " …"


def verdict_note(table, names, records=None) -> str:
    """What the verdict matrix says in one sentence (markdown); with ``records``, how many fresh
    runs the stability runs took."""
    if table.empty:
        return "No study has written a claims table yet."
    differs = table[differing(table)]
    flipped = table[table["flipped on"] != ""]
    bound = table[table["rests on the machine"]]
    parts = [
        f"{len(table)} claims rows over {len(names)} machine{'s' * (len(names) != 1)}, "
        f"{len(bound)} of them resting on a measurement taken on the machine (toy regime "
        f"{int((bound.basis == verdict_rules.TOY).sum())}, the claim's regime "
        f"{int((bound.basis == verdict_rules.MEASURED).sum())}, by construction "
        f"{int((bound.basis == verdict_rules.CONSTRUCTION).sum())}): only those could change on another "
        "machine; the rest are analysis, arithmetic, documentation or publications"
    ]
    if len(names) > 1:
        named = ", ".join(f"{study} {cid}" for study, cid in zip(differs.study, differs.claim_id))
        parts.append(
            f"{len(differs)} with a different verdict on machines that ran the same code"
            + (f": {named}" if named else "")
        )
        code = table[table["other code"] != ""]
        if len(code):
            studies = ", ".join(sorted(set(code.study)))
            changed = code[code.differs == "n/a (other code)"]
            listed = ", ".join(f"{study} {cid}" for study, cid in zip(changed.study, changed.claim_id))
            parts.append(
                f"{len(code)} row{'s' * (len(code) != 1)} of studies whose machines ran different code "
                f"({studies}; column `other code`) are not compared: a verdict there may differ because "
                f"the code did, and {len(changed)} of them do read differently across the revisions"
                + (f" ({listed})" if listed else "")
                + "; nothing in them isolates the hardware until the machines run one commit"
            )
    named = ", ".join(
        f"{study} {cid} (on {where})"
        for study, cid, where in zip(flipped.study, flipped.claim_id, flipped["flipped on"])
    )
    sizes = sorted(
        {n for by_machine in (records or {}).get("stability_sizes", {}).values() for n in by_machine.values()}
    )
    how = (
        " (`make stability`: " + "/".join(str(n) for n in sizes) + " fresh processes per study and machine, "
        "a flip being any row whose verdict was not the same in all of them)"
        if sizes
        else ""
    )
    parts.append(
        f"{len(flipped)} that flipped between fresh runs of one machine{how}"
        + (f": {named}" if named else "")
    )
    unknown = sorted({m for cell in table["no stability run on"] for m in cell.split(", ") if m})
    if unknown:
        parts.append(
            "whether a verdict flips is unknown on "
            + ", ".join(unknown)
            + " for the studies that machine ran without a stability run (column `no stability run on`)"
        )
    crowded = table[table["not comparable on"] != ""]
    if len(crowded):
        only = table[table["differs only where not comparable"]]
        named = ", ".join(f"{study} {cid}" for study, cid in zip(only.study, only.claim_id))
        parts.append(
            f"{len(only)} more differ only where a machine's run was oversubscribed ({named or 'none'}); "
            f"{len(crowded)} row{'s' * (len(crowded) != 1)} measured on a machine whose run had more ranks "
            "than usable cores "
            "(column `not comparable on`) are left out of `differs`"
        )
    return "; ".join(parts) + "."


def machine_bound(table):
    """The rows that rest on a measurement taken on the machine (the only ones another machine
    could change), without the column that says so and the evidence excerpt: the matrix a reader
    compares machines on."""
    bound = table[table["rests on the machine"]]
    return bound.drop(columns=["rests on the machine", "evidence"]).reset_index(drop=True)


def other_rows_html(table) -> str:
    """The rows whose basis reads the same wherever the course is rendered (analysis, the
    article's arithmetic, documentation, publications), collapsed: a ``<details>`` block with
    their table, the full matrix being ``tables/verdicts.csv``."""
    rest = table[~table["rests on the machine"]]
    if rest.empty:
        return ""
    dropped = ("rests on the machine", "evidence", "not comparable on", "differs only where not comparable")
    keep = [c for c in rest.columns if c not in dropped]
    return (
        f"<details><summary>The other {len(rest)} rows (analysis, the article's arithmetic, "
        "documentation, publications: the same on every machine by their basis; all rows with their "
        "evidence are in <code>tables/verdicts.csv</code>)</summary>"
        + rest[keep].to_html(index=False, escape=True)
        + "</details>"
    )
