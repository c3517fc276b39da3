"""Bytes are time, measured once per server in a thread of its own (a click elsewhere reruns the page, never
ends it), and the recording assets/ ships for this project's CPU.

    recorded()          the shipped recording (assets/bytes_cpu.json), read back, or None
    with_stories(w)     the window's damage with its spread over the budget page's held-out stories, where recorded
    start(lm) / job()   the page's button: measure on this server in the background; its progress and result
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import replace

from engine.paths import ASSETS
from topics.bytes.records import Record, WindowDamage

RECORDING = ASSETS / "bytes_cpu.json"
BUDGET_STORIES = ASSETS / "budget_stories_default.json"  # the budget page's policies over several held-out stories
_LOCK = threading.Lock()


class Job:
    def __init__(self):
        self.done = threading.Event()
        self.progress = "starting…"
        self.result: Record | None = None
        self.error: BaseException | None = None


_JOB: Job | None = None


def recorded(path=RECORDING) -> Record | None:
    """The recording, its window's damage with the stories' spread beside it (a recording made before they were)."""
    try:
        rec = Record.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return replace(rec, window=with_stories(rec.window)) if rec.window else rec


def with_stories(w: WindowDamage | None) -> WindowDamage | None:
    """The window's damage with each held-out story's agreement beside its one story's, where the budget page's
    recording of several stories (BUDGET_STORIES) has the same policy, budget, context and model in fp32."""
    if w is None or w.stories:
        return w
    try:
        doc = json.loads(BUDGET_STORIES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return w
    if (doc.get("model"), doc.get("budget"), doc.get("context")) != (w.model, w.budget, w.context):
        return w
    row = next((r for r in doc.get("rows", ()) if r.get("policy") == w.policy and r.get("budget") == w.budget
                and r.get("dtype") == "float32"), None)
    if row is None:
        return w
    return replace(w, stories=tuple(s["agreeing"] / s["steps"] for s in row["stories"] if s["steps"]))


def job() -> Job | None:
    return _JOB


def start(lm, size: str = "110M") -> Job:
    """Measure on this server (one at a time, per process): the rung grown from lm, each round timed in the
    model's turn (lm.background_turn), so students' steps run between rounds and never beside a timing."""
    global _JOB
    with _LOCK:
        if _JOB is not None and not _JOB.done.is_set():
            return _JOB
        _JOB = j = Job()

    def work():
        import torch

        from engine.torch_internals import inductor_cpu_threads
        from physics import machine
        from physics.rungs import rung_model
        from topics.bytes import measure

        def say(text: str) -> None:
            j.progress = text

        try:
            rlm = rung_model(lm, size, dtype=torch.float32)

            @contextmanager
            def turn():  # each round: the model's turn, as a student's step takes it, on the rung's threads
                with lm.background_turn(), machine.serving_cores(rlm.spec.parameters):
                    yield

            with inductor_cpu_threads(machine.serving_threads(int(rlm.spec.parameters))):  # compiled as timed
                j.result = measure.record(rlm, f"{size} rung", command="the Scale page's button", on_point=say,
                                          hold=turn)
        except BaseException as e:  # noqa: BLE001 - shown on the page, never lost in a thread
            j.error = e
        finally:
            j.done.set()

    threading.Thread(target=work, name="bytes", daemon=True).start()
    return j
