"""Every forward pass the engine makes, and every version-sensitive argument it passes.

    prefill:  input_ids [batch, s] on an empty cache (or none)
    decode:   input_ids [batch, 1] on the cache, or [batch, n] with no cache at all

`run_pass` is the one place the readable path calls `model(...)`: the stepper, the batch lesson,
the speculative verifier, the warm-up and the benchmarks all come here, so a change in transformers'
calling convention is a one-file fix. The compiled lean path (physics/compiled.py) is the other
caller: a compiled step may hold no clock reads or syncs, and a static cache needs explicit positions.

Time is `engine.timing.timed`: `perf_counter` around a device sync. A pass can be repeated to time it: the
first run is the warm-up (one-off costs: allocations, kernel choice) and is reported
apart; the others give a median and a spread. Repeats never change the result: a
cached pass is rolled back before it runs again, and the logits kept are the last run's.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from engine.forward import capture
from engine.forward.cache import kv_length, roll_back
from engine.forward.cache import trim as trim_cache
from engine.timing import Timing, span, timed


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
    last = {}
    observe = getattr(cache, "observe", None)  # a cache that evicts by attention sees each layer's weights

    def one():
        with (capture.recording() if record else nullcontext([])) as captures:
            last["out"] = lm.model(**kwargs)
        last["captures"] = captures

    with lm.turn(), torch.inference_mode(), capture.observing(observe):
        # several runs: the first is the warm-up; each is rolled back so that the next repeats the same pass
        timing = timed(one, lm.device, repeats=repeats, warmup=1 if repeats > 1 else 0,
                       between=lambda: roll_back(cache, q_len))
        if trim and lm.spec.sliding_layers:  # only a sliding-window layer has anything to trim
            trim_cache(cache)
    out, captures = last["out"], last["captures"]
    hidden = tuple(out.hidden_states[0].shape) if record and out.hidden_states else None
    attentions = out.attentions if record and not lm.captures else None
    return Pass(logits=out.logits, captures=captures, hidden_shape=hidden, timing=timing, attentions=attentions)


def warm_up(lm) -> float:
    """A short prefill and one decode-shaped pass at load, so no student's step pays first-call setup.

    Returns the time in ms; it is reported as the load's warm-up and never mixed into step latencies.
    """
    from engine.forward.cache import new_cache

    ids = torch.tensor([[lm.tokenizer.eos_token_id or 0] * 4])
    cache = new_cache(lm.config)
    with span(lm.device) as took:
        run_pass(lm, ids, cache, record=True)
        run_pass(lm, ids[:, :1], cache, record=True)
    return took.ms
