"""`streamlit run app.py` on a free loopback port, for the browser tests and the load scripts (one way to start it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY = "lecturer-key-for-the-tests-7Q"  # the lecturer key of a test's app server (keyed_server), typed by its lecturer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log=subprocess.DEVNULL, timeout: float = 90, **env) -> subprocess.Popen:
    """The app on 127.0.0.1:port, offline, with these extra environment variables (None removes one); returns once
    the port answers. DECODE_LAB_REDIS_URL is not inherited: a test that wants Redis says so."""
    environ = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    environ.pop("DECODE_LAB_REDIS_URL", None)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--server.headless", "true"],
                            cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:  # say so now, not after the timeout
            raise RuntimeError(f"the app exited with code {proc.returncode} before it listened on port {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the app did not start within {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
