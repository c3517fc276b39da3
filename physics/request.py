"""The life of one request, measured on this device: where the time goes from text in to text out.

    load the weights     disk -> memory -> device, once per server (not per request)
    tokenize             CPU: text -> ids
    copy to the device   ids -> the accelerator's memory
    prefill              one forward pass over every prompt position
    decode loop          one forward pass per new token
    copy back            the new ids -> the CPU
    detokenize           CPU: ids -> text

Prefill and the decode loop are the one generation loop (a Stepper, timed once per pass, recording
off); the copies and the tokenizer calls are timed around a device sync, as every time in the engine is. The
request runs once as a warm-up (excluded), then `runs` times: each step's time is its median over those runs, and
the whole runs' times give the spread.
On a CPU there is nothing to copy: those two steps come out near zero, and the picture says so.
`request_timeline` returns a frozen RequestTimeline (its RequestSteps in order); `to_dict()` only for JSON.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch

from engine.load.loaded import LoadedModel
from engine.timing import timed


@dataclass(frozen=True)
class RequestStep:
    name: str
    where: str  # "CPU", "device", or "disk → device"
    ms: float
    note: str  # what was measured, in a few words
    per_request: bool = True  # loading the weights happens once per server


@dataclass(frozen=True)
class RequestTimeline:
    """One request measured from text in to text out: its steps in order, and what it was."""

    steps: tuple[RequestStep, ...]
    device: str  # where the passes ran, as torch names it ("cpu", "cuda:0", "mps")
    prompt_tokens: int
    new_tokens: int  # tokens it generated
    runs_ms: tuple[float, ...] = ()  # each timed run's own time, every step but loading (the warm-up run apart)

    @property
    def per_request_ms(self) -> float:
        """The request's own time: every step's median but loading the weights (once per server)."""
        return sum(s.ms for s in self.steps if s.per_request)

    def to_dict(self) -> dict:
        return {"steps": [asdict(s) for s in self.steps], "device": self.device, "prompt_tokens": self.prompt_tokens,
                "new_tokens": self.new_tokens, "per_request_ms": self.per_request_ms, "runs_ms": list(self.runs_ms)}


def _timed(fn, device) -> tuple[object, float]:
    out = []
    timing = timed(lambda: out.append(fn()), device, repeats=1, warmup=0)
    return out[-1], timing.forward_ms


def _one_request(lm: LoadedModel, prompt: str, new_tokens: int) -> tuple[list[int], list[int], int, int, list[float]]:
    """The request once, text in to text out: (prompt ids, new ids, prefill's positions, decode passes, the ms of
    tokenize, copy to the device, prefill, the decode loop, copy back and detokenize, in that order)."""
    from engine.generate.stepper import Stepper

    ids, tok_ms = _timed(lambda: lm.tokenizer(prompt)["input_ids"], lm.device)
    _, to_ms = _timed(lambda: torch.tensor([ids]).to(lm.device), lm.device)
    run = Stepper(lm, prompt, max_new_tokens=new_tokens, stop_on_eos=False, record=False, repeats=1)
    prefill = run.prefill()
    decode = run.run()
    on_device = torch.tensor(run.generated_ids).to(lm.device)
    _, back_ms = _timed(lambda: on_device.cpu(), lm.device)
    _, detok_ms = _timed(lambda: lm.tokenizer.decode(run.generated_ids, skip_special_tokens=True), lm.device)
    generated = list(run.generated_ids)
    run.free()
    return ids, generated, prefill.q_len, len(decode), [tok_ms, to_ms, prefill.latency_ms,
                                                         sum(t.latency_ms for t in decode), back_ms, detok_ms]


def request_timeline(lm: LoadedModel, prompt: str, new_tokens: int = 16, runs: int = 3) -> RequestTimeline:
    """Measure every step of one greedy request for `prompt` on `lm`'s device (`new_tokens` new tokens): a warm-up
    request, excluded, then `runs` more; each step's median over them."""
    _one_request(lm, prompt, new_tokens)  # warm-up: this prompt's shapes' first passes, excluded
    timed_runs = [_one_request(lm, prompt, new_tokens) for _ in range(max(1, runs))]
    ids, generated, positions, passes, _ = timed_runs[-1]
    ms = [statistics.median(each) for each in zip(*(r[-1] for r in timed_runs))]
    where = f"device ({lm.device.type})"
    copy = "nothing to copy on a CPU" if lm.device.type == "cpu" else "host ↔ device transfer"
    return RequestTimeline(steps=(
        RequestStep("load the weights", "disk → memory", lm.load_ms,
                    f"{int(lm.spec.parameters):,} parameters, once per server", per_request=False),
        RequestStep("tokenize", "CPU", ms[0], f"{len(prompt)} characters → {len(ids)} ids"),
        RequestStep("copy to the device", where, ms[1], f"{len(ids)} ids; {copy}"),
        RequestStep("prefill", where, ms[2], f"one pass over {positions} positions → the first new token"),
        RequestStep("decode loop", where, ms[3], f"{passes} passes, one per new token after the first"),
        RequestStep("copy back", where, ms[4], f"{len(generated)} new ids; {copy}"),
        RequestStep("detokenize", "CPU", ms[5], f"{len(generated)} ids → text"),
    ), device=str(lm.device), prompt_tokens=len(ids), new_tokens=len(generated),
        runs_ms=tuple(sum(r[-1]) for r in timed_runs))
