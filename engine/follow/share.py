"""The lecturer's side of a class: what one screen publishes, step by step, and the QR code of the link.

`Publisher.update` runs after every change on the lecturer's step page. It sends each step's trace
once (a click sends one new step, a few KB), and a small head on every change: where the lecturer
is (step, view, layer, head), the tokens so far, and the settings a fork replays. Nothing changed,
nothing sent.
"""

from __future__ import annotations

import io
import secrets
import weakref
from functools import lru_cache

import segno

from engine.draw.svg import data_uri
from engine.follow import wire
from engine.follow.classroom import Classroom, Lecture


class Publisher:
    """One lecturer's screen, published to one class; kept in the lecturer's session."""

    def __init__(self, classroom: Classroom, lecture: Lecture):
        self.classroom = classroom
        self.lecture = lecture
        self._stepper = lambda: None  # a weak reference: a Reset frees the run whatever we hold
        self._run: str | None = None
        self._sent = 0  # traces of this run already in the store
        self._pieces: list[str] = []
        self._last: dict | None = None
        self.version = 0

    def update(self, s, at: int, view: str, layer: int, head: int, fork: dict) -> int | None:
        """Publish the lecturer's screen if it changed: s is the page's Stepper (None before Prefill).

        Returns the new version, or None when nothing had changed.
        """
        started = s is not None and bool(s.traces)
        fresh = False
        if not started:
            if self._run is not None:
                self._run, self._sent, self._pieces, fresh = None, 0, [], True
        elif self._stepper() is not s or len(s.traces) < self._sent:
            self._stepper, self._run, self._sent, self._pieces = weakref.ref(s), secrets.token_hex(4), 0, []
            fresh = True
        new = {}
        if started:
            ids = s.ids[0].tolist()
            for i in range(self._sent, len(s.traces)):
                t = s.traces[i]
                text = s.lm.tokenizer.decode(ids[: t.kv_len + 1], skip_special_tokens=True)
                new[i] = wire.trace_to_wire(t, text=text)
            if len(self._pieces) != len(ids):
                self._pieces = s.pieces()
            spec = s.lm.spec
            shared = wire.SharedRun(
                version=0, run=self._run, at=max(0, min(int(at), len(s.traces) - 1)), view=view, layer=int(layer),
                head=int(head), ids=ids, piece_list=self._pieces, prompt_len=s.prompt_len, use_cache=s.use_cache,
                done=s.done, stop_reason=s.stop_reason, spec=spec, fork=dict(fork),
                model=f"{spec.architecture} · {int(spec.parameters):,} params · {spec.attention}")
            head_d = wire.head_of(shared, len(s.traces))
        else:
            head_d = wire.head_of(wire.SharedRun(version=0, run=None, view=view, layer=int(layer), head=int(head)), 0)
        if not new and not fresh and head_d == self._last:
            return None
        self.version = self.classroom.publish(self.lecture, head_d, new, fresh_run=fresh)
        self._sent += len(new)
        self._last = head_d
        return self.version


@lru_cache(maxsize=64)
def qr_data_uri(text: str, scale: int = 6) -> str:
    """A QR code of `text` as an SVG data URI, for an <img> (a picture runs nothing and fetches nothing).

    Kept per link: the lecturer's sidebar and class bar show it on every page run (~8 ms to encode)."""
    out = io.BytesIO()  # a standalone SVG (with its xmlns: an <img> shows nothing without it)
    segno.make(text, error="m").save(out, kind="svg", xmldecl=False, scale=scale, border=2, dark="#111", light="#fff")
    return data_uri(out.getvalue())
