"""This server process's classroom and hub: one of each, shared by every browser session and the class's routes.

The Streamlit sessions (the lecturer's publish, a student's join) and the routes (classroom/http.py, run by
the ASGI server app.py starts) live in one process; with MemoryKV they must share one store, so both ask here.
"""

from __future__ import annotations

import sys
import threading

from classroom.hub import Hub
from classroom.lectures import Classroom

_lock = threading.Lock()
_room: Classroom | None = None
_hub: Hub | None = None


def classroom() -> Classroom:
    """`streamlit run app.py -- --lecturer-key K`, or DECODE_LAB_LECTURER_KEY; Redis if DECODE_LAB_REDIS_URL."""
    global _room
    with _lock:
        if _room is None:
            _room = Classroom.from_settings(sys.argv[1:])
        return _room


def hub() -> Hub:
    """The hub of this process's classroom, subscribed to its news from the first call on."""
    global _hub
    room = classroom()
    with _lock:
        if _hub is None or _hub.room is not room:
            _hub = Hub(room)
        return _hub


def reset() -> None:
    """Forget both (tests: a new key, another store)."""
    global _room, _hub
    with _lock:
        _room, _hub = None, None
