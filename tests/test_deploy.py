"""A lecture hall on loopback: two Streamlit replicas behind nginx, the class's state in Redis.

The lecturer is on one replica; followers land on both (nginx keeps each browser on its replica by a
cookie) and see the same steps. Starts and stops its own redis-server, nginx and replicas on free ports,
with every file in a temporary folder (deploy/serve.py, the script the README documents).
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_follow import KEY, start_class, wait_for_step

ROOT = Path(__file__).resolve().parent.parent
COOKIE = "decode_lab_replica"


@pytest.fixture(scope="module")
def hall(tmp_path_factory, redis_server, nginx):
    from deploy.serve import start

    h = start(replicas=2, folder=tmp_path_factory.mktemp("hall"), lecturer_key=KEY)
    yield h
    h.stop()


def upstream_for(hall, value: str) -> str:
    """Which replica nginx sends a browser with this cookie to (read off nginx's access log)."""
    req = urllib.request.Request(f"{hall.url}/_stcore/health?probe={value}", headers={"Cookie": f"{COOKIE}={value}"})
    assert urllib.request.urlopen(req, timeout=10).status == 200
    for _ in range(50):
        lines = [x for x in (hall.folder / "access.log").read_text().splitlines() if f"probe={value} " in x]
        if lines:
            return re.search(r"upstream=(\S+)", lines[-1]).group(1)
        time.sleep(0.05)
    raise AssertionError("nginx logged no request for " + value)


def test_the_nginx_config_is_sticky_and_upgrades_websockets():
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "hash $replica_id consistent" in conf and "Set-Cookie $replica_cookie" in conf
    assert "proxy_set_header Upgrade $http_upgrade" in conf and "Connection $connection_upgrade" in conf
    assert "daemon off" in conf and "pid @DIR@/nginx.pid" in conf


def test_the_kubernetes_manifest_has_session_affinity_and_redis():
    import yaml

    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "decode-lab") in kinds and ("Service", "decode-lab") in kinds
    assert ("Deployment", "decode-lab-redis") in kinds and ("Service", "decode-lab-redis") in kinds
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "decode-lab")
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    app = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "decode-lab")
    env = {e["name"] for e in app["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"DECODE_LAB_REDIS_URL", "DECODE_LAB_LECTURER_KEY"} <= env


def test_followers_on_both_replicas_see_the_lecturers_steps(hall, browser):
    from playwright.sync_api import expect

    by_replica: dict[str, str] = {}
    for i in range(64):  # a cookie value for each replica
        by_replica.setdefault(upstream_for(hall, f"probe{i}"), f"probe{i}")
        if len(by_replica) == 2:
            break
    assert len(by_replica) == 2, by_replica
    (a, cookie_a), (b, cookie_b) = sorted(by_replica.items())

    def page_on(cookie: str, url: str):
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        ctx.add_cookies([{"name": COOKIE, "value": cookie, "url": hall.url}])
        pg = ctx.new_page()
        pg.set_default_timeout(60_000)
        pg.goto(url, wait_until="networkidle")
        return pg

    lect = page_on(cookie_a, hall.url)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled(timeout=60_000)  # a cold replica loads the model first
    link = start_class(lect)
    assert link.startswith(hall.url + "/?follow=")  # the address the lecturer's browser used: nginx's
    followers = [page_on(cookie_a, link), page_on(cookie_b, link), page_on(cookie_b, link)]
    lect.keyboard.press("p")
    expect(lect.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    for i in (1, 2):
        lect.keyboard.press("n")
        expect(lect.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    assert max(wait_for_step(followers, 2, 10)) < 10
    lect.keyboard.press("n")
    expect(lect.get_by_text(re.compile(r"\(3 from decode steps\)"))).to_be_visible()
    assert max(wait_for_step(followers, 3, 10)) < 10
    texts = {pg.locator("[data-testid=dl-text]").first.inner_text() for pg in followers}
    assert len(texts) == 1 and texts == {lect.locator("[data-testid=dl-text]").first.inner_text()}
    for pg in [lect, *followers]:
        assert pg.locator("[data-testid='stException']").count() == 0
        pg.context.close()

    # each browser's websocket went to its own replica: both replicas served followers. nginx logs a
    # websocket when it closes, a moment after the browser's context does, so the lines are waited for.
    for cookie, upstream, pages in ((cookie_a, a, 2), (cookie_b, b, 2)):  # A: the lecturer and one follower
        mine = stream_lines(hall, cookie, pages)
        assert len(mine) >= pages and all(f"upstream={upstream}" in x for x in mine), mine


def stream_lines(hall, cookie: str, at_least: int, seconds: float = 15) -> list[str]:
    """nginx's access-log lines for this cookie's websockets, once it has logged `at_least` (or what it has after
    `seconds`)."""
    deadline = time.monotonic() + seconds
    while True:
        log = (hall.folder / "access.log").read_text().splitlines()
        mine = [x for x in log if "/_stcore/stream" in x and f"replica_cookie={cookie}" in x]
        if len(mine) >= at_least or time.monotonic() > deadline:
            return mine
        time.sleep(0.1)
