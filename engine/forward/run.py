"""Every forward pass the engine makes, and every version-sensitive argument it passes.

    prefill:  input_ids [batch, s] on an empty cache (or none)
    decode:   input_ids [batch, 1] on the cache, or [batch, n] with no cache at all

`run_pass` is the one place the readable path calls `model(...)`: the stepper, the batch lesson,
the speculative verifier, the warm-up and the benchmarks all come here, so a change in transformers'
calling convention is a one-file fix. The compiled lean path (engine/forward/compiled.py) is the other
caller: a compiled step may hold no clock reads or syncs, and a static cache needs explicit positions.

Time is `perf_counter` around a device sync. A pass can be repeated to time it: the
first run is the warm-up (one-off costs: allocations, kernel choice) and is reported
apart; the others give a median and a spread. Repeats never change the result: a
cached pass is rolled back before it runs again, and the logits kept are the last run's.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from engine import device as dev
from engine.forward import capture
from engine.forward.cache import kv_length, roll_back
from engine.forward.cache import trim as trim_cache


@dataclass(frozen=True)
class Timing:
    """How long one forward pass took: every timed repeat, and the warm-up run apart."""

    samples_ms: tuple[float, ...]  # timed runs of the same pass, each after a device sync
    warmup_ms: float | None  # the first run when the pass was repeated: excluded from the median
    sample_ms: float = 0.0  # choosing the token from the logits (after the pass)

    @property
    def forward_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def low_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def high_ms(self) -> float:
        return max(self.samples_ms)

    @property
    def repeats(self) -> int:
        return len(self.samples_ms)

    def describe(self, short: bool = False) -> str:
        """'5.1 ms (median of 3, 4.9–5.6; warm-up 7.0 excluded)' or '5.1 ms (one run)'."""
        if self.repeats == 1:
            return f"{self.forward_ms:.1f} ms (one run)"
        warm = f"; warm-up {self.warmup_ms:.1f} excluded" if self.warmup_ms is not None and not short else ""
        return f"{self.forward_ms:.1f} ms (median of {self.repeats}, {self.low_ms:.1f}–{self.high_ms:.1f}{warm})"


@dataclass
class Pass:
    """What one forward pass returned: the last position's logits, the captured attention, the shapes."""

    logits: torch.Tensor  # [batch, logit_rows, vocab] on the model's device
    captures: list  # engine.forward.capture.Capture per layer (empty when not recorded)
    hidden_shape: tuple[int, ...] | None  # [batch, pos, d_model] entering the first block (recorded passes)
    timing: Timing
    attentions: tuple | None = None  # per layer [batch, head, query_pos, key_pos], for families not captured

    def patterns(self) -> list[torch.Tensor]:
        """Attention weights per layer [batch, head, query_pos, key_pos], however they were obtained."""
        if self.captures:
            return [c.pattern for c in sorted(self.captures, key=lambda c: c.layer)]
        return list(self.attentions or [])


def run_pass(lm, input_ids: torch.Tensor, cache=None, *, record: bool = False, repeats: int = 1,
             attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
             logits_to_keep: int = 1, trim: bool = True) -> Pass:
    """One forward pass under the model's lock, timed; `repeats` > 1 runs it again to time it honestly.

    input_ids [batch, q_len]; the cache (if any) grows by q_len positions, once, whatever `repeats` is.
    trim=False keeps what a sliding-window layer pushed out until the caller rolls the pass back or
    trims (a speculative verify pass, whose rejected rows are cut afterwards).
    """
    q_len = input_ids.shape[1]
    if attention_mask is None:  # built where the model is: no host-to-device copy per step
        attention_mask = torch.ones(input_ids.shape[0], kv_length(cache) + q_len, dtype=torch.long, device=lm.device)
    kwargs = dict(input_ids=input_ids.to(lm.device), attention_mask=attention_mask.to(lm.device),
                  use_cache=cache is not None, logits_to_keep=logits_to_keep, output_hidden_states=record)
    if cache is not None:
        kwargs["past_key_values"] = cache
    if record and not lm.captures:  # this family's attention is not captured: ask transformers for the weights
        kwargs["output_attentions"] = True
    if position_ids is not None:
        kwargs["position_ids"] = position_ids.to(lm.device)
    runs = 1 if repeats <= 1 else repeats + 1  # the first of several is the warm-up
    times = []
    observe = getattr(cache, "observe", None)  # a cache that evicts by attention sees each layer's weights
    with lm.turn(), torch.inference_mode(), capture.observing(observe):
        for run in range(runs):
            with (capture.recording() if record else nullcontext([])) as captures:
                dev.sync(lm.device)
                t0 = time.perf_counter()
                out = lm.model(**kwargs)
                dev.sync(lm.device)
                times.append((time.perf_counter() - t0) * 1e3)
            if run < runs - 1:
                roll_back(cache, q_len)  # undo this run's K/V: the next run repeats the same pass
        if trim and lm.spec.sliding_layers:  # only a sliding-window layer has anything to trim
            trim_cache(cache)
    hidden = tuple(out.hidden_states[0].shape) if record and out.hidden_states else None
    timing = Timing(samples_ms=tuple(times[1:] if runs > 1 else times), warmup_ms=times[0] if runs > 1 else None)
    attentions = out.attentions if record and not lm.captures else None
    return Pass(logits=out.logits, captures=captures, hidden_shape=hidden, timing=timing, attentions=attentions)


def warm_up(lm) -> float:
    """A short prefill and one decode-shaped pass at load, so no student's step pays first-call setup.

    Returns the time in ms; it is reported as the load's warm-up and never mixed into step latencies.
    """
    from engine.forward.cache import new_cache

    ids = torch.tensor([[lm.tokenizer.eos_token_id or 0] * 4])
    cache = new_cache(lm.config)
    t0 = time.perf_counter()
    run_pass(lm, ids, cache, record=True)
    run_pass(lm, ids[:, :1], cache, record=True)
    return (time.perf_counter() - t0) * 1e3


class StepClock:
    """A generate() streamer that reads the clock after every token (after a device sync)."""

    def __init__(self, device):
        self.device = device
        self.times: list[float] = []

    def put(self, value):
        dev.sync(self.device)
        self.times.append(time.perf_counter())

    def end(self):
        pass


def generate(lm, prompt_ids: torch.Tensor, new_tokens: int, *, use_cache: bool = True, streamer=None,
             **assist) -> list[int]:
    """transformers' own greedy `generate` on the loaded model: what the benchmarks time the engine against.

    It runs through the engine's registered attention (engine.forward.capture), so it is no check of that
    attention: the tests compare tokens and logits with a separate copy of the model (tests/reference.py).

    `assist` passes assisted-generation arguments through (assistant_model=..., prompt_lookup_num_tokens=...).
    """
    ids = prompt_ids.to(lm.device)
    with lm.turn(), torch.inference_mode():
        # eos_token_id=None: exactly new_tokens tokens, and EOS chosen like any other token (as the Stepper with
        # stop_on_eos=False does); min_new_tokens would instead forbid EOS, a different rule
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                do_sample=False, use_cache=use_cache, streamer=streamer, eos_token_id=None,
                                pad_token_id=lm.tokenizer.eos_token_id, **assist)
    return out[0, ids.shape[1]:].tolist()
