"""The documentation site, built and looked at: ``mkdocs build --strict`` (warnings are errors: a broken
internal link or anchor, a page missing from the navigation), then the built site in Debian's Chromium.

Slow (CI's docs step, after ``pip install -e '.[docs]'``); skipped without mkdocs, playwright or
chromium. With ``FEDBANDITS_SCREENSHOTS=DIR`` the pages looked at are saved there as PNGs.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.slow
#: pages whose figures must load (a figure missing from docs/ would show as a broken image)
FIGURE_PAGES = ("frontier/", "comparisons/", "reproduction/", "serving/", "bakeoff/")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT, out)
    assert done.returncode == 0, done.stderr[-4000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    where = os.environ.get("FEDBANDITS_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=False)


def broken_images(page) -> list[str]:  # type: ignore[no-untyped-def]
    page.wait_for_load_state("load")
    return page.eval_on_selector_all("img", "imgs => imgs.filter(i => !(i.naturalWidth > 0)).map(i => i.src)")


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_site_builds_with_warnings_as_errors(site: str) -> None:
    """The fixture's ``mkdocs build --strict`` passed: no broken link, anchor or nav entry."""
    assert site.startswith("http://127.0.0.1:")


def test_a_link_to_a_missing_section_fails_the_build(tmp_path: Path) -> None:
    """The check can fail: a copy of the docs with one link to an anchor no page has is refused."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "src").symlink_to(ROOT / "src")
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")  # mkdocs.yml's build hook
    page = tmp_path / "docs" / "tuning.md"
    text = page.read_text(encoding="utf-8") + "\nSee [the seeds](privacy.md#no-such-section).\n"
    page.write_text(text, encoding="utf-8")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0 and "no-such-section" in done.stderr, done.stderr[-2000:]


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (apt install chromium)")
def test_the_site_reads_from_home_to_a_reference_page_in_two_clicks(site: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_serve_dashboard import FLAGS

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(site)
        assert page.title().startswith("fedbandits")
        nav = page.inner_text("nav.md-nav--primary")
        for section in ("Getting started", "Concepts", "How-to guides", "Reference", "Architecture", "Reproduction"):
            assert section in nav, section
        shoot(page, "docs-home.png")
        # click 1: the configuration reference from the home page's table of contents; click 2: one parameter's row
        page.click("article a[href='reference/config/']")
        page.wait_for_selector("h1")
        assert page.inner_text("h1").startswith("Configuration reference")
        page.locator("a[href='#fedlinucb']:visible").first.click()  # the page's table of contents
        assert page.url.endswith("#fedlinucb")
        assert "bias_noise_ratio" in page.inner_text("article")
        shoot(page, "docs-reference-config.png")
        page.goto(site + "reference/cli/")
        assert "fedbandits serve demo" in page.inner_text("article")
        page.goto(site + "reference/api/")
        assert "from_config" in page.inner_text("article")  # mkdocstrings rendered Agent's docstrings
        assert ":class:" not in page.inner_text("article")  # the Sphinx roles read as code (scripts/mkdocs_hooks.py)
        shoot(page, "docs-reference-api.png")
        for path in FIGURE_PAGES:
            page.goto(site + path)
            assert broken_images(page) == [], path
            assert page.locator("article img").count() >= 1, path
        assert errors == []
        browser.close()
