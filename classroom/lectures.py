"""A class following one lecturer's run: codes, the lecturer key, caps and rate limits, publish and read.

    lecturer:  start(key) -> Lecture(code, token)      only the key starts a class; the token (never shown) drives it;
                                                       the key again (a reload) resumes the newest class, same code
               publish(lecture, frame=, picks=, ...)   after each change on the lecturer's screen: version + 1, news
               end(lecture)
    follower:  join(code, who) -> code                 a wrong, expired or malformed code: one plain message
               live(code), frame(code, id)             what the class shows now, and any frame it showed before
               read(code) -> SharedRun                 a step run's record, decoded once per server, shared

Codes are six characters from an alphabet without look-alikes (no 0/O, 1/I/L), drawn with `secrets`:
31^6 ≈ 887 million, against at most `join_fail_limit` wrong tries a minute per server. A class ends when
the lecturer ends it or after `idle_s` without a change from the lecturer: every key of a class carries
that expiry, refreshed on each publish, in Redis and in `MemoryKV` alike.

News: each publish sends one message on the store's channel `{prefix}bus` ({"code", "v"}); every server
(classroom/hub.py) learns of the new version from it, never by asking on a timer.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from classroom import wire
from classroom.poll import Polls
from classroom.store import StoreDown, connect

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
CODE_RE = re.compile(rf"^[{ALPHABET}]{{{CODE_LENGTH}}}$")
MAX_FRAMES = 300  # the frames a class keeps for looking back (a lecture's steps, lessons and rounds)
CONNECTED = "live"  # a follower's presence while its event stream is open
NO_CLASS = ("No class is running with this code: it may have ended, or the code is mistyped. "
            "Check the link on the projector.")


class Refused(Exception):
    """A request the classroom turns down, with a message written for the person who made it (plain text)."""


@dataclass(frozen=True)
class Limits:
    max_classes: int = 10  # classes at once on this server (on this Redis, for replicas sharing one)
    max_followers: int = 200  # students following one class
    idle_s: float = 3 * 3600  # a class with no change from its lecturer for this long ends
    presence_s: float = 20.0  # a follower counts while it polled in the last this-many seconds
    key_tries: int = 5  # wrong lecturer keys per browser session per minute
    key_tries_server: int = 30  # ... and per server
    join_fails: int = 10  # wrong codes per browser session per minute
    join_fails_server: int = 120  # ... and per server
    starts: int = 3  # classes started per browser session per minute


@dataclass(frozen=True)
class Lecture:
    """What a lecturer's session holds: the class code (shown) and the token that drives it (never shown)."""

    code: str
    token: str
    resumed: bool = False  # the key found this class running (a reload): same code, the students still there


def normalize(code: str) -> str:
    """What a student typed or scanned, as a code: upper case, spaces and dashes dropped."""
    return re.sub(r"[\s\-]", "", str(code or ""))[:64].upper()


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Classroom:
    """Every class on this server (or on the Redis its replicas share)."""

    def __init__(self, kv, key: str | None = None, limits: Limits = Limits(), prefix: str = "decodelab:follow:",
                 clock=time.time):
        self.kv = kv
        self._key_sha = _sha(key) if key else None
        self.limits = limits
        self.prefix = prefix
        self.clock = clock
        self._traces: OrderedDict = OrderedDict()  # (code, run, step) -> (StepTrace, text): decoded once
        self._runs: dict[str, wire.SharedRun] = {}  # code -> the newest run decoded here
        self._decoding = threading.Lock()
        self._read_at: dict[str, int] = {}  # code -> the class version its record was last read at
        self.polls = Polls(self)

    @classmethod
    def from_settings(cls, argv: list[str] | None = None, environ: dict | None = None) -> "Classroom":
        """`streamlit run app.py -- --lecturer-key K`, or DECODE_LAB_LECTURER_KEY; Redis if DECODE_LAB_REDIS_URL."""
        env = os.environ if environ is None else environ
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("--lecturer-key")
        args, _ = parser.parse_known_args(argv or [])
        key = args.lecturer_key or env.get("DECODE_LAB_LECTURER_KEY") or None

        def number(name: str, default: float) -> float:
            try:
                return float(env.get(name) or default)
            except ValueError:
                return default

        limits = Limits(max_classes=int(number("DECODE_LAB_MAX_CLASSES", Limits.max_classes)),
                        max_followers=int(number("DECODE_LAB_MAX_FOLLOWERS", Limits.max_followers)),
                        idle_s=3600 * number("DECODE_LAB_CLASS_IDLE_HOURS", Limits.idle_s / 3600))
        return cls(connect(env.get("DECODE_LAB_REDIS_URL")), key=key, limits=limits)

    @property
    def _ttl(self) -> int:
        """Seconds a class lives without a change from its lecturer (Redis expiries are whole seconds)."""
        return max(1, int(self.limits.idle_s))

    @property
    def enabled(self) -> bool:
        """A lecturer key was set when the server started: classes can be started."""
        return self._key_sha is not None

    # ------------------------------------------------------------ keys in the store

    def _k(self, code: str, part: str = "") -> str:
        return f"{self.prefix}c:{code}{':' + part if part else ''}"

    def _parts(self, code: str) -> list[str]:
        """Every key of a class: meta, version, the step record (head, traces), followers, the live state,
        the frames and their timeline, the question and its votes."""
        return [self._k(code, part) for part in ("", "v", "head", "t", "f", "live", "fr", "tl", "poll", "votes")]

    @property
    def channel(self) -> str:
        return f"{self.prefix}bus"

    def _news(self, **message) -> None:
        """Tell every server (and so every follower) at once: one message on the store's channel."""
        self._call(self.kv.publish, self.channel, wire.dumps(message))

    def _call(self, fn, *args, **kwargs):
        """One store call; Redis being away becomes StoreDown with a plain message."""
        try:
            return fn(*args, **kwargs)
        except (OSError, StoreDown):
            raise StoreDown("The class's shared state cannot be reached right now: try again in a moment.") from None
        except Exception as e:  # redis.exceptions.ConnectionError/TimeoutError are not OSErrors
            if type(e).__module__.startswith("redis"):
                raise StoreDown("The class's shared state cannot be reached right now: try again in a moment.") \
                    from None
            raise

    # ------------------------------------------------------------ rate limits (fixed one-minute windows)

    def _window(self, bucket: str) -> str:
        return f"{self.prefix}rl:{bucket}:{int(self.clock() // 60)}"

    def _over(self, bucket: str, limit: int) -> bool:
        return int(self._call(self.kv.get, self._window(bucket)) or 0) >= limit

    def _hit(self, bucket: str) -> None:
        key = self._window(bucket)
        self._call(self.kv.incr, key)
        self._call(self.kv.expire, key, 120)

    # ------------------------------------------------------------ the lecturer

    def classes(self) -> int:
        """Classes running now (ended and idle ones are pruned as they are counted)."""
        rooms = self._call(self.kv.hgetall, f"{self.prefix}rooms")
        now = self.clock()
        stale = [code for code, until in rooms.items()
                 if float(until) <= now or self._call(self.kv.get, self._k(code)) is None]
        if stale:
            self._call(self.kv.hdel, f"{self.prefix}rooms", *stale)
        return len(rooms) - len(stale)

    def start(self, key: str, who: str, new: bool = False) -> Lecture:
        """Check the lecturer key and lead a class; `who` is the browser session asking (for rate limits).

        The key is what leads. A lecturer who reloads the page (or comes back on another machine) types it
        again and gets the newest running class back: the same code, its students still connected, a new
        token (the old page no longer drives it). new=True opens another class instead.
        """
        lim = self.limits
        if not self.enabled:
            raise Refused("Follow is off on this server: whoever starts it sets DECODE_LAB_LECTURER_KEY "
                          "(or -- --lecturer-key).")
        if self._over(f"key:{who}", lim.key_tries) or self._over("key:*", lim.key_tries_server):
            raise Refused("Too many wrong lecturer keys: wait a minute, then try again.")
        if not key or not hmac.compare_digest(_sha(key), self._key_sha):
            self._hit(f"key:{who}")
            self._hit("key:*")
            raise Refused("That is not the lecturer key.")
        if self._over(f"start:{who}", lim.starts):
            raise Refused("Classes were started from this page too often: wait a minute.")
        self._hit(f"start:{who}")
        token = secrets.token_urlsafe(24)
        newest = None if new else self.newest()
        if newest is not None:
            meta = wire.loads(self._call(self.kv.get, self._k(newest)) or "{}")
            self._call(self.kv.set, self._k(newest), wire.dumps({**meta, "token": _sha(token)}), ex=self._ttl)
            # the old page's question goes with it: the new page cannot reveal it, and its step is not the new page's
            self._call(self.kv.delete, self._k(newest, "poll"), self._k(newest, "votes"))
            return Lecture(newest, token, resumed=True)
        running = self.classes()
        if running >= lim.max_classes:
            raise Refused(f"This server already runs {running} classes, the most it allows: end one, or wait "
                          f"until one has been idle for {lim.idle_s / 3600:g} hours.")
        now = self.clock()
        for _ in range(20):
            code = new_code()
            meta = wire.dumps({"token": _sha(token), "created": now})
            if self._call(self.kv.set, self._k(code), meta, ex=self._ttl, nx=True):
                break
        else:  # pragma: no cover - 20 collisions in a space of 887 million
            raise Refused("No free class code was found: try again.")
        lecture = Lecture(code, token)
        self._write_head(code, {"run": None, "at": 0, "view": "Attention", "layer": 0, "head": 0, "ids": [],
                                "piece_list": [], "prompt_len": 0, "use_cache": True, "done": False,
                                "stop_reason": None, "model": "", "fork": {}, "updated": now, "spec": None,
                                "steps": 0}, version=0)
        return lecture

    def newest(self) -> str | None:
        """The code of the class started last among those running, or None."""
        self.classes()  # prunes ended ones
        best = None
        for code in self._call(self.kv.hgetall, f"{self.prefix}rooms"):
            raw = self._call(self.kv.get, self._k(code))
            created = float(wire.loads(raw).get("created", 0)) if raw else None
            if created is not None and (best is None or created > best[0]):
                best = (created, code)
        return best[1] if best else None

    def _check(self, lecture: Lecture) -> None:
        meta = self._call(self.kv.get, self._k(lecture.code))
        if meta is None:
            raise Refused(f"Class {lecture.code} has ended (idle for {self.limits.idle_s / 3600:g} hours, or "
                          "ended by its lecturer): start a new class.")
        if not hmac.compare_digest(wire.loads(meta)["token"], _sha(lecture.token)):
            raise Refused("This page does not lead that class.")

    def _write_head(self, code: str, head: dict, version: int) -> None:
        """The head, then the version followers poll (a follower that sees the version finds the head)."""
        ttl = self._ttl
        self._call(self.kv.set, self._k(code, "head"), wire.dumps({**head, "version": version}), ex=ttl)
        self._call(self.kv.set, self._k(code, "v"), str(version), ex=ttl)
        for key in self._parts(code):
            if key not in (self._k(code, "head"), self._k(code, "v")):
                self._call(self.kv.expire, key, ttl)
        self._call(self.kv.hset, f"{self.prefix}rooms", code, str(self.clock() + ttl))

    def publish(self, lecture: Lecture, *, frame: dict | None = None, picks: dict | None = None,
                head: dict | None = None, traces: dict[int, dict] | None = None, fresh_run: bool = False) -> int:
        """Share the lecturer's screen; returns the new version.

        frame: what the screen shows (classroom/frames.py: {"id", "kind", "label", ...}); a frame not seen
        before joins the class's timeline (a follower's ‹ › walk it). picks: the lecturer's view, layer and
        head. head, traces: a step run's record (wire.head_of, and the traces not yet sent, {step: wire dict});
        fresh_run: a new run (Reset, a new prompt), whose old traces are dropped. Nothing given: the same
        screen again (a question asked or revealed).

        The record first, then the frame, then the live state with the version, then the news: whatever a
        server reads on hearing the news is complete.
        """
        self._check(lecture)
        code = lecture.code
        if fresh_run:  # a new run: the old one's traces go, its steps leave the timeline, and a question on one
            self._call(self.kv.delete, self._k(code, "t"), self._k(code, "poll"), self._k(code, "votes"))
            self._drop_step_frames(code)
        if traces:
            run = (head or {}).get("run")
            self._call(self.kv.hset, self._k(code, "t"),
                       mapping={f"{run}:{i}": wire.dumps(d) for i, d in traces.items()})
        before = self.live(code) or {}
        if frame is not None:
            self._add_frame(code, frame)
        version = int(self._call(self.kv.get, self._k(code, "v")) or 0) + 1
        if head is not None:
            self._write_head(code, {**head, "updated": self.clock()}, version)
        live = {"version": version, "frame": frame["id"] if frame is not None else before.get("frame"),
                "picks": picks if picks is not None else before.get("picks", {}),
                "poll": self.polls.public(code), "stamp": time.time(),
                "new_run": bool(fresh_run)}  # the followers' timelines lose the old run's steps too (classroom/hub.py)
        self._call(self.kv.set, self._k(code, "live"), wire.dumps(live), ex=self._ttl)
        self._call(self.kv.set, self._k(code, "v"), str(version), ex=self._ttl)
        self._call(self.kv.hset, f"{self.prefix}rooms", code, str(self.clock() + self._ttl))
        for key in self._parts(code):
            self._call(self.kv.expire, key, self._ttl)
        self._news(code=code, v=version)
        return version

    def _add_frame(self, code: str, frame: dict) -> None:
        """Keep the frame (replacing one with its id) and put it in the timeline if it is new there: at the end, or
        a step of a run before the first of that run's later steps (a lecturer who ran on to step 5 and scrubs back
        to 2 leaves the class's ‹ › walking 0, 2, 5, not 0, 5, 2): the step page's, a round, an engine step."""
        fid = str(frame["id"])
        self._call(self.kv.hset, self._k(code, "fr"), fid, wire.dumps(frame))
        timeline = self.timeline(code)
        if frame.get("timeline") is False or fid in (f for f, _ in timeline):
            return
        entry, place, order = [fid, str(frame.get("label", ""))], len(timeline), _order_of(fid)
        if order is not None:
            later = [i for i, (f, _) in enumerate(timeline) if (o := _order_of(f)) and o[0] == order[0] and o[1] > order[1]]
            place = later[0] if later else place
        timeline.insert(place, entry)
        dropped = timeline[:-MAX_FRAMES]
        if dropped:
            self._call(self.kv.hdel, self._k(code, "fr"), *[f for f, _ in dropped])
        self._call(self.kv.set, self._k(code, "tl"), wire.dumps({"frames": timeline[-MAX_FRAMES:]}), ex=self._ttl)

    def _drop_step_frames(self, code: str) -> None:
        """The step frames of the run just ended: their pictures are built from its traces, which are gone, so a
        follower looking back would find empty steps. Other pages' frames carry what they show and stay."""
        timeline = self.timeline(code)
        steps = [f for f, _ in timeline if (self.frame(code, f) or {}).get("kind") == "step"]
        if steps:
            self._call(self.kv.hdel, self._k(code, "fr"), *steps)
            kept = [x for x in timeline if x[0] not in steps]
            self._call(self.kv.set, self._k(code, "tl"), wire.dumps({"frames": kept}), ex=self._ttl)

    def live(self, code: str) -> dict | None:
        """What the class shows now: {version, frame (its id), picks, poll, stamp}; None before the first publish
        or once the class has ended."""
        raw = self._call(self.kv.get, self._k(code, "live"))
        return wire.loads(raw) if raw else None

    def frame(self, code: str, fid: str) -> dict | None:
        raw = self._call(self.kv.hget, self._k(code, "fr"), str(fid))
        return wire.loads(raw) if raw else None

    def timeline(self, code: str) -> list[list[str]]:
        """The frames the class has seen, oldest first: [[id, label], ...] (at most MAX_FRAMES)."""
        raw = self._call(self.kv.get, self._k(code, "tl"))
        return [list(x) for x in wire.loads(raw)["frames"]] if raw else []

    def end(self, lecture: Lecture) -> None:
        """The class ends now: its code stops working at once, for every follower."""
        self._check(lecture)
        self._call(self.kv.delete, *self._parts(lecture.code))
        self._call(self.kv.hdel, f"{self.prefix}rooms", lecture.code)
        self._news(code=lecture.code, end=True)

    # ------------------------------------------------------------ followers

    def join(self, code: str, who: str) -> str:
        """A student opens ?follow=CODE: the code, checked; Refused with a plain message otherwise."""
        lim = self.limits
        if self._over(f"join:{who}", lim.join_fails) or self._over("join:*", lim.join_fails_server):
            raise Refused("Too many wrong class codes: wait a minute, then check the code on the projector.")
        code = normalize(code)
        if not CODE_RE.match(code) or self._call(self.kv.get, self._k(code)) is None:
            self._hit(f"join:{who}")
            self._hit("join:*")
            raise Refused(NO_CLASS)
        present = self._call(self.kv.hget, self._k(code, "f"), who) is not None
        if not present and self.followers(code) >= lim.max_followers:
            raise Refused(f"This class is full ({lim.max_followers} students follow it): ask the lecturer.")
        self.seen(code, who)
        return code

    def seen(self, code: str, who: str, connected: bool = False) -> None:
        """A follower is there: it counts toward the class's size while its page holds the class's event stream
        open (connected), and for `presence_s` after it joined or its stream closed."""
        self._call(self.kv.hset, self._k(code, "f"), who, CONNECTED if connected else str(self.clock()))
        self._call(self.kv.expire, self._k(code, "f"), self._ttl)

    def is_follower(self, code: str, who: str) -> bool:
        """`who` joined this class, which is still running (what a stream or a vote must show)."""
        return bool(who) and self._call(self.kv.hget, self._k(code, "f"), str(who)[:64]) is not None

    def leave(self, code: str, who: str) -> None:
        self._call(self.kv.hdel, self._k(code, "f"), who)

    def followers(self, code: str) -> int:
        """Students following now (those gone quiet are pruned as they are counted)."""
        seen = self._call(self.kv.hgetall, self._k(code, "f"))
        cutoff = self.clock() - self.limits.presence_s
        gone = [who for who, at in seen.items() if at != CONNECTED and float(at) < cutoff]
        if gone:
            self._call(self.kv.hdel, self._k(code, "f"), *gone)
        return len(seen) - len(gone)

    def version(self, code: str) -> int | None:
        """What a follower polls: the class's version, or None when it has ended."""
        v = self._call(self.kv.get, self._k(code, "v"))
        return None if v is None else int(v)

    def read(self, code: str) -> wire.SharedRun | None:
        """The lecturer's run as followers see it; None when the class has ended.

        Decoded once per version on this server and shared by every follower here (read-only): each
        trace is decoded once, ever; an update costs reading the head and the new step.
        """
        version = self.version(code)
        if version is None:
            return None
        cached = self._runs.get(code)
        if cached is not None and self._read_at.get(code) == version:
            return cached
        with self._decoding:  # the followers of one update decode it once
            raw = self._call(self.kv.get, self._k(code, "head"))
            if raw is None:
                return None
            head = wire.loads(raw)
            cached = self._runs.get(code)
            if cached is not None and cached.version == head.get("version"):  # a frame of another page: same record
                self._read_at[code] = version
                return cached
            run, steps = head.get("run"), int(head.get("steps") or 0)
            missing = [i for i in range(steps) if (code, run, i) not in self._traces]
            if missing:
                got = self._call(self.kv.hmget, self._k(code, "t"), [f"{run}:{i}" for i in missing])
                for i, text in zip(missing, got):
                    if text is None:  # a newer run replaced this one while we read: show what we have
                        steps = min(steps, i)
                        break
                    d = wire.loads(text)
                    self._traces[(code, run, i)] = (wire.trace_from_wire(d), d.get("text") or "")
            pairs = [self._traces[(code, run, i)] for i in range(steps)]
            for i in range(steps):
                self._traces.move_to_end((code, run, i))
            while len(self._traces) > 4096:
                self._traces.popitem(last=False)
            shared = wire.run_from(head, [p[0] for p in pairs], [p[1] for p in pairs])
            self._runs[code], self._read_at[code] = shared, version
            return shared


def _order_of(fid: str) -> tuple[str, int] | None:
    """(run, step) of a frame that is a step of a run: the step page's "run:at" (frames.step_frame), a page's
    "page:….run:at" (page_copy, a page that gave class_label an order); None for any other frame."""
    _, _, tail = fid.rpartition(".")
    run, _, at = tail.rpartition(":")
    return (run, int(at)) if run and not run.startswith("page") and at.isdigit() else None
