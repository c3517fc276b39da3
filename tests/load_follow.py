"""A class following its lecturer: `python -m tests.load --follow [--contexts 30] [--seconds 60] [--every 2]`.

Starts `streamlit run app.py` with a lecturer key on a free loopback port, opens a lecturer and N
follower browser contexts in system Chromium (each its own session), starts a class and Prefill on
the lecturer's page, then presses Next token every `every` seconds for `seconds`. Each follower page
notes, in the browser, the moment its stage first shows each step (a MutationObserver: no polling
from here); the latency of a step is that moment minus the moment of the lecturer's key press. All
the browsers and the server share this machine's clock (and its cores).

Reports p50/p95/max click-to-follower latency, steps a follower never showed, errors, the server's
CPU per update (and while the class only polls), its RSS, and how the machine's CPU was shared.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import time

from playwright.async_api import async_playwright

from tests.appserver import start_app
from tests.load import CHROMIUM, FLAGS, cpu_seconds, free_port, peak_rss_mb, percentile

SEEN_JS = """() => {
  window.__seen = {}; window.__drawn = {};
  const note = () => {
    for (const el of document.querySelectorAll('[data-testid=dl-follow-stage]')) {
      const s = el.getAttribute('data-step');
      if (!(s in window.__seen)) {
        window.__seen[s] = performance.timeOrigin + performance.now();
        window.__drawn[s] = Number(el.getAttribute('data-drawn'));
      }
    }
  };
  new MutationObserver(note).observe(document.body, {childList: true, subtree: true, attributes: true});
  note();
}"""


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(port: int, key: str) -> subprocess.Popen:
    return start_app(port, DECODE_LAB_LECTURER_KEY=key)


async def open_lecturer(browser, url: str, key: str):
    ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
    pg = await ctx.new_page()
    pg.set_default_timeout(120_000)
    await pg.goto(url, wait_until="networkidle")
    await pg.get_by_role("button", name="Prefill").wait_for()
    await pg.get_by_text("Lead a class").click()
    await pg.get_by_label("lecturer key", exact=True).fill(key)
    await pg.get_by_role("button", name="Start a class").click()
    await pg.locator("[data-testid=stSidebar] [data-testid=dl-follow-qr]").wait_for()
    link = re.search(r"https?://[^\s<\"]+/\?follow=[A-Z2-9]{6}", await pg.content()).group(0)
    return pg, link


async def open_follower(browser, link: str, n: int, errors: list):
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    pg = await ctx.new_page()
    pg.set_default_timeout(120_000)
    try:
        await pg.goto(link, wait_until="networkidle")
        await pg.locator("[data-testid=dl-follow-stage]").first.wait_for()
        await pg.evaluate(SEEN_JS)
    except Exception as e:  # noqa: BLE001 - counted, never silent
        errors.append(f"follower {n}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return pg


def niced_chromium(nice: int) -> str:
    """System Chromium at a lower CPU priority (nice > 0) for the followers' browsers, so that on this one machine
    the server and the lecturer's browser are not starved by thirty students' browsers, which in a lecture hall run
    on the students' own devices. 0: Chromium as it is."""
    if nice <= 0:
        return CHROMIUM
    import tempfile

    wrapper = os.path.join(tempfile.mkdtemp(prefix="decode-lab-load-"), "chromium")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nexec nice -n {int(nice)} {CHROMIUM} "$@"\n')
    os.chmod(wrapper, 0o755)
    return wrapper


async def lecture(contexts: int, seconds: float, every: float, url: str, key: str, server_pid: int,
                  nice: int = 0) -> dict:
    errors: list[str] = []
    async with async_playwright() as p:
        # the lecturer's browser apart: in a lecture hall it is the lecturer's own laptop
        lect_browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        browser = await p.chromium.launch(executable_path=niced_chromium(nice), args=FLAGS)
        lect, link = await open_lecturer(lect_browser, url, key)
        await lect.keyboard.press("p")
        await lect.get_by_text(re.compile(r"\(0 from Next token\)")).first.wait_for()
        followers = []
        for start in range(0, contexts, 6):  # open in small groups: 30 first loads at once only measure the CPU
            followers += await asyncio.gather(*(open_follower(browser, link, n, errors)
                                                for n in range(start, min(contexts, start + 6))))
        await asyncio.sleep(3)
        cpu0, t0 = cpu_seconds(server_pid), time.time()
        await asyncio.sleep(10)  # the class only polls: what does waiting cost the server?
        idle_cpu_per_s = (cpu_seconds(server_pid) - cpu0) / (time.time() - t0)

        clicks: dict[int, float] = {}
        cpu0, machine0 = cpu_seconds(server_pid), cpu_seconds()
        rss_max = rss_mb(server_pid)
        stop_at, step = time.time() + seconds, 0
        while time.time() < stop_at:
            tick = time.time()
            step += 1
            clicks[step] = time.time() * 1000
            await lect.keyboard.press("n")
            try:
                await lect.get_by_text(re.compile(rf"\({step} from Next token\)")).first.wait_for(timeout=every * 5000)
            except Exception:  # noqa: BLE001
                errors.append(f"lecturer: step {step} did not show")
            rss_max = max(rss_max, rss_mb(server_pid))
            await asyncio.sleep(max(0.0, every - (time.time() - tick)))
        await asyncio.sleep(3)  # the last step reaches everyone
        server_cpu = cpu_seconds(server_pid) - cpu0
        machine_cpu = cpu_seconds() - machine0
        window = seconds + 3

        lat, server_lat, missed, late_steps = [], [], 0, []
        for n, pg in enumerate(followers):
            try:
                seen = await pg.evaluate("() => window.__seen || {}")
                drawn = await pg.evaluate("() => window.__drawn || {}")
                if await pg.locator("[data-testid='stException'], [data-testid='stAlertContentError']").count():
                    errors.append(f"follower {n}: an error box on the page")
            except Exception as e:  # noqa: BLE001
                errors.append(f"follower {n}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            for s, at in clicks.items():
                if str(s) in seen:
                    lat.append(seen[str(s)] - at)
                    server_lat.append(drawn[str(s)] - at)
                else:
                    missed += 1
                    late_steps.append(s)
            if str(step) not in seen:
                errors.append(f"follower {n}: never showed the last step ({step})")
        await browser.close()
        await lect_browser.close()
    return {"contexts": contexts, "seconds": seconds, "every": every, "updates": step, "latencies_ms": lat,
            "server_latencies_ms": server_lat,
            "missed": missed, "errors": errors, "idle_cpu_per_s": idle_cpu_per_s, "server_cpu_s": server_cpu,
            "machine_cpu_s": machine_cpu, "window_s": window, "rss_max_mb": rss_max}


def run(contexts: int = 30, seconds: float = 60, every: float = 2.0, nice: int = 0) -> dict:
    key = secrets.token_urlsafe(12)
    port = free_port()
    server = start_server(port, key)
    try:
        rep = asyncio.run(lecture(contexts, seconds, every, f"http://127.0.0.1:{port}", key, server.pid, nice))
        rep["nice"] = nice
        rep["server_peak_rss_mb"] = peak_rss_mb(server.pid)
        rep["server_alive"] = server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    lat = rep["latencies_ms"]
    srv = rep["server_latencies_ms"]
    rep.update(p50_ms=percentile(lat, 50), p95_ms=percentile(lat, 95), max_ms=max(lat) if lat else float("nan"),
               server_p50_ms=percentile(srv, 50), server_p95_ms=percentile(srv, 95), cpus=os.cpu_count())
    # server CPU per update: everything the server spent while the lecturer clicked, less what polling alone costs
    polling = rep["idle_cpu_per_s"] * rep["window_s"]
    rep["server_cpu_per_update_ms"] = 1000 * (rep["server_cpu_s"] - polling) / max(1, rep["updates"])
    rep["server_cpu_per_update_all_ms"] = 1000 * rep["server_cpu_s"] / max(1, rep["updates"])
    return rep


def report(rep: dict) -> str:
    return "\n".join([
        f"{rep['contexts']} followers + 1 lecturer, Next token every {rep['every']:g} s for {rep['seconds']:.0f} s: "
        f"{rep['updates']} updates, {len(rep['latencies_ms'])} follower screens updated; click -> follower's stage "
        f"p50 {rep['p50_ms']:.0f} ms, p95 {rep['p95_ms']:.0f} ms, max {rep['max_ms']:.0f} ms; steps a follower "
        f"skipped {rep['missed']}; errors {len(rep['errors'])}",
        f"of which the server: click -> follower's page drawn on the server p50 {rep['server_p50_ms']:.0f} ms, "
        f"p95 {rep['server_p95_ms']:.0f} ms (the rest: sending it, and the follower's browser drawing it)",
        f"server: {rep['server_cpu_per_update_all_ms']:.0f} ms CPU per update in all "
        f"({rep['server_cpu_per_update_ms']:.0f} ms for the update itself: the lecturer's pass and page, and "
        f"{rep['contexts']} follower reruns; polling alone costs {1000 * rep['idle_cpu_per_s']:.0f} ms CPU per "
        f"second for the whole class); RSS {rep['rss_max_mb']:.0f} MiB during the lecture, peak "
        f"{rep['server_peak_rss_mb']:.0f} MiB",
        f"machine: {rep['cpus']} cores shared by the server and all {rep['contexts'] + 1} browser contexts"
        + (f" (browsers at nice {rep['nice']})" if rep["nice"] else "") + "; the "
        f"server used {rep['server_cpu_s']:.0f} s of the {rep['machine_cpu_s']:.0f} s of CPU the machine spent in "
        f"{rep['window_s']:.0f} s (in a classroom each student's browser runs on their own device)",
    ])
