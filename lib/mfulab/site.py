"""The course as a static web site: ``make html`` (``python -m mfulab site``).

The executed notebooks of one machine's results are converted with nbconvert (lab
template); figures are embedded in the pages, every remote script or stylesheet the
template would load is removed (the site works offline, from the file system), and a
small button folds the code cells so that a page reads as text. ``index.html`` lists the
studies in course order with one sentence, the headline figure, headline numbers and the
claims table of each.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

MARKER = ".mfulab-site"  # a folder holding this file was written by build_site and may be replaced
TOGGLE = """
<style>body.mfulab-hide-code .jp-CodeCell .jp-Cell-inputWrapper {display: none;}
#mfulab-toggle {position: fixed; top: 8px; right: 8px; z-index: 10; padding: 4px 10px;}</style>
<button id="mfulab-toggle" onclick="document.body.classList.toggle('mfulab-hide-code');
this.textContent = document.body.classList.contains('mfulab-hide-code')
  ? 'show code' : 'hide code';">hide code</button>
<p><a href="index.html">← course index</a></p>
"""


def _offline(page: str) -> str:
    """Remove every remote <script src=…>, <link href=…> and script importing from a CDN
    (MathJax, require.js, mermaid): the pages must work offline."""
    page = re.sub(r"<script[^>]*\bsrc=\"(https?://[^\"]*)?\"[^>]*>\s*</script>", "", page)
    page = re.sub(r"<link[^>]*\bhref=\"https?://[^\"]*\"[^>]*/?>", "", page)
    # inline scripts that import from a CDN (the lab template's mermaid loader)
    page = re.sub(
        r"<script[^>]*>(?:(?!</script>).)*https?://(?:(?!</script>).)*</script>", "", page, flags=re.S
    )
    return page


def notebook_page(ipynb: Path) -> str:
    """One executed notebook as an offline page; progress bars (stderr) are left out so the
    page reads as a text — they remain in the .ipynb."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(ipynb, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [
                o
                for o in cell.get("outputs", [])
                if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
            ]
    exporter = HTMLExporter(template_name="lab")
    exporter.mathjax_url = ""
    body, _ = exporter.from_notebook_node(nb)
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + TOGGLE, _offline(body), count=1)


def _claims_html(path: Path) -> str:
    import pandas as pd

    if not path.exists():
        return "<p><em>no claims table</em></p>"
    df = pd.read_csv(path)
    return df[["id", "claim", "verdict", "evidence"]].to_html(
        index=False, escape=True, classes="claims", border=0
    )


def _numbers_html(study, metrics: dict) -> str:
    items = []
    for metric in study.metrics:
        if metric.headline and metrics.get(metric.key) is not None:
            items.append(
                f"<li>{html.escape(metric.label)}: <b>{html.escape(metric.fmt.format(metrics[metric.key]))}"
                f"{'' if metric.unit in ('fraction', '') else ' ' + html.escape(metric.unit)}</b></li>"
            )
    return "<ul>" + "".join(items) + "</ul>" if items else ""


def _check_out_dir(out: Path) -> None:
    """Refuse to replace a folder this function did not write (``--out ~`` must not delete a home)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise FileExistsError(
            f"{out} exists and is not a site written by 'mfulab site' (no {MARKER} in it); "
            "choose an empty or new folder"
        )


def build_site(results_root, machine: str, out_dir) -> Path:
    """Write ``out_dir/index.html`` and one page per study found under ``results_root/machine``."""
    from .results import atomic_dir
    from .studies import REGISTRY

    src = Path(results_root) / machine
    if not src.is_dir():
        raise FileNotFoundError(
            f"{src} does not exist: run the studies first (make all) or pick another machine"
        )
    out_final = Path(out_dir).expanduser().resolve()
    _check_out_dir(out_final)
    with atomic_dir(out_final) as out:
        (out / MARKER).write_text("written by mfulab site; the whole folder is replaced by the next build\n")
        _write_site(out, Path(results_root), machine, REGISTRY)
    return out_final


def _write_site(out: Path, results_root: Path, machine: str, registry) -> None:
    (out / "figures").mkdir(parents=True)
    sections = []
    for spec in registry.values():
        study = spec.id
        d = results_root / (spec.machine or machine) / study
        nb = d / f"{spec.notebook_stem}.ipynb"
        title = html.escape(spec.title)
        number = f"{spec.number:02d}"
        if not nb.exists():
            sections.append(
                f"<section><h2>{number} · {study}</h2><p>{title}</p><p><em>not run on this "
                "machine</em></p></section>"
            )
            continue
        (out / f"{study}.html").write_text(notebook_page(nb))
        figure = d / "figures" / f"{spec.headline_figure}.png"
        img = ""
        if figure.exists():
            shutil.copy(figure, out / "figures" / f"{study}.png")
            img = f'<img src="figures/{study}.png" alt="{study} headline figure" width="640">'
        metrics = json.loads((d / "metrics.json").read_text()) if (d / "metrics.json").exists() else {}
        sections.append(
            f'<section><h2>{number} · <a href="{study}.html">{study}</a></h2><p>{title}</p>{img}'
            f"{_numbers_html(spec, metrics)}{_claims_html(d / 'tables' / 'claims.csv')}</section>"
        )
    index = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mfulab — {html.escape(machine)}</title>
<style>body {{font-family: sans-serif; max-width: 1000px; margin: 2em auto; line-height: 1.4}}
table.claims {{border-collapse: collapse; font-size: 0.85em}}
table.claims td, table.claims th {{border: 1px solid #ccc;
padding: 3px 6px; vertical-align: top}} section {{margin-bottom: 2.5em}}</style></head>
<body><h1>mfulab: where a training step's time goes</h1>
<p>Results of <b>{html.escape(machine)}</b>, in course order. Each study page is the executed notebook.</p>
{"".join(sections)}</body></html>
"""
    (out / "index.html").write_text(index)
