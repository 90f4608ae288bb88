"""The dashboards of `fedbandits serve` in a real headless browser: Debian's Chromium driven by
Playwright (issue "Live decisions, part 2", item 4).  Skipped without playwright or /usr/bin/chromium
(CI installs both in its serve step).  ``FEDBANDITS_SCREENSHOTS=DIR`` keeps the screenshots (the
docs' figures are taken this way)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from fedbandits.federation.processes import free_port  # noqa: E402
from fedbandits.serve.coordinator import Coordinator  # noqa: E402
from fedbandits.serve.demo import start_silo, write_token  # noqa: E402
from fedbandits.serve.links import HttpLink  # noqa: E402
from fedbandits.serve.server_http import federation_app  # noqa: E402
from servehelp import one_silo_config  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (apt install chromium)")
# the flags this machine's closed network needs (no background connections, no sandbox as root)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def traffic(url: str, token: str, n: int, rng: np.random.Generator) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as client:
        for i in range(n):
            x = rng.standard_normal((10, 5))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            d = client.post(url + "/v1/decisions", json={"features": x.tolist()}).json()
            if i % 4:
                client.post(url + "/v1/rewards", json={"decision_id": d["decision_id"], "reward": float(rng.uniform())})


def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    where = os.environ.get("FEDBANDITS_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=True)


@pytest.mark.parametrize("mechanism", ["tree", "banded"])
def test_the_silo_and_federation_dashboards_show_the_live_figures(tmp_path, mechanism):
    config = one_silo_config(tmp_path, batch=1000, mechanism=mechanism)
    shots = "" if mechanism == "tree" else f"-{mechanism}"
    tokens = (tmp_path / "traffic.token", tmp_path / "sync.token")
    token, sync = write_token(tokens[0]), write_token(tokens[1])
    view = write_token(tmp_path / "view.token")
    silo = start_silo(config, 0, "fed", tmp_path, tokens, ["--sync-seconds", "1"])
    coordinator = Coordinator(config, HttpLink([silo.url], sync), tmp_path / "server", entry="fed", sync_seconds=1.0)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(federation_app(coordinator.status, view), port=port, log_level="warning"))
    web = threading.Thread(target=server.run, daemon=True)
    web.start()
    try:
        rng = np.random.default_rng(3)
        for _ in range(3):  # three rounds with traffic between them
            traffic(silo.url, token, 40, rng)
            assert coordinator.tick().closed
            time.sleep(1.0)
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            # without a token the page asks for one and shows no figure
            page.goto(silo.url + "/dashboard")
            page.wait_for_selector("#login:not([hidden])")
            assert "a token is needed" in page.inner_text("#error")
            page.fill("#token", token)
            page.click("#login button")
            page.wait_for_selector("body[data-loaded=yes]")
            assert page.inner_text("[data-field=decisions] b") == "120"
            assert page.inner_text("[data-field=rewarded] b") == "90"
            assert "model 0.2" in page.inner_text("#sub")
            assert page.locator("#reward-chart path.line").count() == 1
            assert page.locator("#decisions-chart path.line").count() == 1
            assert page.locator("#table tr").count() == 4  # header + 3 releases
            budget = page.inner_text("[data-field='epsilon spent']")
            if mechanism == "tree":
                assert "of 100 releases" in budget
            else:  # one guarantee for every release, and the noise's growth instead of a budget bar
                assert "streaming release (band 100): one guarantee for every release" in budget
                assert "prefix noise std" in budget and "at 10x the releases" in budget
            shoot(page, f"serve-dashboard-silo{shots}.png")
            # the federation's page, the token in the address's fragment
            page.goto(f"http://127.0.0.1:{port}/dashboard#token={view}")
            page.wait_for_selector("body[data-loaded=yes]")
            assert page.inner_text("[data-field='rounds closed'] b") == "3"
            assert page.inner_text("[data-field='silos reachable'] b") == "1 / 1"
            assert page.locator("#samples-chart path.line").count() == 1
            streaming = "streaming release: one guarantee for every release"
            assert (streaming in page.inner_text("[data-field='epsilon spent']")) == (mechanism == "banded")
            shoot(page, f"serve-dashboard-federation{shots}.png")
            browser.close()
    finally:
        server.should_exit = True
        web.join(timeout=10)
        coordinator.close()
        silo.process.stop()
