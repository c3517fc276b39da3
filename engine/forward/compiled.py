"""A lean decode path for timing only: a static KV cache, no record, and on CUDA one captured graph per step.

On a GPU the readable path (the Stepper through run_pass) is launch-bound: eager attention and Python issue
hundreds of small kernels per decode step, so a 1 B model's step sits far above its memory bound. gpt-fast
and vLLM remove that cost by giving the cache a fixed size (a StaticCache: every tensor keeps its address)
and capturing the decode step once as a CUDA graph, then replaying it: one launch per step.

    prefill:  input_ids [batch=1, s]  cache_position 0 .. s-1   eager, once: fills the static cache
    decode:   input_ids [batch=1, 1]  cache_position [pos]      the captured graph on CUDA, eager elsewhere

This path calls the model itself rather than engine.forward.run.run_pass: a captured graph may not contain
run_pass's device syncs and clock reads, and a static cache needs explicit cache positions. It holds the
model's lock for as long as it runs, as run_pass does. Students step through the readable path; the ladder
times this one on a GPU and says which ran. On a CPU it runs without graphs (a static cache attends over its
whole length there, masked, so it is no faster): that is how its tokens are checked against the Stepper's.
"""

from __future__ import annotations

import time

import torch

from engine.forward.run import Timing
from engine import device as dev


class LeanDecoder:
    """One sequence on a static cache of `max_len` positions; greedy tokens only (timing needs nothing more)."""

    def __init__(self, lm, max_len: int, graphs: bool | None = None):
        from transformers import StaticCache

        self.lm = lm
        self.graphs = lm.device.type == "cuda" if graphs is None else bool(graphs)
        if self.graphs and lm.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.cache = StaticCache(config=lm.config, max_cache_len=max_len)
        self.max_len = max_len
        self.pos = 0  # positions written so far
        self.ids = torch.zeros(1, 1, dtype=torch.long, device=lm.device)  # the decode step's input, [batch, 1]
        self.where = torch.zeros(1, dtype=torch.long, device=lm.device)  # its cache position, [1]
        # [batch, key_pos]: nothing is padding; causality comes from the cache positions
        self.mask = torch.ones(1, max_len, dtype=torch.long, device=lm.device)
        self.graph = None
        self.graph_error: str | None = None  # why capture failed, when it did (the step then runs eagerly)
        self.logits = None  # [batch, vocab] the captured step's output, overwritten by every replay

    @property
    def how(self) -> str:
        """Which path ran, in words, for the UI."""
        if self.graph is not None:
            return "static cache + CUDA graph"
        if self.graph_error:
            return f"static cache, eager (graph capture failed: {self.graph_error})"
        return "static cache, eager (no graphs on this device)"

    def _forward(self, ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """One pass on the static cache; the last position's logits [batch, vocab]."""
        out = self.lm.model(input_ids=ids, attention_mask=self.mask, cache_position=where,
                            position_ids=where.unsqueeze(0), past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1)
        return out.logits[:, -1]

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor) -> int:
        """Every prompt position at once, [batch=1, s]; returns the greedy next token."""
        s = ids.shape[1]
        if s + 1 > self.max_len:
            raise ValueError(f"a {s}-token prompt and one step do not fit a {self.max_len}-position static cache")
        logits = self._forward(ids.to(self.lm.device), torch.arange(s, device=self.lm.device))
        self.pos = s
        return int(logits.argmax(-1))

    @torch.inference_mode()
    def step(self, token: int) -> torch.Tensor:
        """Feed `token` at position `pos` without advancing (so a timed step can be repeated): its logits."""
        if self.pos >= self.max_len:
            raise ValueError("the static cache is full")
        self.ids.fill_(token)
        self.where.fill_(self.pos)
        _rewind(self.cache, self.pos)
        if self.graphs and self.graph is None and self.graph_error is None:
            self._capture()
        if self.graph is not None:
            self.graph.replay()
            return self.logits
        return self._forward(self.ids, self.where)

    def decode(self, token: int) -> int:
        """One cached step: the greedy token after `token`."""
        logits = self.step(token)
        self.pos += 1
        return int(logits.argmax(-1))

    def _capture(self) -> None:
        """Warm up on a side stream, then record the step once (gpt-fast's and PyTorch's recipe).

        The warm-up runs write this very position's K/V with this very token, which the real step writes again:
        nothing in the cache changes that the step would not have written.
        """
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._forward(self.ids, self.where)
                    _rewind(self.cache, self.pos)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.logits = self._forward(self.ids, self.where)
            self.graph = graph
        except Exception as e:  # noqa: BLE001 - a model whose step cannot be captured still runs, eagerly, and says so
            self.graph, self.logits = None, None
            self.graph_error = f"{type(e).__name__}: {str(e)[:120]}"


def _rewind(cache, pos: int) -> None:
    """Set where the static cache writes next to `pos`, so the same step can run again.

    transformers 5.x keeps that position on each layer as a device tensor (`cumulative_length`) that every
    update advances in place (a captured graph advances it on each replay too); older versions wrote where
    `cache_position` said, which this path always passes.
    """
    for layer in getattr(cache, "layers", ()):
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            length.fill_(pos)


def greedy(lm, ids: torch.Tensor, new_tokens: int, graphs: bool | None = None) -> list[int]:
    """`new_tokens` greedy tokens after the prompt ids [batch=1, s] on the lean path (the first from the prefill)."""
    run = LeanDecoder(lm, ids.shape[1] + new_tokens, graphs)
    with lm.turn():
        out = [run.prefill(ids)]
        while len(out) < new_tokens:
            out.append(run.decode(out[-1]))
    return out


def time_decode(lm, ids: torch.Tensor, repeats: int = 5, graphs: bool | None = None) -> tuple[Timing, str]:
    """A cached decode step at context s = ids.shape[1] on the lean path, timed like every step here.

    Prefill once (untimed), then the same step repeats + 1 times at the same position: the first run is the
    warm-up (on CUDA it includes the graph capture) and is reported apart; `perf_counter` around a device sync.
    Returns the timing and which path ran.
    """
    run = LeanDecoder(lm, ids.shape[1] + 2, graphs)
    times = []
    with lm.turn():
        token = run.prefill(ids)
        for _ in range(repeats + 1):
            dev.sync(lm.device)
            t0 = time.perf_counter()
            run.step(token)
            dev.sync(lm.device)
            times.append((time.perf_counter() - t0) * 1e3)
    return Timing(samples_ms=tuple(times[1:]), warmup_ms=times[0]), run.how
