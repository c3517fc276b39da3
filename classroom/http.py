"""The class's own web routes, answered before Streamlit sees the request (app.py mounts them in st.App).

    GET  /class/{code}/events?who=W           the event stream a follower's page opens (classroom/hub.py)
    GET  /class/{code}/p/{run}/{at}/{...}     a picture of a step: stage/{layer}/{head}, phone/{layer}/{head} (the
                                              stage laid out for a phone) or view/{view}/{layer}
    GET  /class/{code}/frame/{id}             a frame the class saw before (looking back)
    POST /class/{code}/vote                   {"who", "qid", "choice" | "word"}: one answer to the open question
    GET  /class/static/plotly.min.js          plotly's own bundle, from the installed package (nothing from a CDN)

Plain ASGI, no per-request framework work: a follower's update is one event on a stream that is already
open, and a picture is bytes from memory. Everything a route answers is JSON, SVG or plain text; errors are
one plain sentence, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import threading
from pathlib import Path
from urllib.parse import parse_qs

from classroom.lectures import CODE_RE
from classroom.poll import Refused as VoteRefused
from classroom.store import StoreDown

_LOG = logging.getLogger(__name__)
PREFIX = "/class/"
MAX_BODY = 4096  # bytes in a vote
WHO_RE = re.compile(r"^[0-9a-f]{8,64}$")
FRAME_RE = re.compile(r"^[0-9A-Za-z:._-]{1,80}$")
TOO_LONG = "That vote is too long to be one answer: pick a choice, or type one word."


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


async def _send(send, status: int, body: bytes, ctype: str, cache: str = "no-store", extra: list | None = None):
    headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode()),
               (b"cache-control", cache.encode()), (b"x-content-type-options", b"nosniff")] + (extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _text(send, status: int, message: str):
    await _send(send, status, message.encode(), "text/plain; charset=utf-8")


async def _json(send, status: int, payload: dict):
    await _send(send, status, json.dumps(payload).encode(), "application/json")


class ClassRoutes:
    """ASGI middleware: /class/... here, everything else to Streamlit (`app`)."""

    def __init__(self, app, hub_factory):
        self.app = app
        self.hub_factory = hub_factory  # the process's Hub, made on first use (classroom/server.py)
        self._plotly: bytes | None = None
        self._streamed = False  # a follower's stream was opened: the hub has streams to end when the server stops

    def end_streams_on_exit(self) -> None:
        """Before the server's own SIGINT and SIGTERM handlers (uvicorn's, which stop it once open responses end),
        end every follower's stream, which would otherwise hold a stopping server, and each phone on 'live', for
        good. Called as the server starts (ASGI lifespan), on the main thread, where signals are handled."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(number)
            if not callable(previous):
                continue

            def end_then(sig, frame, previous=previous):
                if self._streamed:
                    self.hub_factory().end_streams()
                previous(sig, frame)

            signal.signal(number, end_then)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            self.end_streams_on_exit()
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        try:
            await self.route(scope, receive, send)
        except Exception:  # noqa: BLE001 - a browser gets one plain sentence, the log the rest
            _LOG.exception("class route %s failed", scope["path"])
            try:
                await _text(send, 500, "Something went wrong on the server: reload the page.")
            except Exception:  # noqa: BLE001 - the response had started: nothing more to say
                pass

    async def route(self, scope, receive, send):
        path, method = scope["path"][len(PREFIX):], scope["method"]
        if path == "static/plotly.min.js" and method == "GET":
            if self._plotly is None:
                self._plotly = plotly_js().read_bytes()
            await _send(send, 200, self._plotly, "text/javascript; charset=utf-8", "public, max-age=86400")
            return
        code, _, rest = path.partition("/")
        if not CODE_RE.match(code):
            await _text(send, 404, "No class is running with this code.")
            return
        hub = self.hub_factory()
        query = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        if rest == "events" and method == "GET":
            await self.events(hub, code, query.get("who", ""), receive, send)
        elif rest == "vote" and method == "POST":
            await self.vote(hub, code, receive, send)
        elif rest.startswith("p/") and method == "GET":
            body = await _in_thread(hub.part, code, rest)
            if body is None:
                await _text(send, 404, "That picture is not part of this class (any more).")
            else:
                ctype = "image/svg+xml" if "/stage/" in rest or "/phone/" in rest else "application/json"
                await _send(send, 200, body, ctype, "private, max-age=86400, immutable")
        elif rest.startswith("frame/") and method == "GET" and FRAME_RE.match(rest[6:]):
            frame = await _in_thread(hub.room.frame, code, rest[6:])
            if frame is None:
                await _text(send, 404, "That frame is not part of this class (any more).")
            else:
                await _json(send, 200, frame)
        else:
            await _text(send, 404, "Not found.")

    async def events(self, hub, code: str, who: str, receive, send):
        if not WHO_RE.match(who) or not await _in_thread(hub.room.is_follower, code, who):
            await _text(send, 403, "Open the class's link again: this page does not follow that class.")
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no")]})  # nginx: pass each event on at once
        self._streamed = True

        async def pump():
            async for event in hub.events(code, who):
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def gone():  # the browser closed the page: stop the stream (its follower leaves)
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = {asyncio.ensure_future(pump()), asyncio.ensure_future(gone())}
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def vote(self, hub, code: str, receive, send):
        body, too_long = b"", False
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                too_long = True
            if not message.get("more_body"):
                break
        if too_long:
            await _json(send, 413, {"ok": False, "message": TOO_LONG})
            return
        try:
            v = json.loads(body or b"{}")
            if not isinstance(v, dict):
                raise ValueError
        except ValueError:
            await _json(send, 400, {"ok": False, "message": "That is not a vote."})
            return
        try:
            said = await _in_thread(hub.room.polls.vote, code, v.get("who"), v.get("qid"), v.get("choice"),
                                    v.get("word"))
        except VoteRefused as e:
            await _json(send, 200, {"ok": False, "message": str(e)})
            return
        except StoreDown:
            await _json(send, 503, {"ok": False, "message": "Your vote could not be counted right now: try again."})
            return
        await _json(send, 200, {"ok": True, "message": said})


async def _in_thread(fn, *args):
    """A store read or a picture build off the event loop (a Redis round trip must not hold every stream)."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
