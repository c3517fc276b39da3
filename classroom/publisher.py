"""The lecturer's side of a class: what one screen publishes, step by step, and the QR code of the link.

`Publisher.update` runs after every change on the lecturer's step page. It sends each step's trace
once (a click sends one new step, a few KB), a small head on every change (where the lecturer is, the
tokens so far, the settings a fork replays) and the frame of the step on screen; `Publisher.page` sends
the frame of any other page (classroom/page_copy.py). Nothing changed, nothing sent. The pictures are not made
here: every server makes its own copy once, from the record (classroom/hub.py).
"""

from __future__ import annotations

import io
import secrets
import weakref
from functools import lru_cache

import segno

from classroom import wire
from classroom.frames import step_frame
from classroom.lectures import Classroom, Lecture
from drawing.svg import data_uri

WAITING = {"id": "waiting", "kind": "waiting", "page": "Step through", "label": "waiting for Prefill",
           "timeline": False}


class Publisher:
    """One lecturer's screen, published to one class; kept in the lecturer's session."""

    def __init__(self, classroom: Classroom, lecture: Lecture):
        self.classroom = classroom
        self.lecture = lecture
        self._stepper = lambda: None  # a weak reference: a Reset frees the run whatever we hold
        self._run: str | None = None
        self._sent = 0  # traces of this run already in the store
        self._texts: list[str] = []  # the text so far after each sent step
        self._pieces: list[str] = []
        self._last: tuple | None = None  # what the class was last shown by this publisher
        self.version = 0

    def _publish(self, key: tuple, **kwargs) -> int:
        self.version = self.classroom.publish(self.lecture, **kwargs)
        self._last = key
        return self.version

    def update(self, s, at: int, view: str, layer: int, head: int, fork: dict, hold: int | None = None,
               every: bool = False, steps: bool = False, latency_claim: str = "") -> int | None:
        """Publish the lecturer's step screen if it changed: s is the page's Stepper (None before Prefill).

        hold: steps from this index on stay unpublished (a question about the next token is open). every: the
        Attention view's "every query row" toggle is on (it draws where the step recorded more than one row); steps:
        its "one head, every step so far" is on. latency_claim: the sentence the lecturer's Latency view adds under
        its chart (the ladder this server measured or shipped), which the class's Latency view adds too.
        Returns the new version, or None when nothing had changed.
        """
        visible = 0 if s is None else len(s.records) if hold is None else min(len(s.records), hold)
        fresh = False
        if not visible:
            if self._run is not None:
                self._run, self._sent, self._texts, self._pieces, fresh = None, 0, [], [], True
        elif self._stepper() is not s or visible < self._sent:
            self._stepper, self._run, self._sent, self._texts, self._pieces = weakref.ref(s), secrets.token_hex(4), \
                0, [], []
            fresh = True
        picks = {"view": view, "layer": int(layer), "head": int(head)}
        if not visible:
            head_d = wire.head_of(wire.SharedRun(version=0, run=None, view=view, layer=int(layer), head=int(head)), 0)
            key = ("waiting", picks)
            if not fresh and key == self._last:
                return None
            return self._publish(key, frame=WAITING, picks=picks, head=head_d, traces={}, fresh_run=fresh)
        ids = s.ids[0].tolist()
        new = {}
        for i in range(self._sent, visible):
            t = s.records[i]
            text = s.lm.tokenizer.decode(ids[: t.kv_len + 1], skip_special_tokens=True)
            self._texts.append(text)
            new[i] = wire.trace_to_wire(t, text=text)
        if len(self._pieces) != len(ids):
            self._pieces = s.pieces()
        at = max(0, min(int(at), visible - 1))
        t = s.records[at]
        if every and view == "Attention" and t.pattern_rows > 1:  # what the lecturer's page draws, the class draws
            picks["every"] = True
        if steps and view == "Attention":
            picks["steps"] = True
        done = s.done and visible == len(s.records)
        key = (self._run, at, visible, done, tuple(sorted(picks.items())), latency_claim)
        if not new and not fresh and key == self._last:
            return None
        spec = s.lm.spec
        model = f"{spec.architecture} · {int(spec.parameters):,} params · {spec.attention}"
        shown_ids = ids[: s.records[visible - 1].kv_len + 1]  # nothing of a held step: not even its token
        shared = wire.SharedRun(
            version=0, run=self._run, at=at, view=view, layer=int(layer), head=int(head), ids=shown_ids,
            piece_list=self._pieces[: len(shown_ids)], prompt_len=s.prompt_len, use_cache=s.use_cache, done=done,
            stop_reason=s.stop_reason if done else None, spec=spec, fork=dict(fork), model=model,
            latency_claim=latency_claim)
        frame = step_frame(self._run, at, t, model=model, text=self._texts[at], layers=len(t.layers),
                           heads=spec.heads, new_tokens=len(shown_ids) - s.prompt_len, done=done,
                           stop=s.stop_reason if done else None)
        version = self._publish(key, frame=frame, picks=picks, head=wire.head_of(shared, visible), traces=new,
                                fresh_run=fresh)
        self._sent = visible
        return version

    def page(self, frame: dict) -> int | None:
        """Publish another page's screen (classroom/page_copy.py's frame); nothing when it is what the class already has.

        A question is about a step on the step page: another page's screen closes it, asked or revealed, so no
        student's page keeps a vote panel the lecturer has left (classroom/page_poll.py sees it gone on return)."""
        key = ("page", frame["id"])
        if key == self._last:
            return None
        self.classroom.polls.drop(self.lecture)
        return self._publish(key, frame=frame, picks={})

    def again(self) -> int:
        """The same screen once more (a question asked, or revealed): every follower hears of it."""
        return self._publish(self._last)


@lru_cache(maxsize=64)
def qr_data_uri(text: str, scale: int = 6) -> str:
    """A QR code of `text` as an SVG data URI, for an <img> (a picture runs nothing and fetches nothing).

    Kept per link: the lecturer's sidebar and class bar show it on every page run (~8 ms to encode)."""
    out = io.BytesIO()  # a standalone SVG (with its xmlns: an <img> shows nothing without it)
    segno.make(text, error="m").save(out, kind="svg", xmldecl=False, scale=scale, border=2, dark="#111", light="#fff")
    return data_uri(out.getvalue())
