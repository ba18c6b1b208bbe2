"""The pages of the course site that are not notebooks, and the notebooks as the site shows
them.

``build.build_site`` stages one machine's book in a temporary folder: each study's executed
notebook, cleaned by :func:`stage_notebook` (progress bars and stderr left out, code folded,
a note naming the machine and commit that produced it), the landing page
(:func:`landing_page`) and the claims overview (:func:`claims_page`), all in the registry's
course order. Everything here reads ``results/`` and writes only into the staging folder.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

CLAIMS_DOC = "claims"  # the claims overview's page name
PROGRESS = re.compile(r"\r|\d+%\|")  # tqdm and other bars redraw with \r
WIDGET = "application/vnd.jupyter.widget-view+json"
ARTICLE_HEADING = re.compile(r'^### Article ([A-Z]) — "(.+)"', re.M)
ABOUT = (
    "Where does a training step's time go, and which of the usual advice for raising **MFU** "
    "(model FLOPs utilisation) holds on *your* hardware? Each chapter takes one part of a step, "
    "models it, measures it on this machine, and tests the claims two practitioner articles make "
    "about it. Every verdict is computed by the chapter's code from the numbers of its run, never "
    "typed in."
)


@dataclass(frozen=True)
class Chapter:
    """One study of the registry as it appears in a machine's book."""

    spec: object  # studies.Study
    folder: Path  # results/<machine>/<study>/
    env: dict  # env.json
    metrics: dict  # metrics.json

    @property
    def doc(self) -> str:
        return self.spec.id

    @property
    def notebook(self) -> Path:
        return self.folder / f"{self.spec.notebook_stem}.ipynb"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def chapters(results_root: Path, machine: str, registry) -> tuple[list[Chapter], list]:
    """The chapters of ``machine``'s book in course order, and the studies it has no notebook of."""
    found, missing = [], []
    for spec in registry.values():
        folder = Path(results_root) / (spec.machine or machine) / spec.id
        chapter = Chapter(spec, folder, read_json(folder / "env.json"), read_json(folder / "metrics.json"))
        if chapter.notebook.exists():
            found.append(chapter)
        else:
            missing.append(spec)
    return found, missing


def provenance(env: dict) -> str:
    """One sentence: which machine, profile and commit produced a chapter (from ``env.json``)."""
    fp, git = env.get("fingerprint") or {}, env.get("git") or {}
    commit = (git.get("commit") or "unknown")[:7]
    tree = " with uncommitted changes" if git.get("dirty") else ""
    device = fp.get("device_name") or fp.get("cpu_model") or "unknown device"
    cores = f", {fp['cpu_count']} cores" if fp.get("cpu_count") else ""
    return (
        f"Produced on machine **{fp.get('machine') or env.get('machine', '?')}** ({device}{cores}, "
        f"torch {fp.get('torch', '?')}) with the `{env.get('profile', '?')}` profile at commit "
        f"`{commit}`{tree}, finished {(env.get('finished') or '?')[:16].replace('T', ' ')} UTC."
    )


def claims_anchor(nb: dict) -> str:
    """The id Sphinx gives the notebook's claims heading (``## Claims``), or '' if it has none."""
    from docutils.nodes import make_id

    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"#+\s+(Claims\b.*)", line)
                if m:
                    return make_id(m.group(1).strip())
    return ""


def _clean_outputs(outputs: list) -> list:
    kept = []
    for out in outputs:
        if out.get("output_type") == "stream":
            if out.get("name") == "stderr":
                continue
            lines = [ln for ln in "".join(out.get("text", "")).splitlines(True) if not PROGRESS.search(ln)]
            if not lines:
                continue
            out = {**out, "text": "".join(lines)}
        elif WIDGET in out.get("data", {}):
            continue
        kept.append(out)
    return kept


def stage_notebook(chapter: Chapter, dest: Path, rerun: str) -> None:
    """Write the chapter's notebook as the site shows it: stderr, progress bars and widgets
    left out, every code cell folded (``hide-input``), papermill's empty ``parameters`` cell
    removed, and a note under the title naming the machine and commit that produced it."""
    nb = json.loads(chapter.notebook.read_text())
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            tags = set(cell.get("metadata", {}).get("tags", []))
            tags.add("remove-cell" if "parameters" in tags else "hide-input")
            cell = {**cell, "metadata": {**cell.get("metadata", {}), "tags": sorted(tags)}}
            cell["outputs"] = _clean_outputs(cell.get("outputs", []))
        cells.append(cell)
    note = f"```{{note}}\n{provenance(chapter.env)} Re-run: {rerun}.\n```\n"
    first = "".join(cells[0]["source"]) if cells and cells[0]["cell_type"] == "markdown" else ""
    title, _, rest = first.partition("\n")
    if title.startswith("# "):  # the note goes right under the title
        cells[0] = {**cells[0], "source": title + "\n"}
        extra = [_markdown(note, "mfulab-note")]
        extra += [_markdown(rest.strip() + "\n", "mfulab-intro")] if rest.strip() else []
        cells[1:1] = extra
    else:
        cells.insert(0, _markdown(note, "mfulab-note"))
    nb["cells"] = cells
    dest.write_text(json.dumps(nb))


def _markdown(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def rerun_command(spec) -> str:
    if spec.reads_results:
        return f"`make {spec.id}` after the chapters it reads, then `make html`"
    return f"`make {spec.id}`, then `make html`"


def numbers(chapter: Chapter) -> list[str]:
    """The study's headline numbers (``headline: true`` in its study.yaml), one line each."""
    lines = []
    for metric in chapter.spec.metrics:
        value = chapter.metrics.get(metric.key)
        if metric.headline and value is not None:
            unit = "" if metric.unit in ("fraction", "") else " " + metric.unit
            lines.append(f"- {metric.label}: **{metric.fmt.format(value)}{unit}**")
    return lines


def verdict_line(claims: list[dict]) -> str:
    by_id: dict[str, list[str]] = {}
    for c in claims:
        by_id.setdefault(c["id"], []).append(c["verdict"])
    return "; ".join(f"**{cid}** {' / '.join(vs)}" for cid, vs in by_id.items())


def landing_page(machine: str, found: list[Chapter], missing: list, *, in_course: bool = False) -> str:
    """``index.md``: what the course answers, the chapters in reading order (each with its
    headline figure, numbers and verdicts), where the results come from and how to re-run."""
    out = ["# mfulab: where a training step's time goes", "", ABOUT, ""]
    fp = next((c.env.get("fingerprint") for c in found if c.env.get("fingerprint")), None) or {}
    commits = sorted({(c.env.get("git") or {}).get("commit", "unknown")[:7] for c in found})
    out += [
        "## Where these results come from",
        "",
        f"Every chapter is the executed notebook of `results/{machine}/` (the comparison: "
        f"`results/comparison/`), measured on machine **{machine}**"
        + (
            f" ({fp.get('device_name', '?')}, {fp.get('cpu_count', '?')} cores, torch {fp.get('torch', '?')})"
            if fp
            else ""
        )
        + f"; the notebooks were rendered at commit{'s' if len(commits) > 1 else ''} "
        + ", ".join(f"`{c}`" for c in commits)
        + ". Each chapter opens with its own machine, profile and commit (from its `env.json`).",
        "",
    ]
    if in_course:
        out += [
            'Every machine the course was run on has its own book: <a href="../index.html">all machines</a>.',
            "",
        ]
    out += ["## Read in this order", ""]
    for ch in found:
        spec = ch.spec
        out += [f"### {spec.number:02d} · {{doc}}`{spec.title} <{ch.doc}>`", ""]
        if spec.summary:
            out += [spec.summary[0].upper() + spec.summary[1:] + ".", ""]
        if (ch.folder / "figures" / f"{spec.headline_figure}.png").exists():
            out += [f"```{{image}} _figures/{ch.doc}.png", f":alt: {spec.id}: {spec.headline_figure}",
                    ":class: mfulab-headline", "```", ""]  # fmt: skip
        out += numbers(ch) + [""]
        claims = ch.metrics.get("claims") or []
        if claims:
            out += [f"Verdicts: {verdict_line(claims)} ({{doc}}`all claims <{CLAIMS_DOC}>`).", ""]
    if missing:
        out += ["### Not run on this machine", ""]
        out += [f"- {spec.number:02d} · {spec.title} (`make {spec.id}`)" for spec in missing]
    first = found[0].spec
    out += [
        "",
        "## Re-run one chapter",
        "",
        "A chapter re-measures and re-renders on its own, into `results/<machine>/<study>/`; "
        f"the site is then rebuilt from `results/`. For chapter {first.number:02d}:",
        "",
        "```sh",
        f'make {first.id:<18} # PROFILE=cpu|gpu|smoke, ARGS="-p name value"',
        "make html               # every machine's book (SITE_MACHINE=... for one)",
        "```",
        "",
        "Each chapter's note names its own command"
        + "".join(
            f"; `make {s.id}` re-renders chapter {s.number:02d} from every machine's results"
            for s in (c.spec for c in found)
            if s.reads_results
        )
        + ".",
        "",
        "```{toctree}",
        ":hidden:",
        ":maxdepth: 1",
        "",
        *[ch.doc for ch in found],
        CLAIMS_DOC,
        "```",
        "",
    ]
    return "\n".join(out)


def article_names(claims_md: Path) -> dict[str, str]:
    """``{"A": "Fusion optimisation ...", ...}`` from docs/claims.md's article headings."""
    text = claims_md.read_text() if claims_md.exists() else ""
    return dict(ARTICLE_HEADING.findall(text))


def claim_rows(found: list[Chapter], anchors: dict[str, str], other: dict[str, dict]) -> list[dict]:
    """Every claim row of every chapter, in course order, with the verdict of each other machine
    (``other[machine][study]`` = that machine's metrics) for the same study, id and row."""
    rows = []
    for ch in found:
        seen: dict[str, int] = {}
        for claim in ch.metrics.get("claims") or []:
            k = seen[claim["id"]] = seen.get(claim["id"], -1) + 1  # the k-th row of this id
            elsewhere = {}
            for machine, studies in other.items():
                same = [c for c in (studies.get(ch.doc) or {}).get("claims") or [] if c["id"] == claim["id"]]
                elsewhere[machine] = same[k]["verdict"] if k < len(same) else "—"
            rows.append({**claim, "study": ch.spec, "anchor": anchors.get(ch.doc, ""), "other": elsewhere})
    return rows


FILTER_JS = """<script>
(function () {
  var select = document.getElementById("verdict-filter"), count = document.getElementById("claims-shown");
  function apply() {
    var shown = 0;
    document.querySelectorAll("table.mfulab-claims tbody tr").forEach(function (row) {
      var on = select.value === "" || row.dataset.verdict === select.value;
      row.hidden = !on;
      if (on) { shown += 1; }
    });
    count.textContent = shown + " of " + select.dataset.total + " rows";
  }
  select.addEventListener("change", apply);
  apply();
})();
</script>"""


def claims_page(machine: str, rows: list[dict], articles: dict[str, str], others: list[str]) -> str:
    """``claims.md``: one table of every claim (id, claim, source article, verdict on each
    machine, its basis, evidence, the chapter's claims section), filtered by verdict with a select."""
    esc = html.escape
    verdicts = sorted({r["verdict"] for r in rows})
    head = [
        "id",
        "claim",
        "source",
        f"verdict ({machine})",
        *[f"verdict ({m})" for m in others],
        "basis",
        "evidence",
        "chapter",
    ]
    body = []
    for r in rows:
        spec, verdict = r["study"], r["verdict"]
        source = r["id"][:1]
        link = f"{spec.id}.html" + (f"#{r['anchor']}" if r["anchor"] else "")
        cells = [
            f"<td>{esc(r['id'])}</td>",
            f"<td>{esc(r['claim'])}</td>",
            f'<td title="{esc(articles.get(source, ""))}">article {esc(source)}</td>',
            f'<td class="verdict verdict-{_slug(verdict)}">{esc(verdict)}</td>',
            *[
                f'<td class="verdict verdict-{_slug(r["other"][m])}">{esc(r["other"][m])}</td>'
                for m in others
            ],
            f"<td>{esc(r.get('basis') or '—')}</td>",  # results rendered before the rule carry none
            f"<td>{esc(r['evidence'])}</td>",
            f'<td><a href="{esc(link)}">{spec.number:02d} {esc(spec.id)}</a></td>',
        ]
        body.append(f'<tr data-verdict="{esc(verdict)}">' + "".join(cells) + "</tr>")
    options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in verdicts)
    counts = ", ".join(f"{sum(r['verdict'] == v for r in rows)} {v}" for v in verdicts)
    sources = "; ".join(f"**article {k}**: “{v}”" for k, v in sorted(articles.items()))
    return "\n".join(
        [
            "# Claims and verdicts",
            "",
            f"Every claim the chapters test, one row per claim row of their claims tables "
            f"({len(rows)} rows: {counts}). The verdicts are those of machine **{machine}**"
            + (", with the other machines' beside them" if others else "")
            + "; the evidence holds the numbers of this machine's run, and the last column links to "
            "the chapter's claims section, where the code that decided each row sits.",
            "",
            f"Sources: {sources}." if sources else "",
            "",
            "```{raw} html",
            f'<div class="mfulab-filter"><label for="verdict-filter">Show verdict: </label>'
            f'<select id="verdict-filter" data-total="{len(rows)}"><option value="">all</option>{options}'
            '</select> <span id="claims-shown"></span></div>',
            '<table class="mfulab-claims"><colgroup><col class="c-id"><col class="c-claim">'
            '<col class="c-source">'
            + '<col class="c-verdict">' * (1 + len(others))
            + '<col class="c-evidence"><col class="c-chapter"></colgroup><thead><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>",
            *body,
            "</tbody></table>",
            FILTER_JS,
            "```",
            "",
        ]
    )


def _slug(verdict: str) -> str:
    return re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-") or "none"
