"""One real browser, end to end: system Chromium driven by Playwright against `streamlit run app.py`.

Chromium comes from the system (`apt-get install chromium`), never a browser download.
The server is started here on a free loopback port and stopped at the end.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("DECODE_LAB_CHROMIUM", "/usr/bin/chromium")
expect.set_options(timeout=60_000)  # the first page view loads the model
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--server.headless", "true"],
                            cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def page(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        pg.goto(server, wait_until="networkidle")
        yield pg
        browser.close()


def test_a_deep_link_as_the_servers_first_request_gets_the_whole_app(server):
    """Streamlit runs a pages/ file alone when a fresh server's first request is /lessons; the app must recover."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        pg.goto(f"{server}/lessons?seed=3", wait_until="networkidle")
        expect(pg.get_by_role("heading", name="Lessons: how a language model generates text")).to_be_visible()
        expect(pg.get_by_role("link", name="Step through")).to_be_visible()  # app.py's navigation, not the folder's
        assert pg.locator("[data-testid='stException']").count() == 0
        assert "seed=3" in pg.url  # the link's settings survived
        browser.close()


def status_text(pg) -> str:
    return pg.get_by_text(re.compile(r"from Next token")).first.inner_text()


def test_prefill_five_tokens_cache_toggle_and_every_page(page, server):
    pg = page
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    expect(pg.get_by_role("button", name="Next token")).to_be_disabled()
    pg.get_by_role("button", name="Prefill").click()
    expect(pg.get_by_text(re.compile(r"0 from Next token"))).to_be_visible()
    for i in range(1, 6):
        pg.get_by_role("button", name="Next token").click()
        expect(pg.get_by_text(re.compile(rf"\({i} from Next token\)"))).to_be_visible()
    text = status_text(pg)
    assert re.search(r"6 new tokens", text)
    assert int(re.search(r"KV cache ([\d,]+) bytes", text).group(1).replace(",", "")) > 0

    pg.get_by_text("KV cache", exact=True).first.click()  # the sidebar toggle's label
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()  # the run was reset
    pg.get_by_role("button", name="Prefill").click()
    pg.get_by_role("button", name="Next token").click()
    expect(pg.get_by_text(re.compile(r"1 from Next token"))).to_be_visible()
    assert "KV cache 0 bytes" in status_text(pg)
    assert pg.locator("[data-testid='stException']").count() == 0

    for title in ("Lessons", "Race: cache vs no cache", "Scale: KV memory and roofline", "Model"):
        pg.get_by_role("link", name=title).click()
        pg.wait_for_load_state("networkidle")
        expect(pg.get_by_role("heading").first).to_be_visible()
        assert pg.locator("[data-testid='stException']").count() == 0, title
        assert pg.locator("[data-testid='stAlertContentError']").count() == 0, title
