"""A loaded model, shared read-only by every session: the model, its tokenizer, its figures, and a lock.

Nearly every part of the engine takes one: load it with engine.load.load.load_model.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch

from engine.errors import Busy
from engine.forward.spec import ModelSpec

MAX_WAITING = 64  # forward passes queued for the model at once; more get a polite "busy"
MAX_WAIT_S = 30.0  # how long one forward pass may wait for its turn


@dataclass
class LoadedModel:
    """A model, its tokenizer and a lock: shared read-only by every session.

    Forward passes take `lock` (through `turn()`), so two sessions never run the
    shared model at once: on a CPU they would only fight for the same cores, and
    timings would lie. Each session keeps its own cache and traces (see Stepper).
    """

    model: torch.nn.Module
    tokenizer: object
    spec: ModelSpec
    device: torch.device
    dtype: torch.dtype
    captures: bool  # Q/K/V are read off the real tensors (engine.forward.capture); else derived from the config
    warmup_ms: float = 0.0  # time of the warm-up passes made at load, reported apart from every step
    load_ms: float = 0.0  # reading the tokenizer and the weights and putting them on the device (once per server)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    slots: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(MAX_WAITING), repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def elem_bytes(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    def rows(self) -> list[tuple[str, str]]:
        """The model at a glance, in the words the code and the traces use."""
        s = self.spec
        return [
            ("name", s.name), ("architecture", s.architecture), ("layer", str(s.layers)),
            ("head (query heads)", str(s.heads)), ("kv_head (key/value heads)", f"{s.kv_heads} ({s.attention})"),
            ("head_dim", str(s.head_dim)), ("d_model", str(s.d_model)), ("vocab", f"{s.vocab:,}"),
            ("attention per layer", s.layer_pattern()), ("max positions", f"{s.max_positions:,}" + (
                "" if s.max_positions_set else " (not set in its config: the app stops here)")),
            ("parameters", f"{int(s.parameters):,}"), ("dtype", self.dtype_name), ("device", str(self.device)),
            ("Q/K/V shapes", f"q [batch, {s.heads}, pos, {s.head_dim}], k and v [batch, {s.kv_heads}, pos, "
                             f"{s.head_dim}] ([batch, head or kv_head, pos, head_dim]; from the config: "
                             + ("the step pages show them measured on the real tensors)" if self.captures else
                                "this family's tensors are not recorded)")),
        ]

    @contextmanager
    def turn(self):
        """Hold the model for one forward pass; refuse politely when too much work is queued."""
        if not self.slots.acquire(blocking=False):
            raise Busy(f"The server is busy ({MAX_WAITING} steps are already waiting for the model). "
                       "Try again in a moment.")
        try:
            if not self.lock.acquire(timeout=MAX_WAIT_S):
                raise Busy(f"The server is busy: your step waited {MAX_WAIT_S:.0f} s for the model. "
                           "Try again in a moment.")
            try:
                yield
            finally:
                self.lock.release()
        finally:
            self.slots.release()

    @contextmanager
    def background_turn(self, tries: int = 60):
        """The turn a background measurement takes, a round at a time: a step's (`turn`), asked again while
        students' steps keep the model busy, so the job waits its turn instead of failing on a busy moment."""
        for attempt in range(tries):
            held = ExitStack()
            try:
                held.enter_context(self.turn())
            except Busy:
                if attempt == tries - 1:
                    raise
                continue
            with held:
                yield
            return
