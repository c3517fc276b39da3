"""Where a class's shared state lives: this process (the default), or Redis (`DECODE_LAB_REDIS_URL`).

The classroom (classroom/lectures.py) is written once, against the few Redis commands it uses.
`MemoryKV` is those commands on a dict, with Redis's expiry rules, for one server with nothing else to
run; several replicas behind a proxy share one redis-server instead and see the same classes. Values
are strings (JSON) in both: nothing is ever unpickled from the store.

News travels by publish/subscribe, never by asking on a timer: `subscribe(kv, channel, callback)` calls
back on every message (Redis: from one thread per server blocked on its subscription; MemoryKV: in the
publisher's own thread, at once).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

_LOG = logging.getLogger(__name__)


class StoreDown(RuntimeError):
    """The shared store cannot be reached (Redis down): a plain message for the page."""


class MemoryKV:
    """The subset of Redis the classroom uses (strings, hashes, counters, expiry), in this process.

    Thread-safe: every Streamlit session of the server reads and writes it from its own thread.
    """

    def __init__(self, clock=time.monotonic):
        self._data: dict[str, object] = {}
        self._expires: dict[str, float] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._subscribers: dict[str, list[Callable[[str], None]]] = {}

    # ------------------------------------------------------------ keys and expiry

    def _live(self, key: str):
        when = self._expires.get(key)
        if when is not None and when <= self._clock():
            self._data.pop(key, None)
            self._expires.pop(key, None)
        return self._data.get(key)

    def get(self, key: str) -> str | None:
        with self._lock:
            value = self._live(key)
            return value if isinstance(value, str) else None

    def set(self, key: str, value: str, ex: float | None = None, nx: bool = False) -> bool | None:
        with self._lock:
            if nx and self._live(key) is not None:
                return None
            self._data[key] = str(value)
            self._expires.pop(key, None)
            if ex is not None:
                self._expires[key] = self._clock() + ex
            return True

    def delete(self, *keys: str) -> int:
        with self._lock:
            n = 0
            for key in keys:
                n += self._live(key) is not None
                self._data.pop(key, None)
                self._expires.pop(key, None)
            return n

    def expire(self, key: str, seconds: float) -> bool:
        with self._lock:
            if self._live(key) is None:
                return False
            self._expires[key] = self._clock() + seconds
            return True

    def incr(self, key: str) -> int:
        with self._lock:
            value = int(self._live(key) or 0) + 1
            self._data[key] = str(value)
            return value

    # ------------------------------------------------------------ hashes

    def _hash(self, key: str, create: bool = False) -> dict | None:
        h = self._live(key)
        if h is None and create:
            h = self._data[key] = {}
        return h if isinstance(h, dict) else None

    def hset(self, key: str, field: str | None = None, value: str | None = None, mapping: dict | None = None) -> int:
        with self._lock:
            h = self._hash(key, create=True)
            items = dict(mapping or {})
            if field is not None:
                items[field] = value
            new = sum(k not in h for k in items)
            h.update({str(k): str(v) for k, v in items.items()})
            return new

    def hget(self, key: str, field: str) -> str | None:
        with self._lock:
            return (self._hash(key) or {}).get(field)

    def hmget(self, key: str, fields: list[str]) -> list[str | None]:
        with self._lock:
            h = self._hash(key) or {}
            return [h.get(f) for f in fields]

    def hgetall(self, key: str) -> dict[str, str]:
        with self._lock:
            return dict(self._hash(key) or {})

    def hdel(self, key: str, *fields: str) -> int:
        with self._lock:
            h = self._hash(key)
            if h is None:
                return 0
            n = sum(h.pop(f, None) is not None for f in fields)
            if not h:
                self._data.pop(key, None)
                self._expires.pop(key, None)
            return n

    def hsetnx(self, key: str, field: str, value: str) -> int:
        with self._lock:
            h = self._hash(key, create=True)
            if field in h:
                return 0
            h[field] = str(value)
            return 1

    def hlen(self, key: str) -> int:
        with self._lock:
            return len(self._hash(key) or {})

    # ------------------------------------------------------------ publish / subscribe

    def publish(self, channel: str, message: str) -> int:
        """Every subscriber's callback runs now, in this thread (outside the lock)."""
        callbacks = list(self._subscribers.get(channel, ()))
        for callback in callbacks:
            try:
                callback(message)
            except Exception:  # noqa: BLE001 - one listener's failure never stops a publish
                _LOG.exception("a subscriber of %s failed", channel)
        return len(callbacks)

    def subscribe(self, channel: str, callback: Callable[[str], None]) -> None:
        self._subscribers.setdefault(channel, []).append(callback)


def subscribe(kv, channel: str, callback: Callable[[str], None]) -> None:
    """callback(message) for every message published on `channel` from now on.

    Redis: one daemon thread holds a subscription on a connection of its own (no read timeout: it waits for
    the next message, it does not ask), and comes back after a dropped connection (1, 2, 4 ... 30 s apart).
    """
    if isinstance(kv, MemoryKV):
        kv.subscribe(channel, callback)
        return
    kwargs = dict(kv.connection_pool.connection_kwargs)
    kwargs.update(socket_timeout=None, socket_keepalive=True)
    import redis

    def listen() -> None:
        wait = 1.0
        while True:
            try:
                client = redis.Redis(**kwargs)
                sub = client.pubsub(ignore_subscribe_messages=True)
                sub.subscribe(channel)
                wait = 1.0
                for message in sub.listen():
                    try:
                        callback(message["data"])
                    except Exception:  # noqa: BLE001 - a bad message never ends the subscription
                        _LOG.exception("a subscriber of %s failed", channel)
            except Exception as e:  # noqa: BLE001 - Redis went away: subscribe again when it is back
                _LOG.warning("subscription to %s lost (%s): again in %.0f s", channel, type(e).__name__, wait)
                time.sleep(wait)
                wait = min(30.0, wait * 2)

    threading.Thread(target=listen, name=f"decode-lab-sub-{channel}", daemon=True).start()


def connect(url: str | None):
    """The store for this server: Redis at `url` (redis://host:port/db), or this process when None/empty."""
    if not url:
        return MemoryKV()
    import redis

    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=3, socket_connect_timeout=3,
                                  health_check_interval=30)
    return client
