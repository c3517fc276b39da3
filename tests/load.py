"""A full classroom against one server: `python -m tests.load [--contexts 30] [--seconds 60]`.

Starts `streamlit run app.py` on a free loopback port, opens N browser contexts
in system Chromium (each its own session), and has every one type its own
prompt, Prefill, and click Next token as fast as the page answers, all at once,
for T seconds (Reset and start again when a run ends). Reports per-step latency
percentiles as a student feels them (click -> page updated), errors, the
server's peak RSS, and whether any session ever saw another one's text.

Loopback only; bounded in count and time; stops by itself. Not a timed test:
tests/test_load.py runs a small version and checks errors and isolation only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.async_api import async_playwright

from engine.timing import now
from tests.appserver import free_port, start_app

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("DECODE_LAB_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
STATUS = re.compile(r"\((\d+) from decode steps\)")
FIRST_STEP_S = 180  # how long past its window a session that has not stepped yet keeps trying


def peak_rss_mb(pid: int) -> float:
    """The process's high-water resident set size (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time used so far: by one process (user + system), or by the whole machine (all busy time)."""
    tick = os.sysconf("SC_CLK_TCK")
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    cpu = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(cpu) - cpu[3] - cpu[4]) / tick  # everything but idle and iowait


def start_server(port: int) -> subprocess.Popen:
    return start_app(port)


async def student(browser, url: str, n: int, seconds: float, out: dict) -> None:
    """One session: its own prompt, then Prefill / Next token for `seconds` once its page is ready."""
    marker = f"Student{n:02d}"
    prompt = f"{marker} went to the park. Once upon a time"
    ctx = await browser.new_context(viewport={"width": 1200, "height": 900})
    page = await ctx.new_page()
    page.set_default_timeout(120_000)
    lat, errors, foreign = [], [], []
    try:
        await page.goto(url, wait_until="networkidle")
        box = page.get_by_label("prompt", exact=True)
        await box.fill(prompt)
        await box.press("Control+Enter")
        await page.get_by_role("button", name="Prefill").wait_for()
        # for `seconds`, and until it has stepped once: on a busy machine a first Prefill can take most of the
        # window, and a session that never stepped says nothing of isolation (at most FIRST_STEP_S more)
        stop_at = time.time() + seconds
        while time.time() < stop_at or (not lat and time.time() < stop_at + FIRST_STEP_S):
            if await page.get_by_role("button", name="Prefill").is_enabled():
                await page.get_by_role("button", name="Prefill").click()
                await page.get_by_text(STATUS).first.wait_for()
                continue
            nxt = page.get_by_role("button", name="Next token")
            if not await nxt.is_enabled():  # the run finished: start again
                await page.get_by_role("button", name="Reset").click()
                await page.get_by_role("button", name="Prefill").wait_for(state="visible")
                await asyncio.sleep(0.2)
                continue
            before = int(STATUS.search(await page.get_by_text(STATUS).first.inner_text()).group(1))
            t0 = now()
            await nxt.click()
            await page.get_by_text(re.compile(rf"\({before + 1} from decode steps\)")).first.wait_for()
            lat.append((now() - t0) * 1e3)
            shown = await page.locator("[data-testid='dl-text']").first.inner_text()
            if not shown.startswith(prompt) or re.search(r"Student(?!%02d)\d\d" % n, shown):
                foreign.append(shown[:120])
            if await page.locator("[data-testid='stException'], [data-testid='stAlertContentError']").count():
                errors.append("error box on the page")
    except Exception as e:  # noqa: BLE001 - every failure is counted, none may pass silently
        errors.append(f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    finally:
        out[n] = {"latencies_ms": lat, "errors": errors, "foreign": foreign}
        await ctx.close()


async def classroom(url: str, contexts: int, seconds: float) -> dict:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        out: dict = {}
        await asyncio.gather(*(student(browser, url, n, seconds, out) for n in range(contexts)))
        await browser.close()
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def run(contexts: int = 30, seconds: float = 60) -> dict:
    port = free_port()
    server = start_server(port)
    try:
        server_cpu0, machine_cpu0 = cpu_seconds(server.pid), cpu_seconds()
        out = asyncio.run(classroom(f"http://127.0.0.1:{port}", contexts, seconds))
        server_cpu, machine_cpu = cpu_seconds(server.pid) - server_cpu0, cpu_seconds() - machine_cpu0
        rss = peak_rss_mb(server.pid)
        alive = server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    lat = [x for r in out.values() for x in r["latencies_ms"]]
    return {
        "contexts": contexts, "seconds": seconds, "steps": len(lat),
        "sessions_that_stepped": sum(1 for r in out.values() if r["latencies_ms"]),
        "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
        "median_ms": statistics.median(lat) if lat else float("nan"),
        "errors": [e for r in out.values() for e in r["errors"]],
        "cross_session_leaks": [f for r in out.values() for f in r["foreign"]],
        "server_peak_rss_mb": rss, "server_alive": alive,
        # on one machine the browsers compete with the server: say how the CPU was shared
        "server_cpu_s": server_cpu, "machine_cpu_s": machine_cpu, "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.load", description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--follow", action="store_true",
                    help="a class following one lecturer instead (tests/load_follow.py): --contexts followers")
    ap.add_argument("--every", type=float, default=2.0, help="with --follow: seconds between the lecturer's clicks")
    ap.add_argument("--nice", type=int, default=0, help="with --follow: run the browsers at this lower CPU priority")
    ap.add_argument("--replicas", type=int, default=0,
                    help="with --follow: serve through deploy/serve.py (Redis, this many replicas, nginx)")
    args = ap.parse_args(argv)
    if args.follow:
        from tests import load_follow

        rep = load_follow.run(args.contexts, args.seconds, args.every, args.nice, args.replicas)
        print(load_follow.report(rep))
        for e in rep["errors"][:10]:
            print("  error:", e)
        if args.json:
            Path(args.json).write_text(json.dumps({k: v for k, v in rep.items() if k != "latencies_ms"}, indent=1))
        return 0 if not rep["errors"] and rep["server_alive"] else 1
    rep = run(args.contexts, args.seconds)
    print(f"{rep['contexts']} sessions x {rep['seconds']:.0f} s: {rep['steps']} steps "
          f"({rep['sessions_that_stepped']} sessions stepped); click -> page updated p50 {rep['p50_ms']:.0f} ms, "
          f"p95 {rep['p95_ms']:.0f} ms, p99 {rep['p99_ms']:.0f} ms; errors {len(rep['errors'])}; "
          f"sessions that saw another's text {len(rep['cross_session_leaks'])}; "
          f"server peak RSS {rep['server_peak_rss_mb']:.0f} MiB")
    print(f"CPU: the server used {rep['server_cpu_s']:.0f} s of the {rep['machine_cpu_s']:.0f} s of CPU time the "
          f"machine spent ({rep['cpus']} cores); the rest went to the browsers and this driver, which a real "
          "classroom runs on the students' own machines")
    for e in rep["errors"][:10]:
        print("  error:", e)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=1))
    return 0 if not rep["errors"] and not rep["cross_session_leaks"] and rep["server_alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
