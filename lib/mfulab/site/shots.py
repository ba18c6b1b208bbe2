"""Headless Chromium for the course site: the browser the site's tests drive, and the
screenshots of a book that ``docs/screenshots/`` keeps (``python -m mfulab site --screenshots DIR``).

Needs ``selenium`` (the ``test`` extra) and a Chromium with its driver on the PATH (Debian:
``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

WINDOW = (1200, 1600)  # the screenshots' viewport, CSS pixels


def chromium_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium"), shutil.which("chromedriver")


def chromium(user_data_dir, window=WINDOW):
    """A headless Chromium that keeps its console messages and its network log, isolated from
    the network services a browser calls by itself (updates, sync)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium_paths()
    if not (binary and driver):
        raise RuntimeError(
            "chromium and chromedriver are not on the PATH (apt-get install chromium chromium-driver)"
        )
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
        "--hide-scrollbars",
        f"--window-size={window[0]},{window[1]}",
        f"--user-data-dir={user_data_dir}",
    ):
        opts.add_argument(flag)
    opts.binary_location = binary
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def screenshots(book, dest, pages: dict[str, str] | None = None) -> list[Path]:
    """PNG screenshots (``WINDOW`` viewport, top of the page) of a built book's pages into
    ``dest``, as ``site-<name>.png``; reduced to 256 colours to stay small. By default the
    landing page, the first chapter of the course and the claims page."""
    import tempfile

    from PIL import Image

    from mfulab.site.pages import CLAIMS_DOC
    from mfulab.studykit.registry import REGISTRY

    if pages is None:
        pages = {
            "landing": "index.html",
            "chapter": f"{next(iter(REGISTRY))}.html",
            "claims": f"{CLAIMS_DOC}.html",
        }

    book, dest = Path(book), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="mfulab-chromium-") as profile:
        driver = chromium(profile)
        try:
            driver.execute_cdp_cmd(  # the viewport itself, not the window around it
                "Emulation.setDeviceMetricsOverride",
                {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False},
            )
            for name, page in pages.items():
                driver.get((book / page).resolve().as_uri())
                driver.execute_script("return document.fonts.ready")
                path = dest / f"site-{name}.png"
                driver.save_screenshot(str(path))
                with Image.open(path) as shot:
                    shot.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE).save(
                        path, optimize=True
                    )
                written.append(path)
        finally:
            driver.quit()
    return written
