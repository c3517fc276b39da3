"""Where a class's shared state lives: this process (the default), or Redis (`DECODE_LAB_REDIS_URL`).

The classroom (engine/follow/classroom.py) is written once, against the few Redis commands it uses.
`MemoryKV` is those commands on a dict, with Redis's expiry rules, for one server with nothing else to
run; several replicas behind a proxy share one redis-server instead and see the same classes. Values
are strings (JSON) in both: nothing is ever unpickled from the store.
"""

from __future__ import annotations

import threading
import time


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

    # ------------------------------------------------------------ keys and expiry

    def _live(self, key: str):
        when = self._expires.get(key)
        if when is not None and when <= self._clock():
            self._data.pop(key, None)
            self._expires.pop(key, None)
        return self._data.get(key)

    def ping(self) -> bool:
        return True

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

    def hlen(self, key: str) -> int:
        with self._lock:
            return len(self._hash(key) or {})


def connect(url: str | None):
    """The store for this server: Redis at `url` (redis://host:port/db), or this process when None/empty."""
    if not url:
        return MemoryKV()
    import redis

    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=3, socket_connect_timeout=3,
                                  health_check_interval=30)
    return client
