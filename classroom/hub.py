"""One server's side of every class it serves: hear of a new version, make its pictures once, push it out.

    Hub(classroom)            subscribes to the classroom's news (classroom/store.py: Redis pub/sub, or a
                              call in this process); one per server process
    hub.events(code, who)     a follower's event stream: the whole state first, then one event per version
    hub.part(code, path)      a picture of a step (stage, the stage laid out for a phone, view) as bytes, built once
                              per server, then kept

On the news of version v of a class, this server reads the live state once, builds the pictures the lecturer's
picks need (the stage for the lecturer's layer and head, the lecturer's view) from the shared record, and
writes one event, the same bytes for every follower it serves: no script runs per follower, and a follower
that picked another layer or view asks for that picture, which is built the first time anyone asks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections import OrderedDict

from classroom import wire
from classroom.frames import every_step_part, stage_part, view_part
from classroom.store import StoreDown, subscribe
from drawing.views import VIEWS, VIEWS_WITH_LAYER

_LOG = logging.getLogger(__name__)
KEEPALIVE_S = 20.0  # a comment on an idle stream, so that proxies and the browser keep it open
MAX_QUEUED = 32  # events waiting for one slow follower before its stream is closed (it reconnects and catches up)
MAX_PARTS = 512  # pictures kept per server (a step's stage is ~30 KB)
PART_RE = re.compile(r"^p/([0-9a-f]{1,16})/(\d{1,5})/(stage|phone|view|rows|steps)/(\d{1,3})/(\d{1,4})$")
END = b"event: end\ndata: {}\n\n"


def sse(kind: str, payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


class Hub:
    """The classes this server serves: their newest event, their streams, their pictures."""

    def __init__(self, classroom):
        self.room = classroom
        self.loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, set[asyncio.Queue]] = {}
        self._events: dict[str, tuple[int, bytes]] = {}  # code -> (version, its event)
        self._parts: OrderedDict = OrderedDict()  # (code, path) -> bytes
        self._building: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self.stopping = False  # the server is stopping: every stream ends, and none opens
        self.heard = 0  # news messages received (a test reads it)
        subscribe(classroom.kv, classroom.channel, self.on_news)

    # ------------------------------------------------------------ news

    def on_news(self, message: str) -> None:
        """A message on the classroom's channel (any thread): a new version, or the end of a class."""
        self.heard += 1
        news = wire.loads(message)
        code = str(news.get("code", ""))
        if news.get("end"):
            self._events.pop(code, None)
            self._push(code, END)
            return
        if code not in self._streams:
            return  # nobody follows this class on this server: nothing to make
        live = self._live_event(code)
        if live is not None:
            self._push(code, *live)

    def _push(self, code: str, event: bytes, version: int = 0) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._fanout, code, event, version)

    def _fanout(self, code: str, event: bytes, version: int) -> None:
        """In the event loop: the same bytes into every stream of the class, with the version they show."""
        for q in list(self._streams.get(code, ())):
            if q.qsize() >= MAX_QUEUED:
                q.put_nowait(None)  # too far behind: close it; its browser reconnects and gets the whole state
            else:
                q.put_nowait((version, event))

    def refresh(self, code: str, timeline: bool = False) -> bytes | None:
        """The class's live event, made once per version on this server (timeline=True: with the whole
        timeline, for a stream's first event). None when the class has ended."""
        live = self._live_event(code, timeline)
        return None if live is None else live[0]

    def _live_event(self, code: str, timeline: bool = False) -> tuple[bytes, int] | None:
        """refresh's event and the version it shows."""
        try:
            live = self.room.live(code)
            if live is None:
                return None
            known = self._events.get(code)
            if known is not None and known[0] >= live["version"] and not timeline:
                return known[1], known[0]
            frame = self.room.frame(code, live["frame"]) if live.get("frame") else None
            parts = {}
            if frame is not None and frame.get("kind") == "step":
                picks = live.get("picks") or {}
                layer, head = int(picks.get("layer", 0)), int(picks.get("head", 0))
                view = picks.get("view") if picks.get("view") in VIEWS else VIEWS[0]
                kind = "rows" if picks.get("every") and view == "Attention" else "view"  # every query row, or one
                paths = [f"p/{frame['run']}/{frame['at']}/stage/{layer}/{head}",  # (the paths a tab asks for)
                         f"p/{frame['run']}/{frame['at']}/{kind}/{VIEWS.index(view)}/"
                         f"{layer if view in VIEWS_WITH_LAYER else 0}"]
                if picks.get("steps") and view == "Attention":  # and one head, every step so far
                    paths.append(f"p/{frame['run']}/{frame['at']}/steps/{layer}/{head}")
                for path in paths:
                    got = self.part(code, path)
                    if got is not None:
                        parts[path] = got.decode()
            payload = {"v": live["version"], "frame": frame, "picks": live.get("picks") or {},
                       "poll": live.get("poll"), "parts": parts, "published": round(time.time() * 1000)}
            joins = frame is not None and frame.get("timeline", True)  # a frame a student may look back at
            whole = self.room.timeline(code) if timeline or live.get("new_run") or joins else []
            if timeline or live.get("new_run"):  # a new run: every tab's timeline loses the old run's steps
                payload["timeline"] = whole
            elif joins:
                if whole and whole[-1][0] == frame["id"]:
                    payload["entry"] = [frame["id"], frame.get("label", "")]
                elif frame["id"] in (f for f, _ in whole):  # a step put back in its place (a lecturer scrubbed back)
                    payload["timeline"] = whole
        except StoreDown:
            return None
        event = sse("live", payload)
        if not timeline:
            self._events[code] = (live["version"], event)
        return event, live["version"]

    # ------------------------------------------------------------ pictures

    def part(self, code: str, path: str) -> bytes | None:
        """stage/{layer}/{head} or phone/{layer}/{head} (SVG: the stage, or laid out for a phone) or view/{view}/{layer}
        (JSON; rows/{view}/{layer}: Attention with every query row; steps/{layer}/{head}: one head, every step so
        far) of step `at` of run `run`: built once here."""
        key = (code, path)
        with self._lock:
            if key in self._parts:
                self._parts.move_to_end(key)
                return self._parts[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # thirty followers asking at once: one builds, the others wait for it
            with self._lock:
                if key in self._parts:
                    return self._parts[key]
            value = self._build(code, path)
            with self._lock:
                self._building.pop(key, None)
                if value is not None:
                    self._parts[key] = value
                    while len(self._parts) > MAX_PARTS:
                        self._parts.popitem(last=False)
            return value

    def _build(self, code: str, path: str) -> bytes | None:
        m = PART_RE.match(path)
        if m is None:
            return None
        run, at, kind, a, b = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5))
        shared = self.room.read(code)
        if shared is None or shared.run != run or at >= len(shared.records):
            return None  # another run by now, or a step not published
        layers = len(shared.records[at].layers)
        heads = shared.spec.heads if shared.spec is not None else 1
        if kind in ("stage", "phone"):
            return stage_part(shared, at, min(a, layers - 1), min(b, heads - 1), phone=kind == "phone")
        if kind == "steps":  # one head's attention over every step so far: where the steps recorded it
            layer = min(a, layers - 1)
            if any(t.layers[layer].pattern is None for t in shared.records[: at + 1]):
                return None
            return every_step_part(shared, at, layer, min(b, heads - 1))
        if a >= len(VIEWS):
            return None
        return view_part(shared, at, VIEWS[a], min(b, layers - 1), every_row=kind == "rows")

    # ------------------------------------------------------------ followers' streams

    def end_streams(self) -> None:
        """The server is stopping (callable from a signal handler): end every stream, without the class's end. A
        stopping server waits for every open response, and a stream never ends by itself; each follower's page then
        reconnects, to the same class where the next server has it (Redis), or says it is reconnecting."""
        self.stopping = True
        if self.loop is not None:
            for streams in list(self._streams.values()):
                for q in list(streams):
                    self.loop.call_soon_threadsafe(q.put_nowait, None)

    async def events(self, code: str, who: str):
        """A follower's stream: the whole state (with the timeline), then every new version, as they come."""
        if self.stopping:
            return
        self.loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        self._streams.setdefault(code, set()).add(q)  # before the first event: a version made meanwhile is queued
        try:
            first = await self.loop.run_in_executor(None, self._live_event, code, True)
            if first is None:
                yield END
                return
            await self.loop.run_in_executor(None, self.room.seen, code, who, True)
            yield b"retry: 1000\n\n" + first[0]
            sent = first[1]  # news of a version this stream already shows may still come (pub/sub is late)
            while True:
                try:
                    got = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    got = (0, b": still here\n\n")
                if got is None:
                    return
                version, event = got
                if version and version <= sent:  # (END and keep-alives carry none)
                    continue  # the same version twice would show a student the same step twice
                sent = max(sent, version)
                yield event
                if event is END:
                    return
        finally:
            streams = self._streams.get(code, set())
            streams.discard(q)
            if not streams:
                self._streams.pop(code, None)
            try:
                self.loop.run_in_executor(None, self._left, code, who)
            except RuntimeError:  # the loop is closing: the server stops
                pass

    def _left(self, code: str, who: str) -> None:
        try:
            if self.room.is_follower(code, who):
                self.room.seen(code, who, False)
        except StoreDown:
            pass
