"""A lecture hall on one machine: N Streamlit replicas, nginx in front, Redis for the classes, all on loopback.

    python -m deploy.serve --replicas 3 --port 8080 [--listen 0.0.0.0] [--dir DIR]
        (the lecturer key from DECODE_LAB_LECTURER_KEY, or asked for; never on a command line)

Redis (`redis-server` from the OS packages) listens on 127.0.0.1 only, with a random password, and keeps
nothing on disk; each replica gets DECODE_LAB_REDIS_URL pointing at it. nginx runs from deploy/nginx.conf
(sticky by cookie, websockets upgraded) as an ordinary process: every file it writes is in DIR (a new
temporary folder unless --dir). Ctrl-C stops everything. tests/test_deploy.py starts the same with two
replicas. Binaries: DECODE_LAB_REDIS_SERVER and DECODE_LAB_NGINX override where they are looked for.
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().parent / "nginx.conf"


class Missing(RuntimeError):
    """A binary this needs is not installed: the message says, in one line, how to get it."""


def binary(name: str, env: str, package: str) -> str:
    found = os.environ.get(env) or shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()), None)
    if not found or not Path(found).exists():
        raise Missing(f"{name} not found: install it with `sudo apt-get install {package}` (Debian/Ubuntu), "
                      f"or point {env} at one.")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(ready, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    """Until ready() is true; an error that says so if the process exits first or the time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before it was {ready.__doc__}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} was not {ready.__doc__} within {timeout:.0f} s")


def wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    def ready() -> bool:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    ready.__doc__ = f"listening on port {port}"
    wait_for(ready, proc, what, timeout)


def wait_for_health(url: str, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    """Until the app answers its health check (its port opens a few seconds before it serves)."""
    import urllib.request

    def ready() -> bool:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=5).status == 200

    ready.__doc__ = "answering its health check"
    wait_for(ready, proc, what, timeout)


def nginx_conf(folder: Path, listen: str, replica_ports: list[int]) -> str:
    """deploy/nginx.conf with this machine's values in its placeholders."""
    upstreams = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in replica_ports)
    return (TEMPLATE.read_text().replace("@DIR@", str(folder)).replace("@LISTEN@", listen)
            .replace("@UPSTREAMS@", upstreams))


def start_redis(folder: Path, redis_bin: str | None = None) -> tuple[subprocess.Popen, str]:
    """redis-server on a free loopback port with a random password, nothing saved; (process, its URL)."""
    redis_bin = redis_bin or binary("redis-server", "DECODE_LAB_REDIS_SERVER", "redis-server")
    folder = Path(folder)
    for sub in ("logs", "redis"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    port, password = free_port(), secrets.token_hex(16)
    conf = folder / "redis" / "redis.conf"  # the password in a file of ours, not on a command line
    conf.write_text(f"port {port}\nbind 127.0.0.1\nprotected-mode yes\nrequirepass {password}\n"
                    f"save \"\"\nappendonly no\ndir {folder / 'redis'}\ndaemonize no\n"
                    f"logfile {folder / 'logs' / 'redis.log'}\n")
    conf.chmod(0o600)
    proc = subprocess.Popen([redis_bin, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, "redis-server", timeout=30)
    except BaseException:
        proc.kill()
        raise
    return proc, f"redis://:{password}@127.0.0.1:{port}/0"


@dataclass
class Hall:
    """What `start` started: stop() ends every process and leaves the folder (logs) for a look."""

    folder: Path
    url: str  # nginx, the address students open
    redis_url: str
    replica_urls: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def __enter__(self) -> "Hall":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start(replicas: int = 2, port: int | None = None, folder: str | Path | None = None, listen_host: str = "127.0.0.1",
          lecturer_key: str | None = None, env: dict | None = None) -> Hall:
    """Start Redis, `replicas` Streamlit servers and nginx; return when all of them answer."""
    redis_bin = binary("redis-server", "DECODE_LAB_REDIS_SERVER", "redis-server")
    nginx_bin = binary("nginx", "DECODE_LAB_NGINX", "nginx")
    folder = Path(folder or tempfile.mkdtemp(prefix="decode-lab-hall-")).resolve()
    for sub in ("tmp", "logs", "redis"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    hall = Hall(folder=folder, url=f"http://127.0.0.1:{port}", redis_url="", replica_urls=[])
    try:
        redis_proc, redis_url = start_redis(folder, redis_bin)
        hall.procs.append(redis_proc)
        hall.redis_url = redis_url

        base_env = dict(os.environ if env is None else env, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
                        DECODE_LAB_REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
        if lecturer_key:
            base_env["DECODE_LAB_LECTURER_KEY"] = lecturer_key
        ports = [free_port() for _ in range(replicas)]
        started = []
        for i, p in enumerate(ports):
            log = open(folder / "logs" / f"replica-{i}.log", "w")
            proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(p),
                                     "--server.address", "127.0.0.1", "--server.headless", "true"],
                                    cwd=ROOT, env=base_env, stdout=log, stderr=subprocess.STDOUT)
            hall.procs.append(proc)
            started.append((p, proc))
        for i, (p, proc) in enumerate(started):
            wait_for_port(p, proc, f"replica {i}")
            wait_for_health(f"http://127.0.0.1:{p}", proc, f"replica {i}")
            hall.replica_urls.append(f"http://127.0.0.1:{p}")

        (folder / "nginx.conf").write_text(nginx_conf(folder, f"{listen_host}:{port}", ports))
        nginx_proc = subprocess.Popen([nginx_bin, "-p", str(folder), "-c", str(folder / "nginx.conf"),
                                       "-e", str(folder / "error.log")],
                                      stdout=open(folder / "logs" / "nginx.out", "w"), stderr=subprocess.STDOUT)
        hall.procs.append(nginx_proc)
        wait_for_port(port, nginx_proc, "nginx", timeout=30)
    except BaseException:
        hall.stop()
        raise
    return hall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deploy.serve", description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--port", type=int, default=8080, help="where nginx listens (students open this)")
    ap.add_argument("--listen", default="0.0.0.0", help="nginx's address (0.0.0.0: the classroom's network)")
    ap.add_argument("--dir", help="folder for nginx's and Redis's files and the logs (default: a new temp folder)")
    args = ap.parse_args(argv)
    key = os.environ.get("DECODE_LAB_LECTURER_KEY") or getpass.getpass("lecturer key (empty: no classes): ")
    try:
        hall = start(args.replicas, args.port, args.dir, args.listen, lecturer_key=key or None)
    except Missing as e:
        print(e, file=sys.stderr)
        return 2
    print(f"Decode Lab: {args.replicas} replicas behind nginx at http://{args.listen}:{args.port} "
          f"(Redis on 127.0.0.1, files in {hall.folder}). Ctrl-C stops everything.")
    try:
        while all(p.poll() is None for p in hall.procs):
            time.sleep(1)
        print("a process exited: stopping the rest (see the logs)", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        hall.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
