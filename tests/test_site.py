"""The course site (built from committed results, checked in headless Chromium), the machine
comparison, and the measure-then-analyse path of a multi-process study."""

import json
import shutil

import pytest

from mfulab.site import build_site
from mfulab.studies.compare import analysis as compare

from conftest import ROOT

COMMITTED = "cpu-2c"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not (ROOT / "results" / COMMITTED).is_dir():
        pytest.skip("no committed results to build the site from")
    return build_site(ROOT / "results", COMMITTED, tmp_path_factory.mktemp("site"))


def test_site_builds_offline_from_committed_results(site):
    pages = sorted(p.name for p in site.glob("*.html"))
    assert "index.html" in pages and "mfu.html" in pages and len(pages) >= 3
    for page in site.glob("*.html"):
        text = page.read_text()
        assert "cdnjs" not in text and '<script src="http' not in text, page.name
    index = (site / "index.html").read_text()
    assert "A19" in index and "figures/mfu.png" in index


@pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Chromium and chromedriver are not installed "
    "(Debian: apt-get install chromium chromium-driver; .ci/run does this)",
)
def test_site_in_a_real_browser(site):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,1600",
        f"--user-data-dir={site / '.chromium'}",
    ):
        opts.add_argument(flag)
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        for page in sorted(site.glob("*.html")):
            driver.get(page.as_uri())
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, (page.name, errors)
            images = driver.execute_script(
                "return Array.from(document.images).map(i => [i.currentSrc.slice(0, 60), "
                "i.complete, i.naturalWidth])"
            )
            for src, complete, width in images:
                assert complete and width > 0, (page.name, src)
            links = driver.execute_script(
                "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))"
            )
            for href in links:
                if href.startswith(("http:", "https:", "#", "mailto:")):
                    continue
                assert (page.parent / href.split("#")[0]).exists(), (page.name, href)
            if page.name == "index.html":
                assert len(images) >= 3
                driver.save_screenshot(str(site / "index.png"))
        assert (site / "index.png").stat().st_size > 10_000
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
    row = table.set_index("metric").loc["ceiling / datasheet"]
    assert (
        row["fake-h100-x8"] == pytest.approx(7.0e14 / 9.894e14) and row[COMMITTED] == compare.NOT_APPLICABLE
    )
    assert (
        table.set_index("metric").loc["all-reduce per-step latency α (calibration)", "fake-h100-x8"]
        == compare.MISSING
    )
    shown = compare.formatted(table).set_index("metric")
    assert shown.loc["measured matmul ceiling", "fake-h100-x8"] == "700 TFLOP/s"
    assert shown.loc["ceiling / datasheet", COMMITTED] == "n/a"
    proc = run_cli(
        "run", "compare", "--profile", "default", "-p", "results_root", str(root), "--results-root", str(root)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((root / "comparison" / "compare" / "metrics.json").read_text())
    assert out["machines"] == [COMMITTED, "fake-h100-x8"]


def test_measure_then_analyse_a_multiprocess_study(run_cli, tmp_path):
    meas = tmp_path / "cluster-run"
    proc = run_cli("measure", "overlap", "-f", "studies/overlap/smoke.yaml", "--out", str(meas))
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_cli(
        "run", "overlap", "--profile", "smoke", "--from", str(meas), "--results-root", str(tmp_path / "r")
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rendered = json.loads((tmp_path / "r" / "testbox" / "overlap" / "measurements.json").read_text())
    assert rendered == json.loads((meas / "measurements.json").read_text())
