"""A class following its lecturer: `python -m tests.load --follow [--contexts 30] [--seconds 60] [--every 2]
[--nice 19] [--replicas 2]`.

Starts `streamlit run app.py` with a lecturer key on a free loopback port (or, with --replicas N, Redis, N
replicas and nginx: deploy/serve.py), opens a lecturer and N follower browser contexts in system Chromium
(each its own session; with replicas, followers are spread over them by nginx's cookie), starts a class and
Prefill on the lecturer's page, then presses Next token every `every` seconds for `seconds`. Each follower's
live view marks, on its stage, the step it shows and when the server published it; a MutationObserver in the
page notes the moment each step's stage is on screen (decoded), with no polling from here. All the browsers
and the server share this machine's clock (and its cores).

Reports click -> follower's screen p50/p95/max, click -> pictures published on the server (the server's part),
steps a follower never showed, errors, the server's CPU per update (everything it spent while the class ran,
polling included) and while the class only waits, the browsers' main-thread time per step per tab (Chrome's
TaskDuration), RSS, and with Redis the commands it received while the class waited (a timer would show).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import time
import urllib.request

from playwright.async_api import async_playwright

from tests.appserver import start_app
from tests.load import CHROMIUM, FLAGS, cpu_seconds, free_port, peak_rss_mb, percentile

COOKIE = "decode_lab_replica"
SEEN_JS = """() => {
  window.__seen = {}; window.__published = {};
  const note = () => {
    for (const el of document.querySelectorAll('[data-testid=dl-follow-stage][data-step]')) {
      const s = el.getAttribute('data-step');
      if (!(s in window.__seen)) {
        window.__seen[s] = performance.timeOrigin + performance.now();
        window.__published[s] = Number(el.getAttribute('data-published') || 0);
      }
    }
  };
  new MutationObserver(note).observe(document.body, {childList: true, subtree: true, attributes: true,
                                                      attributeFilter: ['data-step']});
  note();
}"""


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(port: int, key: str) -> subprocess.Popen:
    return start_app(port, DECODE_LAB_LECTURER_KEY=key)


async def open_lecturer(browser, url: str, key: str, cookie: str | None = None):
    ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
    if cookie:
        await ctx.add_cookies([{"name": COOKIE, "value": cookie, "url": url}])
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


SAMPLED_TABS = 3  # tabs whose main-thread time Chrome reports (Performance domain: a little work in each tab)


async def open_follower(browser, link: str, n: int, errors: list, cookie: str | None = None):
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    if cookie:
        await ctx.add_cookies([{"name": COOKIE, "value": cookie, "url": link}])
    pg = await ctx.new_page()
    pg.set_default_timeout(120_000)
    try:
        await pg.goto(link, wait_until="networkidle")
        await pg.locator("[data-testid=dl-follow-stage][data-step]").first.wait_for()
        await pg.evaluate(SEEN_JS)
        pg.cdp = None
        if n < SAMPLED_TABS:
            pg.cdp = await ctx.new_cdp_session(pg)
            await pg.cdp.send("Performance.enable")
    except Exception as e:  # noqa: BLE001 - counted, never silent
        errors.append(f"follower {n}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return pg


async def task_seconds(pg) -> float | None:
    """The tab's main-thread busy time so far (Chrome's TaskDuration), or None (a tab not sampled)."""
    if getattr(pg, "cdp", None) is None:
        return None
    try:
        metrics = (await pg.cdp.send("Performance.getMetrics"))["metrics"]
        return next(m["value"] for m in metrics if m["name"] == "TaskDuration")
    except Exception:  # noqa: BLE001
        return None


def descendants(root: int) -> set[int]:
    """Every process below `root` (this driver: Playwright's node, and the browsers it started)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except OSError:
                pass
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def cpu_of(pids) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except (OSError, IndexError):
            pass  # gone
    return total


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


class Servers:
    """What serves the class: one app, or Redis + replicas + nginx. Its CPU, RSS and (Redis) command count."""

    def __init__(self, replicas: int, key: str):
        self.hall = None
        self.cookies: list[str | None] = [None]
        if replicas:
            from deploy.serve import start

            self.hall = start(replicas=replicas, lecturer_key=key, listen_host="127.0.0.1")
            self.url = self.hall.url
            self.pids = [p.pid for p in self.hall.procs]
            self.cookies = cookie_per_replica(self.hall)
        else:
            port = free_port()
            self.proc = start_server(port, key)
            self.url = f"http://127.0.0.1:{port}"
            self.pids = [self.proc.pid]

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def rss(self) -> float:
        return sum(rss_mb(pid) for pid in self.pids)

    def peak_rss(self) -> float:
        return sum(peak_rss_mb(pid) for pid in self.pids)

    def redis_commands(self) -> int | None:
        if self.hall is None:
            return None
        import redis

        return int(redis.Redis.from_url(self.hall.redis_url).info("stats")["total_commands_processed"])

    def streams_per_replica(self) -> dict[str, int] | None:
        """Followers' event streams each replica served (nginx logs a stream when it closes)."""
        if self.hall is None:
            return None
        counts: dict[str, int] = {}
        for line in (self.hall.folder / "access.log").read_text().splitlines():
            if "/class/" in line and "/events?" in line:
                upstream = re.search(r"upstream=(\S+)", line).group(1)
                counts[upstream] = counts.get(upstream, 0) + 1
        return counts

    def alive(self) -> bool:
        return all(p.poll() is None for p in (self.hall.procs if self.hall is not None else [self.proc]))

    def stop(self) -> None:
        if self.hall is not None:
            self.hall.stop()
        else:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def cookie_per_replica(hall) -> list[str]:
    """One cookie value per replica (nginx hashes the cookie; its access log says where each probe went)."""
    found: dict[str, str] = {}
    for i in range(200):
        value = f"probe{i}"
        req = urllib.request.Request(f"{hall.url}/_stcore/health?probe={value}",
                                     headers={"Cookie": f"{COOKIE}={value}"})
        urllib.request.urlopen(req, timeout=10).read()
        for _ in range(50):
            lines = [x for x in (hall.folder / "access.log").read_text().splitlines() if f"probe={value} " in x]
            if lines:
                found.setdefault(re.search(r"upstream=(\S+)", lines[-1]).group(1), value)
                break
            time.sleep(0.02)
        if len(found) == len(hall.replica_urls):
            return list(found.values())
    raise RuntimeError(f"nginx sent 200 probes to only {len(found)} replicas")


async def lecture(contexts: int, seconds: float, every: float, servers: Servers, key: str, nice: int = 0) -> dict:
    errors: list[str] = []
    cookies = servers.cookies
    async with async_playwright() as p:
        # the lecturer's browser apart: in a lecture hall it is the lecturer's own laptop
        driver = descendants(os.getpid())  # this process and Playwright's driver
        lect_browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        lect, link = await open_lecturer(lect_browser, servers.url, key, cookies[0])
        await lect.keyboard.press("p")
        await lect.get_by_text(re.compile(r"\(0 from decode steps\)")).first.wait_for()
        others = descendants(os.getpid())  # the driver and the lecturer's browser, its page's renderer included
        # the followers' browser is started only now, so that all of its processes (its browser and GPU processes,
        # which every tab's events and frames go through, and each tab's renderer) count as the followers'
        browser = await p.chromium.launch(executable_path=niced_chromium(nice), args=FLAGS)
        followers = []
        for start in range(0, contexts, 6):  # open in small groups: 30 first loads at once only measure the CPU
            followers += await asyncio.gather(*(open_follower(browser, link, n, errors, cookies[n % len(cookies)])
                                                for n in range(start, min(contexts, start + 6))))
        await asyncio.sleep(3)
        cpu0, t0, redis0 = servers.cpu(), time.time(), servers.redis_commands()
        await asyncio.sleep(10)  # the class only waits: what does that cost the server (and Redis)?
        idle_cpu_per_s = (servers.cpu() - cpu0) / (time.time() - t0)
        redis_idle = None if redis0 is None else servers.redis_commands() - redis0 - 1  # less our own INFO

        clicks: dict[int, float] = {}
        tabs = descendants(os.getpid()) - others  # the followers' browser: its renderers, GPU and browser process
        others = descendants(os.getpid()) - tabs  # this driver, Playwright's, the lecturer's browser
        tasks0 = [await task_seconds(pg) for pg in followers]
        tabs_cpu0, others_cpu0, driver_cpu0 = cpu_of(tabs), cpu_of(others), cpu_of(driver)
        cpu0, machine0 = servers.cpu(), cpu_seconds()
        rss_max = servers.rss()
        stop_at, step = time.time() + seconds, 0
        while time.time() < stop_at:
            tick = time.time()
            step += 1
            clicks[step] = time.time() * 1000
            await lect.keyboard.press("n")
            try:
                await lect.get_by_text(re.compile(rf"\({step} from decode steps\)")).first.wait_for(timeout=every * 5000)
            except Exception:  # noqa: BLE001
                errors.append(f"lecturer: step {step} did not show")
            rss_max = max(rss_max, servers.rss())
            await asyncio.sleep(max(0.0, every - (time.time() - tick)))
        await asyncio.sleep(3)  # the last step reaches everyone
        server_cpu = servers.cpu() - cpu0  # every count read at once: one window for all of them
        machine_cpu = cpu_seconds() - machine0
        tabs_cpu, others_cpu = cpu_of(tabs) - tabs_cpu0, cpu_of(others) - others_cpu0
        driver_cpu = cpu_of(driver) - driver_cpu0
        tasks1 = [await task_seconds(pg) for pg in followers]  # slow while 100 tabs catch up: read last
        window = seconds + 3

        lat, server_lat, missed, late_steps = [], [], 0, []
        for n, pg in enumerate(followers):
            try:
                seen = await pg.evaluate("() => window.__seen || {}")
                published = await pg.evaluate("() => window.__published || {}")
                if await pg.locator("[data-testid='stException'], [data-testid='stAlertContentError']").count():
                    errors.append(f"follower {n}: an error box on the page")
            except Exception as e:  # noqa: BLE001
                errors.append(f"follower {n}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            for s, at in clicks.items():
                if str(s) in seen:
                    lat.append(seen[str(s)] - at)
                    if published.get(str(s)):
                        server_lat.append(published[str(s)] - at)
                else:
                    missed += 1
                    late_steps.append(s)
            if str(step) not in seen:
                errors.append(f"follower {n}: never showed the last step ({step})")
        tab_ms = [1000 * (b - a) / max(1, step) for a, b in zip(tasks0, tasks1) if a is not None and b is not None]
        await browser.close()
        await lect_browser.close()
    return {"contexts": contexts, "seconds": seconds, "every": every, "updates": step, "latencies_ms": lat,
            "server_latencies_ms": server_lat, "missed": missed, "errors": errors, "idle_cpu_per_s": idle_cpu_per_s,
            "server_cpu_s": server_cpu, "machine_cpu_s": machine_cpu, "window_s": window, "rss_max_mb": rss_max,
            "tab_ms_per_step": sorted(tab_ms), "redis_idle_commands": redis_idle,
            "tab_cpu_ms_per_step": 1000 * tabs_cpu / max(1, step) / max(1, len(followers)),
            "tabs_cpu_s": tabs_cpu, "lecturer_cpu_s": others_cpu - driver_cpu, "driver_cpu_s": driver_cpu}


def run(contexts: int = 30, seconds: float = 60, every: float = 2.0, nice: int = 0, replicas: int = 0) -> dict:
    key = secrets.token_urlsafe(12)
    load0 = os.getloadavg()
    servers = Servers(replicas, key)
    try:
        rep = asyncio.run(lecture(contexts, seconds, every, servers, key, nice))
        time.sleep(1)  # nginx logs the closed streams
        rep.update(nice=nice, replicas=replicas, server_peak_rss_mb=servers.peak_rss(), server_alive=servers.alive(),
                   load_before=load0, streams_per_replica=servers.streams_per_replica())
    finally:
        servers.stop()
    lat, srv, tab = rep["latencies_ms"], rep["server_latencies_ms"], rep["tab_ms_per_step"]
    rep.update(p50_ms=percentile(lat, 50), p95_ms=percentile(lat, 95), max_ms=max(lat) if lat else float("nan"),
               server_p50_ms=percentile(srv, 50), server_p95_ms=percentile(srv, 95), cpus=os.cpu_count(),
               tab_p50_ms=percentile(tab, 50), tab_max_ms=max(tab) if tab else float("nan"))
    # everything the server spent while the lecturer clicked, waiting included, per update; and waiting alone
    rep["server_cpu_per_update_ms"] = 1000 * rep["server_cpu_s"] / max(1, rep["updates"])
    rep["server_cpu_waiting_per_update_ms"] = 1000 * rep["idle_cpu_per_s"] * rep["window_s"] / max(1, rep["updates"])
    return rep


def report(rep: dict) -> str:
    n = max(1, rep["updates"])
    busy = (rep["tabs_cpu_s"] + rep["lecturer_cpu_s"] + rep["server_cpu_s"]) / n / max(1, rep["cpus"])
    where = (f"{rep['replicas']} replicas behind nginx, Redis" if rep["replicas"] else "one server")
    redis = ("" if rep["redis_idle_commands"] is None else
             f"; Redis received {rep['redis_idle_commands']} commands in those 10 s; followers' streams per replica "
             + ", ".join(f"{k}: {v}" for k, v in sorted(rep["streams_per_replica"].items())))
    return "\n".join([
        f"{rep['contexts']} followers + 1 lecturer ({where}), Next token every {rep['every']:g} s for "
        f"{rep['seconds']:.0f} s: {rep['updates']} updates, {len(rep['latencies_ms'])} follower screens updated; "
        f"click -> follower's screen p50 {rep['p50_ms']:.0f} ms, p95 {rep['p95_ms']:.0f} ms, max {rep['max_ms']:.0f} "
        f"ms; steps a follower skipped {rep['missed']}; errors {len(rep['errors'])}",
        f"the server's part: click -> the step's pictures published p50 {rep['server_p50_ms']:.0f} ms, p95 "
        f"{rep['server_p95_ms']:.0f} ms (the rest: the event to the tab, and the tab drawing it)",
        f"server CPU per update: {rep['server_cpu_per_update_ms']:.0f} ms for the whole class, everything counted "
        f"(the lecturer's pass and page, publishing, every follower's event and pictures; {rep['contexts']} open "
        f"streams); waiting alone costs {1000 * rep['idle_cpu_per_s']:.1f} ms CPU per second{redis}; RSS "
        f"{rep['rss_max_mb']:.0f} MiB during the lecture, peak {rep['server_peak_rss_mb']:.0f} MiB",
        f"each follower's tab: {rep['tab_cpu_ms_per_step']:.0f} ms of CPU per step (its browser's processes, "
        f"averaged over the tabs); {rep['tab_p50_ms']:.0f} ms of main-thread time per step (Chrome's TaskDuration, "
        f"wall clock: longer when the cores are shared; median of {SAMPLED_TABS} tabs, max {rep['tab_max_ms']:.0f} ms)",
        f"machine: {rep['cpus']} cores shared by the server and all {rep['contexts'] + 1} browser contexts"
        + (f" (followers' browsers at nice {rep['nice']})" if rep["nice"] else "") + f"; of the "
        f"{rep['machine_cpu_s']:.0f} s of CPU the machine spent in {rep['window_s']:.0f} s the server used "
        f"{rep['server_cpu_s']:.0f} s, the followers' browser {rep['tabs_cpu_s']:.0f} s, the lecturer's browser "
        f"{rep['lecturer_cpu_s']:.0f} s, this driver (and Playwright's) {rep['driver_cpu_s']:.0f} s, anything else the "
        f"rest; load average before "
        f"{rep['load_before'][0]:.2f} {rep['load_before'][1]:.2f} {rep['load_before'][2]:.2f}",
        f"per step, all told: the followers' browser {1000 * rep['tabs_cpu_s'] / n:.0f} ms of CPU, the lecturer's "
        f"browser {1000 * rep['lecturer_cpu_s'] / n:.0f} ms, the server {1000 * rep['server_cpu_s'] / n:.0f} ms: "
        f"{busy:.2f} s of all {rep['cpus']} cores (an estimate of how long a step keeps this machine busy; a screen "
        f"counts as drawn when its stage is in the page, and the tab's painting and clean-up come after)",
    ])
