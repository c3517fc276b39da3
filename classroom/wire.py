"""A run as plain JSON, so that a class can share it: a trace out of one server, the same trace into another.

The lecturer's session writes each StepTrace once; every follower, on this replica or on another one
behind the proxy, reads it back as an equal StepTrace and draws it with the same functions. Nothing
runs the model to follow: a follower's update is a read and a decode.

JSON only, never pickle: what is read back is data, whatever is in the store. A trace is
`StepTrace.to_dict()`'s fields plus the few it leaves out (pattern_rows, the two shapes, the raw
timings), and each layer's attention pattern [head, query_pos, key_pos] as its float16 bytes in base64:
exact (the follower's stage is the lecturer's, byte for byte) and four times smaller than a list of
rounded numbers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch

from engine.forward.run import Timing
from engine.forward.spec import ModelSpec
from engine.forward.trace import Candidate, LayerTrace, StepTrace

MAX_PATTERN_VALUES = 32 * 2**20  # per layer; a published trace never holds more (see loop.ATTENTION_BUDGET_BYTES)


class WireError(ValueError):
    """What was read is not a trace this code wrote."""


# ---------------------------------------------------------------- one trace


def _pattern_out(p: torch.Tensor | None) -> dict | None:
    if p is None:
        return None
    a = p.to(torch.float16).contiguous().numpy()
    return {"shape": list(a.shape), "f16": base64.b64encode(a.astype("<f2").tobytes()).decode("ascii")}


def _pattern_in(d: dict | None) -> torch.Tensor | None:
    if d is None:
        return None
    shape = [int(x) for x in d["shape"]]
    if len(shape) != 3 or any(x < 0 for x in shape) or int(np.prod(shape)) > MAX_PATTERN_VALUES:
        raise WireError(f"attention pattern of shape {shape} refused")
    raw = base64.b64decode(d["f16"], validate=True)
    if len(raw) != 2 * int(np.prod(shape)):
        raise WireError("attention pattern bytes do not match its shape")
    return torch.from_numpy(np.frombuffer(raw, dtype="<f2").astype(np.float16).reshape(shape).copy())


def trace_to_wire(t: StepTrace, text: str | None = None) -> dict:
    """Every field of the trace, JSON-ready; `text`: the text so far after this step (the page shows it)."""
    d = {f.name: getattr(t, f.name) for f in fields(t) if f.name not in ("top", "layers", "timing")}
    d["top"] = [asdict(c) for c in t.top]
    d["timing"] = {"samples_ms": list(t.timing.samples_ms), "warmup_ms": t.timing.warmup_ms,
                   "sample_ms": t.timing.sample_ms}
    d["layers"] = [{"layer": x.layer, "window": x.window, "kv_len": x.kv_len, "cached": x.cached,
                    "kv_bytes": x.kv_bytes, "shapes": {k: list(v) for k, v in x.shapes.items()},
                    "measured": x.measured, "key_start": x.key_start, "pattern": _pattern_out(x.pattern)}
                   for x in t.layers]
    for name in ("fed_ids", "fed_tokens", "hidden_shape", "logits_shape"):
        if d[name] is not None:
            d[name] = list(d[name])
    d["text"] = text
    return d


def _tuple(x):
    return None if x is None else tuple(x)


def trace_from_wire(d: dict) -> StepTrace:
    """The StepTrace that `trace_to_wire` wrote (equal field by field, patterns bit for bit)."""
    try:
        layers = tuple(LayerTrace(
            layer=int(x["layer"]), window=x["window"], kv_len=int(x["kv_len"]), cached=int(x["cached"]),
            kv_bytes=int(x["kv_bytes"]), shapes={str(k): tuple(int(n) for n in v) for k, v in x["shapes"].items()},
            measured=bool(x["measured"]), pattern=_pattern_in(x["pattern"]), key_start=int(x["key_start"]))
            for x in d["layers"])
        timing = Timing(tuple(float(v) for v in d["timing"]["samples_ms"]), d["timing"]["warmup_ms"],
                        float(d["timing"]["sample_ms"]))
        known = {f.name for f in fields(StepTrace)}
        plain = {k: v for k, v in d.items() if k in known and k not in ("top", "layers", "timing")}
        return StepTrace(**{**plain, "fed_ids": _tuple(d["fed_ids"]), "fed_tokens": _tuple(d["fed_tokens"]),
                            "hidden_shape": _tuple(d["hidden_shape"]), "logits_shape": _tuple(d["logits_shape"]),
                            "top": tuple(Candidate(**c) for c in d["top"]), "layers": layers, "timing": timing})
    except WireError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise WireError(f"not a published trace: {type(e).__name__}: {e}") from None


def dumps(d: dict) -> str:
    return json.dumps(d, separators=(",", ":"), allow_nan=False)


def loads(text: str | bytes) -> dict:
    d = json.loads(text)
    if not isinstance(d, dict):
        raise WireError("not a JSON object")
    return d


# ---------------------------------------------------------------- the run a class sees


def spec_to_wire(spec: ModelSpec) -> dict:
    return {**asdict(spec), "windows": list(spec.windows)}


def spec_from_wire(d: dict) -> ModelSpec:
    known = {f.name for f in fields(ModelSpec)}
    return ModelSpec(**{**{k: v for k, v in d.items() if k in known}, "windows": tuple(d.get("windows") or ())})


@dataclass
class SharedRun:
    """What a follower draws: the lecturer's recorded steps and where the lecturer is, read-only.

    The page's views use the same names as a Stepper's (records, prompt_len, pieces(), use_cache), so a
    picture drawn for a follower is drawn by the same functions from the same record.
    """

    version: int  # bumps on every change the lecturer makes (a new step, the scrubber, the view)
    run: str | None  # which run of the lecturer's (a Reset starts another); None: nothing prefilled yet
    at: int = 0  # the step on the lecturer's screen
    view: str = "Attention"
    layer: int = 0
    head: int = 0
    records: list[StepTrace] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # the text so far after each step
    ids: list[int] = field(default_factory=list)  # every position so far: prompt and generated
    piece_list: list[str] = field(default_factory=list)  # the text of each position
    prompt_len: int = 0
    use_cache: bool = True
    done: bool = False
    stop_reason: str | None = None
    model: str = ""  # the model's name and figures, in words
    spec: ModelSpec | None = None
    fork: dict = field(default_factory=dict)  # the settings that replay this run (a link's values, plus device)
    updated: float = 0.0
    latency_claim: str = ""  # what the lecturer's Latency view says of a size where the hardware sets the time

    def latest(self) -> int:
        return len(self.records) - 1

    def pieces(self) -> list[str]:
        return self.piece_list

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[self.prompt_len:]


HEAD_FIELDS = ("version", "run", "at", "view", "layer", "head", "ids", "piece_list", "prompt_len", "use_cache", "done",
               "stop_reason", "model", "fork", "updated", "latency_claim")


def head_of(run: SharedRun, steps: int) -> dict:
    """The small part of a shared run, read on every update: everything but the traces (and how many there are)."""
    d = {k: getattr(run, k) for k in HEAD_FIELDS}
    d["spec"] = spec_to_wire(run.spec) if run.spec is not None else None
    d["steps"] = steps
    return d


def run_from(head: dict, traces: list[StepTrace], texts: list[str]) -> SharedRun:
    """A SharedRun from its head and its decoded traces (in step order) with the text after each."""
    try:
        kwargs = {k: head[k] for k in HEAD_FIELDS}
        spec = spec_from_wire(head["spec"]) if head.get("spec") else None
    except (KeyError, TypeError) as e:
        raise WireError(f"not a published run: {e}") from None
    return SharedRun(**kwargs, spec=spec, records=list(traces), texts=list(texts))
