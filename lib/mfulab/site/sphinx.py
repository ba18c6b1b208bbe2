"""The Sphinx side of the course site: the configuration it is built with, its style sheet,
and a math renderer that needs neither JavaScript nor a network.

TeX (``$...$`` and ``$$...$$`` in the notebooks' markdown, parsed by MyST's ``dollarmath``)
is converted to MathML while the pages are written (``latex2mathml``); browsers draw MathML
themselves, so a page loads no MathJax and no font from anywhere. A formula the converter
cannot express (an unknown command survives as ``\\name`` in the output) is a Sphinx warning
and is shown as its TeX source in a ``<code class="math-error">``, so that it can be seen and
the site's tests fail on it.
"""

from __future__ import annotations

import html
import re

RENDERER = "mathml"
UNCONVERTED = re.compile(r">\\[A-Za-z]+")  # latex2mathml keeps an unknown command as <mi>\name</mi>
MATHML_NS = "http://www.w3.org/1998/Math/MathML"
BINARY = set("+−-×·÷±∓")  # operators TeX spaces by a medium space in text style

CSS = """
/* figures (matplotlib PNGs carry their take-away as title): the width of the text column */
.cell_output img, .bd-article img.mfulab-headline { width: 100%; height: auto; }
.cell_output .text_html { overflow-x: auto; }
.cell_output table { font-size: 0.85em; }
/* MathML, not MathJax: undo the theme's flex layout meant for mjx-container */
span.math { display: inline; }
div.math { display: block; overflow-x: auto; margin: 1em 0; text-align: center; }
div.math span.eqno { float: right; }
math[display="block"] { font-size: 1.2em; }
code.math-error { color: #b00; }
.bd-page-width { max-width: 100rem; }
.bd-main .bd-content .bd-article-container { max-width: 62rem; }
/* the claims overview: the page has no contents column, the table takes its room */
.bd-main .bd-content .bd-article-container:has(table.mfulab-claims) { max-width: 100%; }
table.mfulab-claims { border-collapse: collapse; font-size: 0.82em; width: 100%; table-layout: fixed; }
table.mfulab-claims col.c-id { width: 3.5em; }
table.mfulab-claims col.c-claim { width: 26%; }
table.mfulab-claims col.c-source { width: 5.5em; }
table.mfulab-claims col.c-verdict { width: 8.5em; }
table.mfulab-claims col.c-chapter { width: 7em; }
table.mfulab-claims th, table.mfulab-claims td {
  border: 1px solid var(--pst-color-border); padding: 3px 6px; vertical-align: top; }
table.mfulab-claims td.verdict { font-weight: 600; }
table.mfulab-claims td { overflow-wrap: anywhere; }
.verdict-confirmed { color: #1a7f37; }
.verdict-refuted { color: #cf222e; }
.verdict-inconclusive-on-this-machine, .verdict-not-checkable { color: #9a6700; }
.verdict-analytic-only, .verdict-shown { color: #0550ae; }
.mfulab-filter { margin: 0.5em 0 1em 0; }
"""


def tex_to_mathml(tex: str, display: str) -> str:
    """MathML for one formula; ``ValueError`` when the converter cannot express it."""
    from latex2mathml.converter import convert

    tex = re.sub(r"\\(begin|end)\{aligned\}", r"\\\1{split}", tex.strip())
    if "\\\\" in tex and "\\begin" not in tex:  # several lines: one aligned block, as MathJax does
        tex = r"\begin{split}" + tex + r"\end{split}"
    try:
        mathml = convert(tex, display=display)
    except Exception as err:  # the converter's own errors are plain exceptions of several kinds
        raise ValueError(f"latex2mathml cannot convert {tex!r}: {err}") from err
    unknown = UNCONVERTED.search(mathml)
    if unknown:
        raise ValueError(f"latex2mathml does not know {unknown.group(0)[1:]} in {tex!r}")
    return _space_fractions(mathml) if display == "block" else mathml


def _space_fractions(mathml: str) -> str:
    """Chromium draws a displayed fraction's numerator and denominator without the space TeX
    puts around a binary operator (``a×b``); give those operators explicit medium spaces."""
    import xml.etree.ElementTree as ET

    ET.register_namespace("", MATHML_NS)
    root = ET.fromstring(mathml)
    mo, frac = f"{{{MATHML_NS}}}mo", f"{{{MATHML_NS}}}mfrac"
    for fraction in root.iter(frac):
        for row in list(fraction.iter()):
            kids = list(row)
            for i in range(len(kids) - 2, 0, -1):  # not the first or last child: not a sign
                if kids[i].tag == mo and (kids[i].text or "").strip() in BINARY:
                    for at in (i + 1, i):
                        row.insert(at, ET.Element(f"{{{MATHML_NS}}}mspace", width="0.2222em"))
    return ET.tostring(root, encoding="unicode")


def _render(self, node, tex: str, display: str) -> str:
    from sphinx.util import logging

    try:
        return tex_to_mathml(tex, display)
    except ValueError as err:
        logging.getLogger(__name__).warning(str(err), location=node)
        return f'<code class="math-error">{html.escape(tex)}</code>'


def visit_math(self, node) -> None:
    from docutils import nodes

    self.body.append(self.starttag(node, "span", "", CLASS="math"))
    self.body.append(_render(self, node, node.astext(), "inline") + "</span>")
    raise nodes.SkipNode


def visit_math_block(self, node) -> None:
    from docutils import nodes
    from sphinx.util.math import get_node_equation_number

    self.body.append(self.starttag(node, "div", CLASS="math"))
    if node.get("number"):
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})</span>')
    for part in (p for p in node.astext().split("\n\n") if p.strip()):
        self.body.append(_render(self, node, part, "block"))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app):
    """The Sphinx extension: the MathML renderer (``html_math_renderer = "mathml"``)."""
    app.add_html_math_renderer(RENDERER, (visit_math, None), (visit_math_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def conf(title: str, footer: str) -> dict:
    """The Sphinx configuration of one machine's book (written as ``conf.py``): MyST-NB renders
    the executed notebooks as they are (nothing is executed), the book theme gives the sidebar
    and prev/next links, and nothing on a page comes from the network."""
    return {
        "project": "mfulab",
        "html_title": title,
        "author": "mfulab",
        "extensions": ["myst_nb", __name__],
        "html_math_renderer": RENDERER,
        "myst_enable_extensions": ["dollarmath", "amsmath"],
        "nb_execution_mode": "off",
        "nb_output_stderr": "remove",
        "nb_merge_streams": True,
        "nb_render_markdown_format": "myst",  # display(Markdown(...)) gets the same math as a cell
        "nb_ipywidgets_js": {},  # no widget manager from a CDN
        "suppress_warnings": ["myst.header", "mystnb.unknown_mime_type"],
        "exclude_patterns": ["_build", "**.ipynb_checkpoints"],
        "html_theme": "sphinx_book_theme",
        "html_theme_options": {
            "home_page_in_toc": True,
            "show_navbar_depth": 1,
            "use_download_button": False,
            "use_fullscreen_button": False,
            "use_repository_button": False,
            "navigation_with_keys": False,
            "footer_content_items": ["extra-footer.html"],
            "extra_footer": f"<p>{footer}</p>",
        },
        "html_context": {"default_mode": "light"},  # unset, the theme logs an error on a first visit
        "html_static_path": ["_static"],
        "html_css_files": ["mfulab.css"],
        "html_copy_source": False,
        "html_show_sourcelink": False,
        "html_show_sphinx": False,
        "html_last_updated_fmt": None,
    }
