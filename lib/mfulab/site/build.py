"""The course as a static web site: ``make html`` (``python -m mfulab site``).

One book per machine: Sphinx with MyST-NB renders the executed notebooks of
``results/<machine>/`` as they are (nothing is executed) in the book theme (sidebar,
prev/next), one chapter per study in the registry's course order, then the machine
comparison (``results/comparison/``) and a page of every claim with its verdict. Math is
converted to MathML while building (:mod:`mfulab.site.sphinx`), so the build needs no network
and the pages load nothing from one: they work from the file system. The pages that are not
notebooks, and the notebooks as the site shows them, come from :mod:`mfulab.site.pages`.

``build_course`` writes ``site/<machine>/`` for every machine under ``results/`` and
``site/index.html`` linking them; ``build_site`` writes one machine's book.
"""

from __future__ import annotations

import html
import io
import logging
import os
import shutil
import tempfile
from pathlib import Path

from mfulab.site import pages, sphinx

MARKER = ".mfulab-site"  # a folder holding this file was written here and may be replaced
log = logging.getLogger(__name__)


class SiteBuildError(RuntimeError):
    pass


def machines(results_root) -> list[str]:
    """The machines under ``results_root`` with at least one executed study notebook (the
    comparison's fixed folder is a chapter, not a machine)."""
    from mfulab.studykit.registry import REGISTRY

    root = Path(results_root)
    fixed = {s.machine for s in REGISTRY.values() if s.machine}
    own = [s for s in REGISTRY.values() if not s.machine]
    return sorted(
        d.name
        for d in (root.iterdir() if root.is_dir() else ())
        if d.is_dir()
        and not d.name.startswith(".")
        and d.name not in fixed
        and any((d / s.id / f"{s.notebook_stem}.ipynb").exists() for s in own)
    )


def _check_out_dir(out: Path, *, course: bool = False) -> None:
    """Refuse to replace a folder this module did not write (``--out ~`` must not delete a home)."""
    if not out.exists():
        return
    entries = list(out.iterdir()) if out.is_dir() else None
    ours = entries is not None and (
        not entries
        or (out / MARKER).exists()
        or (course and all(e.is_dir() and (e / MARKER).exists() for e in entries))
    )
    if not ours:
        raise FileExistsError(
            f"{out} exists and is not a site written by 'mfulab site' (no {MARKER} in it); "
            "choose an empty or new folder"
        )


def build_site(results_root, machine: str, out_dir, *, in_course: bool = False, jobs: int = 0) -> Path:
    """Write one machine's book to ``out_dir`` (``index.html`` is its landing page); the folder
    is replaced only once the new book is complete. ``in_course``: the book sits in a course
    folder beside ``../index.html``. ``jobs``: Sphinx processes (0: one per core)."""
    from mfulab.results import atomic_dir
    from mfulab.studykit.registry import REGISTRY

    results_root = Path(results_root)
    if not (results_root / machine).is_dir():
        raise FileNotFoundError(
            f"{results_root / machine} does not exist: run the studies first (make all) "
            "or pick another machine"
        )
    out_final = Path(out_dir).expanduser().resolve()
    _check_out_dir(out_final)
    with tempfile.TemporaryDirectory(prefix="mfulab-site-") as tmp, atomic_dir(out_final) as out:
        src = Path(tmp) / "src"
        _stage(src, results_root, machine, REGISTRY, in_course=in_course)
        html_dir = Path(tmp) / "build" / "html"  # MyST-NB writes beside it (../jupyter_execute)
        warnings = _sphinx(src, html_dir, Path(tmp) / "doctrees", jobs or os.cpu_count() or 1)
        for line in warnings:
            log.warning("sphinx: %s", line)
        (html_dir / ".buildinfo").unlink(missing_ok=True)
        if (html_dir / "_sources").is_dir() and not any((html_dir / "_sources").iterdir()):
            (html_dir / "_sources").rmdir()
        shutil.copytree(html_dir, out, dirs_exist_ok=True)
        (out / MARKER).write_text("written by mfulab site; the whole folder is replaced by the next build\n")
    return out_final


def _chapters_or_refuse(results_root: Path, machine: str, registry):
    """The chapters of ``results_root/machine``; refused when it holds no study's notebook."""
    found, missing = pages.chapters(results_root, machine, registry)
    if machine in {s.machine for s in registry.values()} or not any(not c.spec.machine for c in found):
        raise FileNotFoundError(f"{results_root / machine} holds no machine's executed study notebooks")
    return found, missing


def _stage(src: Path, results_root: Path, machine: str, registry, *, in_course: bool) -> None:
    """The Sphinx source tree of one book: conf.py, the style sheet, the cleaned notebooks,
    the landing page and the claims page."""
    import json

    found, missing = _chapters_or_refuse(results_root, machine, registry)
    (src / "_static").mkdir(parents=True)
    (src / "_figures").mkdir()
    footer = (
        f"Built by <code>make html</code> from <code>results/{html.escape(machine)}/</code> "
        "and <code>results/comparison/</code>; every page works offline, from the file system."
    )
    conf = sphinx.conf(f"mfulab · {machine}", footer)
    (src / "conf.py").write_text("".join(f"{k} = {v!r}\n" for k, v in conf.items()))
    (src / "_static" / "mfulab.css").write_text(sphinx.CSS)
    anchors = {}
    for ch in found:
        pages.stage_notebook(ch, src / f"{ch.doc}.ipynb", pages.rerun_command(ch.spec))
        anchors[ch.doc] = pages.claims_anchor(json.loads(ch.notebook.read_text()))
        figure = ch.folder / "figures" / f"{ch.spec.headline_figure}.png"
        if figure.exists():
            shutil.copy(figure, src / "_figures" / f"{ch.doc}.png")
    others = [m for m in machines(results_root) if m != machine]
    (src / "index.md").write_text(pages.landing_page(machine, found, missing, in_course=in_course))
    other_metrics = {
        m: {ch.doc: pages.read_json(results_root / m / ch.doc / "metrics.json") for ch in found}
        for m in others
    }
    rows = pages.claim_rows(found, anchors, other_metrics)
    from mfulab.paths import repo_root

    articles = pages.article_names(repo_root() / "docs" / "claims.md")
    (src / f"{pages.CLAIMS_DOC}.md").write_text(pages.claims_page(machine, rows, articles, others))


def _sphinx(src: Path, out: Path, doctrees: Path, jobs: int) -> list[str]:
    """Build the HTML in this process (so that a test can watch its sockets); the warnings."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    warnings = io.StringIO()
    with patch_docutils(src), docutils_namespace():
        app = Sphinx(
            str(src), str(src), str(out), str(doctrees), "html",
            status=None, warning=warnings, freshenv=True, parallel=jobs,
        )  # fmt: skip
        app.build(force_all=True)
    if app.statuscode:
        raise SiteBuildError(f"sphinx failed (status {app.statuscode}):\n{warnings.getvalue()}")
    return [line for line in warnings.getvalue().splitlines() if line.strip()]


def build_course(results_root, out_root, only: list[str] | None = None, *, jobs: int = 0) -> Path:
    """``out_root/<machine>/`` for every machine under ``results_root`` (or the ``only`` ones)
    and ``out_root/index.html`` linking every book the folder holds."""
    results_root, out_root = Path(results_root), Path(out_root).expanduser().resolve()
    _check_out_dir(out_root, course=True)
    names = only or machines(results_root)
    if not names:
        raise FileNotFoundError(
            f"{results_root} holds no machine's results: run the studies first (make all)"
        )
    from mfulab.studykit.registry import REGISTRY

    for machine in names:  # refuse before anything is written
        _chapters_or_refuse(results_root, machine, REGISTRY)
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / MARKER).write_text(
        "written by mfulab site; each machine's folder is replaced by its next build\n"
    )
    for machine in names:
        build_site(results_root, machine, out_root / machine, in_course=True, jobs=jobs)
    if only is None:  # a full build: books of machines no longer under results/ go
        for stale in out_root.iterdir():
            if stale.is_dir() and (stale / MARKER).exists() and stale.name not in names:
                shutil.rmtree(stale)
    _course_index(out_root, results_root)
    return out_root


def _course_index(out_root: Path, results_root: Path) -> None:
    """The page above the books: one link per machine, with its device."""
    items = []
    for book in sorted(d for d in out_root.iterdir() if d.is_dir() and (d / MARKER).exists()):
        envs = sorted((results_root / book.name).glob("*/env.json"))
        fp = (pages.read_json(envs[0]).get("fingerprint") or {}) if envs else {}
        device = f" — {html.escape(fp['device_name'])}" if fp.get("device_name") else ""
        items.append(
            f'<li><a href="{html.escape(book.name)}/index.html">{html.escape(book.name)}</a>{device}</li>'
        )
    (out_root / "index.html").write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>mfulab — machines</title>\n'
        "<style>body {font-family: sans-serif; max-width: 46em; margin: 3em auto; line-height: 1.5}</style>"
        "</head>\n<body><h1>mfulab: where a training step's time goes</h1>\n"
        "<p>The course, once per machine it was run on: each book holds the executed notebooks "
        "of that machine's <code>results/</code>, with the same chapters and its own verdicts.</p>\n"
        f"<ul>{''.join(items)}</ul></body></html>\n"
    )
