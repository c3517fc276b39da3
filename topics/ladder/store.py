"""Measured once per server, shared by every session: a class of 30 costs one ladder (its pass over n rows too).

    start_ladder(lm) / ladder_job(lm) / kept_ladder(lm)   the Scale page's button, its progress, its result
    measured_ladders(lm)                                  every ladder measured here, oldest first: a new one is
                                                          kept beside the others, never over them
    recorded_ladders()                                    what assets/ ships, each naming its device and date

A measurement runs in a thread of its own, not a page's: a click elsewhere reruns the page, never ends it.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass

from engine.load.loaded import LoadedModel
from engine.paths import ASSETS
from physics.rungs import timing_dtype
from topics.ladder.measure import REPEATS, default_tokens, measure_ladder
from topics.ladder.record import Ladder


class _Job:
    """A ladder being measured: its latest progress, and an event its waiters wait on."""

    def __init__(self):
        self.done = threading.Event()
        self.progress = (0.0, "starting…")
        self.result: Ladder | None = None
        self.error: BaseException | None = None


class LadderStore:
    """Ladders measured in this process, one per key: a class of 30 costs one ladder.

    Two callers asking for the same key at once share one build: the first measures, the others wait and
    see its progress (each reports it from its own thread, by polling: a page's progress bar belongs to its
    own session). A failed build is not kept, so the next caller tries again.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: dict = {}
        self._running: dict = {}
        self._failed: dict = {}  # key -> the error of its last measurement, until a page says it
        self._history: dict = {}  # key -> every ladder measured, oldest first (a busy one never wipes a clean one)
        self.builds = 0  # ladders measured (tests count them)

    def kept(self, key) -> Ladder | None:
        with self._lock:
            return self._kept.get(key)

    def measured(self, key) -> list[Ladder]:
        """Every ladder measured for `key` in this process, oldest first (the kept one last)."""
        with self._lock:
            got = list(self._history.get(key, []))
            kept = self._kept.get(key)
        return got + ([kept] if kept is not None and all(kept is not g for g in got) else [])

    def _claim(self, key, again: bool) -> tuple[Ladder | None, _Job | None, bool]:
        """(the kept ladder, or the job measuring it, and whether this caller must run that job)."""
        with self._lock:
            if not again and key in self._kept:
                return self._kept[key], None, False
            job = self._running.get(key)
            if job is not None:
                return None, job, False
            job = self._running[key] = _Job()
            self._failed.pop(key, None)
            self.builds += 1
            return None, job, True

    def _work(self, key, job: _Job, measure, on_progress=None, keep_error: bool = False) -> None:
        def progress(fraction: float, text: str) -> None:
            job.progress = (fraction, text)
            if on_progress:
                on_progress(fraction, text)

        try:
            job.result = measure(progress)
            with self._lock:
                self._kept[key] = job.result
                self._history.setdefault(key, []).append(job.result)
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits, or kept for the page to say
            job.error = e
            if keep_error:  # nobody waits on a background job: its page says why, once
                with self._lock:
                    self._failed[key] = e
        finally:
            with self._lock:
                self._running.pop(key, None)
            job.done.set()

    def get(self, key, measure, again: bool = False, on_progress=None, poll_s: float = 0.2) -> Ladder:
        """The kept ladder for `key`, or measure(progress) once for everyone asking, in this thread; again=True
        measures anew (unless a measurement of that key is already under way: its result is as fresh)."""
        kept, job, mine = self._claim(key, again)
        if kept is not None:
            return kept
        if mine:
            self._work(key, job, measure, on_progress)
        else:
            while not job.done.wait(poll_s):
                if on_progress:
                    on_progress(*job.progress)
        if job.error is not None:
            raise job.error
        return job.result

    def start(self, key, measure, again: bool = False) -> _Job | None:
        """Measure in a thread of its own, not a page's: a page run that ends (a click elsewhere reruns the page)
        does not end the measurement. The job under way (mine or another session's), or None when the kept
        ladder is all there is to show."""
        kept, job, mine = self._claim(key, again)
        if mine:
            threading.Thread(target=self._work, args=(key, job, measure), kwargs={"keep_error": True}, name="ladder",
                             daemon=True).start()
        return job

    def running(self, key) -> _Job | None:
        """The measurement of `key` under way, or None: every page run of every session can show its progress."""
        with self._lock:
            return self._running.get(key)

    def failed(self, key) -> BaseException | None:
        """Why the last measurement of `key` failed, once (a page says it), or None."""
        with self._lock:
            return self._failed.pop(key, None)


STORE = LadderStore()


def ladder_key(lm: LoadedModel, sizes=None, tokens: int | None = None, repeats: int = REPEATS) -> tuple:
    return (lm.spec.name, int(lm.spec.parameters), str(lm.device), str(timing_dtype(lm)),
            tuple(str(s) for s in sizes) if sizes else "default", tokens or default_tokens(lm.device), repeats)


def ladder(lm: LoadedModel, sizes=None, tokens: int | None = None, repeats: int = REPEATS, again: bool = False,
           on_progress=None, store: LadderStore = STORE) -> Ladder:
    """The ladder for lm on its device: measured once per server and kept; again=True measures it anew."""
    return store.get(ladder_key(lm, sizes, tokens, repeats),
                     lambda progress: measure_ladder(lm, sizes, tokens, repeats, on_progress=progress),
                     again=again, on_progress=on_progress)


def start_ladder(lm: LoadedModel, again: bool = False, store: LadderStore = STORE) -> _Job | None:
    """Measure the ladder for lm in the background (the Scale page's button): see LadderStore.start."""
    return store.start(ladder_key(lm), lambda progress: measure_ladder(lm, on_progress=progress), again=again)


def ladder_job(lm: LoadedModel, store: LadderStore = STORE) -> _Job | None:
    """The measurement of lm's ladder under way on this server, or None."""
    return store.running(ladder_key(lm))


def ladder_failed(lm: LoadedModel, store: LadderStore = STORE) -> BaseException | None:
    return store.failed(ladder_key(lm))


def kept_ladder(lm: LoadedModel, sizes=None, tokens: int | None = None, repeats: int = REPEATS,
                store: LadderStore = STORE) -> Ladder | None:
    """The ladder already measured for these settings, or None (a page shows it without measuring)."""
    return store.kept(ladder_key(lm, sizes, tokens, repeats))


def measured_ladders(lm: LoadedModel, store: LadderStore = STORE) -> list[Ladder]:
    """Every ladder measured on this server for lm, oldest first: each is kept, a busy one beside the clean ones."""
    return store.measured(ladder_key(lm))


def recorded_ladders() -> list[Ladder]:
    """Ladders recorded on other devices and shipped in assets/ (ladder_*.json), to show beside a live one: read
    once per file as it stands (a page asks for them many times a rerun; a file rewritten is read again)."""
    return list(_read_recorded(tuple((p, p.stat().st_mtime_ns) for p in sorted(ASSETS.glob("ladder_*.json")))))


@functools.lru_cache(maxsize=4)
def _read_recorded(files: tuple) -> tuple[Ladder, ...]:
    """The recordings as read from (path, modification time) pairs; Ladder is frozen, so every caller shares them."""
    from dataclasses import replace

    return tuple(replace(Ladder.from_dict(json.loads(p.read_text(encoding="utf-8"))), recorded=True)
                 for p, _ in files)


@dataclass(frozen=True)
class CurveSteps:
    """The one-row decode step and the prefills of a shipped pass-of-n curve, as its recording timed them: what the
    Scale page's bytes section sets its own passes beside (topics/bytes/draw.py: other_recording)."""

    device: str
    measured_at: str
    parameters: int
    decode_ms: float
    decode_bytes: float  # estimate
    prefills: tuple[tuple[int, float, float], ...] = ()  # (rows, median ms, FLOPs estimate), fewest rows first

    def prefill(self, rows: int) -> tuple[float, float] | None:
        """(median ms, FLOPs) of the prefill of this many rows, where the curve timed one."""
        return next(((ms, flops) for n, ms, flops in self.prefills if n == rows), None)


def curve_step(kind: str) -> CurveSteps | None:
    """The one-row decode step and the prefills of the pass-of-n curve shipped for this kind of device ('cpu',
    'cuda'), or None."""
    for lad in recorded_on(kind, recorded_ladders()):
        for r in lad.rungs:
            c = getattr(r, "curve", None)
            step = next((p for p in c.points if p.kind == "decode" and p.rows == 1), None) if c else None
            if step is not None:
                return CurveSteps(lad.device, lad.measured_at, c.parameters, step.median_ms, step.bytes_moved,
                                  tuple((p.rows, p.median_ms, p.flops) for p in c.of("prefill")))
    return None


def recorded_on(kind: str, recorded: list) -> list:
    """The recordings made on a device of this kind ('cpu', 'cuda'), first: a CPU server shows a CPU's first."""
    return sorted(recorded, key=lambda r: ("cuda" in r.device) != (kind == "cuda"))
