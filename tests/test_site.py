"""The course site (built once from the committed results with the network blocked, then read
in headless Chromium), the machine comparison, and the measure-then-analyse path of a
multi-process study."""

import functools
import json
import re
import shutil
import socket
from html.parser import HTMLParser

import pytest

from mfulab.site import pages, shots
from mfulab.site.build import MARKER, build_course
from mfulab.site.sphinx import tex_to_mathml
from mfulab.studies.compare import analysis as compare
from mfulab.studykit.registry import REGISTRY

from conftest import ROOT

COMMITTED = "cpu-2c"
CHROMIUM, CHROMEDRIVER = shots.chromium_paths()
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Chromium and chromedriver are not installed "
    "(Debian: apt-get install chromium chromium-driver; .ci/run does this)",
)
RAW_TEX = re.compile(r"\$[^$\s][^$]*\$|\\[(\[]|\\(frac|mathrm|text|times|sum|sqrt|cdot|left|right)\b")
FORMULA = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$[^$\s][^$]*\$", re.S)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The site of the committed machine, built once for the module while every socket
    connection (and name lookup) raises; returns (site root, the attempts seen)."""
    if not (ROOT / "results" / COMMITTED).is_dir():
        pytest.skip("no committed results to build the site from")
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:2] or args[:1])
        raise OSError("networking is disabled in this test")

    with pytest.MonkeyPatch.context() as mp:
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            mp.delenv(name, raising=False)
        mp.setattr(socket.socket, "connect", refuse)
        mp.setattr(socket.socket, "connect_ex", refuse)
        mp.setattr(socket, "create_connection", refuse)
        mp.setattr(socket, "getaddrinfo", refuse)
        root = build_course(ROOT / "results", tmp_path_factory.mktemp("site") / "site", [COMMITTED])
    return root, attempts


@pytest.fixture(scope="module")
def book(course):
    return course[0] / COMMITTED


@pytest.fixture(scope="module")
def chapters():
    """The chapters the committed machine's book must hold, in course order."""
    found, _ = pages.chapters(ROOT / "results", COMMITTED, REGISTRY)
    return found


class _Links(HTMLParser):
    """Every URL a page refers to (a href, img src, link href, script src) and every id."""

    def __init__(self):
        super().__init__()
        self.urls, self.ids, self.classes = [], set(), {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        key = {"a": "href", "link": "href", "img": "src", "script": "src"}.get(tag)
        if key and a.get(key):
            self.urls.append((tag, a[key], a.get("class") or ""))


@functools.cache
def _parse(path):
    parser = _Links()
    parser.feed(path.read_text())
    return parser


def _pages(course):
    """The site's pages: its index and every book's (not the theme's templates under _static/)."""
    return [course[0] / "index.html", *sorted(course[0].glob("*/*.html"))]


def test_build_needs_no_network_and_links_the_machines(course, book):
    root, attempts = course
    assert attempts == [], f"the build tried to reach the network: {attempts[:5]}"
    assert (root / MARKER).exists() and (book / MARKER).exists()
    assert [u for t, u, _ in _parse(root / "index.html").urls if t == "a"] == [f"{COMMITTED}/index.html"]
    for page in _pages(course):
        for tag, url, _ in _parse(page).urls:
            if tag != "a":  # nothing a page loads may come from elsewhere
                assert not re.match(r"(https?:)?//", url), (page.name, url)


def test_every_internal_link_resolves(course):
    for page in _pages(course):
        for tag, url, _ in _parse(page).urls:
            if re.match(r"[a-z]+:", url) or url.startswith("//"):
                continue
            path, _, fragment = url.partition("#")
            path = path.partition("?")[0]  # the theme's cache-busting ?digest=
            target = (page.parent / path).resolve() if path else page
            assert target.is_file(), (page.name, tag, url)
            if fragment and target.suffix == ".html":
                assert fragment in _parse(target).ids, (page.name, url)


def test_prev_next_chain_is_the_course_order(book, chapters):
    expected = ["index"] + [c.doc for c in chapters] + [pages.CLAIMS_DOC]
    assert [c.doc for c in chapters][:2] == ["mfu", "overlap"] and chapters[-1].doc == "compare"
    order, page = ["index"], "index.html"
    while True:
        nxt = [u for t, u, cls in _parse(book / page).urls if "right-next" in cls]
        if not nxt:
            break
        page = nxt[0]
        order.append(page.removesuffix(".html"))
        assert len(order) <= len(expected), order
    assert order == expected
    for before, after in zip(expected, expected[1:]):
        prev = [u for t, u, cls in _parse(book / f"{after}.html").urls if "left-prev" in cls]
        assert prev == [f"{before}.html"], (after, prev)


def _claims_table(book):
    rows = re.findall(r'<tr data-verdict="([^"]*)">(.*?)</tr>', (book / "claims.html").read_text(), re.S)
    return [(verdict, re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)) for verdict, cells in rows]


def test_claims_page_lists_exactly_the_metrics_claims(book, chapters):
    import html

    expected = [
        (c.doc, claim["id"], claim["claim"], claim["verdict"])
        for c in chapters
        for claim in json.loads((c.folder / "metrics.json").read_text()).get("claims", [])
    ]
    assert len(expected) >= 20
    shown = [
        (
            re.sub(r"^\d+ ", "", re.sub(r"<[^>]+>", "", cells[-1])),
            html.unescape(cells[0]),
            html.unescape(cells[1]),
            verdict,
        )
        for verdict, cells in _claims_table(book)
    ]
    assert shown == expected
    assert all(html.unescape(cells[3]) == verdict for verdict, cells in _claims_table(book))
    assert all('href="' in cells[-1] and "#claims" in cells[-1] for _, cells in _claims_table(book))


def test_one_verdict_column_per_machine(tmp_path, chapters):
    other = {
        c.doc: json.loads((c.folder / "metrics.json").read_text())
        for c in chapters
        if c.metrics.get("claims")
    }
    first = next(iter(other))
    flipped = other[first]["claims"][0]["verdict"] = (
        "refuted" if chapters[0].metrics["claims"][0]["verdict"] != "refuted" else "confirmed"
    )
    del other[first]["claims"][1:]  # the other machine lacks the later rows: shown as missing
    rows = pages.claim_rows(chapters, {}, {"h100-x8": other})
    page = pages.claims_page(COMMITTED, rows, {"A": "article a", "B": "article b"}, ["h100-x8"])
    assert f"<th>verdict ({COMMITTED})</th><th>verdict (h100-x8)</th>" in page
    assert rows[0]["other"] == {"h100-x8": flipped} and rows[1]["other"] == {"h100-x8": "—"}
    assert len(re.findall(r"<tr data-verdict=", page)) == len(rows)


def test_chapters_are_folded_clean_and_say_where_they_come_from(book, chapters):
    for c in chapters:
        text = (book / f"{c.doc}.html").read_text()
        commit = c.env["git"]["commit"][:7]
        assert f"<strong>{c.env['fingerprint']['machine']}</strong>" in text and commit in text, c.doc
        cells = re.findall(r'<div class="cell( [^"]*)?docutils container"', text)
        assert cells and all("tag_hide-input" in cls for cls in cells), c.doc
        assert "tag_parameters" not in text and "stderr" not in text, c.doc


def test_staging_leaves_out_stderr_progress_bars_and_widgets(tmp_path, chapters):
    nb = json.loads(chapters[0].notebook.read_text())
    code = next(i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code" and i > 2)
    nb["cells"][code]["outputs"] = [
        {"output_type": "stream", "name": "stderr", "text": "warning: noise\n"},
        {"output_type": "stream", "name": "stdout", "text": "kept line\n 40%|####      | 4/10\r\n"},
        {"output_type": "display_data", "metadata": {}, "data": {pages.WIDGET: {}, "text/plain": "bar"}},
    ]
    src = tmp_path / chapters[0].notebook.name
    src.write_text(json.dumps(nb))
    chapter = pages.Chapter(chapters[0].spec, tmp_path, chapters[0].env, chapters[0].metrics)
    pages.stage_notebook(chapter, tmp_path / "staged.ipynb", "make mfu")
    staged = json.loads((tmp_path / "staged.ipynb").read_text())
    outputs = staged["cells"][code + 2]["outputs"]  # the note and the intro cells come first
    assert outputs == [{"output_type": "stream", "name": "stdout", "text": "kept line\n"}]
    assert staged["cells"][1]["id"] == "mfulab-note" and "make mfu" in "".join(staged["cells"][1]["source"])


def test_math_becomes_mathml_and_an_unknown_command_is_refused():
    block = tex_to_mathml(r"\mathrm{MFU} = \frac{a \times b}{c}", "block")
    assert block.startswith("<math") and "<mfrac>" in block and "\\" not in block
    assert 'width="0.2222em"' in block  # the × in the numerator gets TeX's medium spaces
    assert "<msqrt>" in tex_to_mathml(r"\sqrt{2}", "inline")
    with pytest.raises(ValueError, match="nosuchcommand"):
        tex_to_mathml(r"\nosuchcommand{x}", "inline")


def test_a_foreign_folder_is_not_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        build_course(ROOT / "results", tmp_path, [COMMITTED])
    assert (tmp_path / "notes.txt").read_text() == "mine"


@needs_chromium
def test_pages_in_a_real_browser(course, book, chapters, tmp_path_factory):
    formulas = {
        c.doc: sum(
            len(FORMULA.findall("".join(cell["source"])))
            for cell in json.loads(c.notebook.read_text())["cells"]
            if cell["cell_type"] == "markdown"
        )
        for c in chapters
    }
    assert formulas["mfu"] >= 1
    driver = shots.chromium(tmp_path_factory.mktemp("chromium"))
    try:
        for page in _pages(course):
            driver.get(page.as_uri())
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, (page.name, errors)
            requests = [
                json.loads(e["message"])["message"]["params"].get("request", {}).get("url", "")
                for e in driver.get_log("performance")
            ]
            remote = [u for u in requests if re.match(r"(https?|wss?|ftp):", u)]
            assert not remote, (page.name, remote)
            images = driver.execute_script(
                "return Array.from(document.images)"
                ".map(i => [i.currentSrc.slice(-60), i.complete, i.naturalWidth])"
            )
            for src, complete, width in images:
                assert complete and width > 0, (page.name, src)
            text = driver.execute_script("return document.body.innerText")
            assert not RAW_TEX.search(text), (page.name, RAW_TEX.search(text).group(0))
            maths = driver.execute_script("return document.querySelectorAll('article math').length")
            assert maths >= formulas.get(page.stem, 0) if page.parent == book else True, page.name
            if page == book / "index.html":
                figures = [
                    c for c in chapters if (c.folder / "figures" / f"{c.spec.headline_figure}.png").exists()
                ]
                assert len(images) == len(figures) >= 6, "one headline figure per chapter"
        driver.get((book / "claims.html").as_uri())
        rows = _claims_table(book)
        for verdict in sorted({v for v, _ in rows}):
            driver.execute_script(
                "const s = document.getElementById('verdict-filter'); s.value = arguments[0];"
                "s.dispatchEvent(new Event('change'));",
                verdict,
            )
            visible = driver.execute_script(
                "return Array.from(document.querySelectorAll('table.mfulab-claims tbody tr'))"
                ".filter(r => !r.hidden).map(r => r.dataset.verdict)"
            )
            assert visible == [v for v, _ in rows if v == verdict]
    finally:
        driver.quit()


def test_compare_two_machines(run_cli, tmp_path):
    root = tmp_path / "results"
    shutil.copytree(ROOT / "results" / COMMITTED, root / COMMITTED)
    fake = root / "fake-h100-x8" / "mfu"
    fake.mkdir(parents=True)
    metrics = json.loads((ROOT / "results" / COMMITTED / "mfu" / "metrics.json").read_text())
    metrics["matmul_ceiling_flops_per_s"] = 7.0e14
    metrics["datasheet_peak_flops_per_s"] = 9.894e14
    metrics["ceiling_over_datasheet"] = 7.0e14 / 9.894e14
    (fake / "metrics.json").write_text(json.dumps(metrics))
    from mfulab.studies.compare.params import Params

    table = compare.comparison_table(compare.collect(Params(results_root=str(root))))
    row = table.set_index("metric").loc["ceiling / peak"]
    committed = json.loads((ROOT / "results" / COMMITTED / "mfu" / "metrics.json").read_text())
    committed_share = committed["ceiling_over_datasheet"]  # a CPU's ISA peak where it was recorded
    assert row["fake-h100-x8"] == pytest.approx(7.0e14 / 9.894e14)
    expected = compare.NOT_APPLICABLE if committed_share is None else pytest.approx(committed_share)
    assert row[COMMITTED] == expected
    assert (
        table.set_index("metric").loc["all-reduce per-step latency α (calibration)", "fake-h100-x8"]
        == compare.MISSING
    )
    shown = compare.formatted(table).set_index("metric")
    assert shown.loc["measured matmul ceiling (calibration)", "fake-h100-x8"] == "700 TFLOP/s"
    shown_share = "n/a" if committed_share is None else f"{committed_share:.2f}×"  # a ratio, not a share
    assert shown.loc["ceiling / peak", COMMITTED] == shown_share
    proc = run_cli(
        "run", "compare", "--profile", "default", "-p", "results_root", str(root), "--results-root", str(root)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((root / "comparison" / "compare" / "metrics.json").read_text())
    assert out["machines"] == [COMMITTED, "fake-h100-x8"]
