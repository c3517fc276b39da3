"""Generation one forward pass at a time: `prefill()` once, then `decode()` per token.

    prefill:  input_ids [batch, s]  -> one pass over every prompt position, fills the KV cache
    decode:   input_ids [batch, 1]  -> one new position; reads the cache, appends one K/V row
    no cache: input_ids [batch, n]  -> every decode step recomputes all n positions again

The cache switch is the one `if self.use_cache:` branch in `decode()`. Everything a
pass leaves behind is turned into a StepTrace by the small `_record_*` functions at
the bottom, one part of the record each.
"""

from __future__ import annotations

import os
import time

import torch

from engine.forward.cache import kv_length, kv_tensors, new_cache
from engine.errors import StepError
from engine.forward.estimates import step_bytes, step_flops
from engine.forward.run import Pass, Timing, run_pass
from engine.load.load import LoadedModel
from engine.forward.sampling import Choice, Sampling, choose
from engine.forward.trace import Candidate, LayerTrace, StepTrace

MAX_PROMPT_CHARS = 50_000  # refuse before tokenizing: a teaching prompt is never this long
MAX_NEW_TOKENS = 2048  # per run: bounds what one session can hold
ATTENTION_BUDGET_BYTES = 32 * 2**20  # per trace; above it only the last query row is kept
TOP_CANDIDATES = 10
# each step's pass is timed this many times after a warm-up run: a median, with its spread. A server for a full
# classroom can trade honesty of timings for throughput with DECODE_LAB_REPEATS=1 (one run, no warm-up).
TIMED_REPEATS = max(1, min(9, int(os.environ.get("DECODE_LAB_REPEATS", "3") or 3)))


class Generation:
    """What every step-by-step run shares (the Stepper, the speculative Speculator): stepping until it stops,
    and the text so far. Needs `step()`, `stop_reason`, `ids` [batch=1, pos], `prompt_len`, `prompt`, `lm`."""

    def run(self, n: int | None = None, on_step=None) -> list:
        """Step until the run stops, or n more steps; on_step(record) after each."""
        new = []
        while not self.done and (n is None or len(new) < n):
            new.append(self.step())
            if on_step:
                on_step(new[-1])
        return new

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[0, self.prompt_len:].tolist()

    @property
    def generated_text(self) -> str:
        return self.lm.tokenizer.decode(self.generated_ids, skip_special_tokens=True)

    @property
    def text(self) -> str:
        return self.prompt + self.generated_text


class Stepper(Generation):
    """One generation run on a shared LoadedModel; owns its cache, ids and traces."""

    def __init__(self, lm: LoadedModel, prompt: str, use_cache: bool = True, sampling: Sampling | None = None,
                 max_new_tokens: int = 32, stop_strings: tuple[str, ...] | list[str] = (), record: bool = True,
                 stop_on_eos: bool = True, repeats: int | None = None):
        self.lm = lm
        self.use_cache = bool(use_cache)
        self.sampling = sampling or Sampling()
        self.record = record
        self.stop_on_eos = stop_on_eos  # benchmarks turn this off to time a fixed number of steps
        # timing repeats: recorded runs are what a student reads, so they get a median; benchmarks time each pass once
        self.repeats = (TIMED_REPEATS if record else 1) if repeats is None else max(1, int(repeats))
        self.max_new_tokens = _check_max_new_tokens(max_new_tokens)
        self.stop_strings = _check_stop_strings(stop_strings)
        self.sampling.validate(lm.spec.vocab)
        self.prompt = prompt
        self.ids = encode_prompt(lm, prompt)  # [batch=1, pos]
        self.prompt_len = self.ids.shape[1]
        self.cache = None
        self.traces: list[StepTrace] = []
        self.stop_reason: str | None = None
        self.last_logits: torch.Tensor | None = None  # [vocab] float32 on the CPU, for comparisons
        self._processors = self.sampling.processors()
        self._generator = torch.Generator().manual_seed(self.sampling.seed)

    # ------------------------------------------------------------ the two phases

    def prefill(self) -> StepTrace:
        """First forward pass: all s prompt positions at once (matrix x matrix: many FLOPs per weight read)."""
        if self.traces:
            raise StepError("Prefill has already run for this prompt: press Reset to start again.")
        self.cache = new_cache(self.lm.config) if self.use_cache else None
        fed = self.ids  # [batch, s]
        result = run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats)
        return self._record("prefill", fed, result, past=0)

    def decode(self) -> StepTrace:
        """One more token: feed the last chosen token (with the cache) or everything (without)."""
        if not self.traces:
            raise StepError("Run Prefill first: decoding needs the prompt to have been processed.")
        if self.done:
            raise StepError(f"This run has finished ({self.stop_reason}): press Reset to start again.")
        if self.use_cache:
            # with the cache: one new position [batch, 1]; keys/values of the past are read from the cache
            fed = self.ids[:, -1:]
            past = kv_length(self.cache)
        else:
            # without the cache: recompute every position so far [batch, n], nothing is kept between steps
            fed = self.ids
            past = 0
        result = run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats)
        return self._record("decode", fed, result, past=past)

    # ------------------------------------------------------------ conveniences

    def step(self) -> StepTrace:
        return self.decode() if self.traces else self.prefill()

    @property
    def kv_bytes(self) -> int:
        return self.traces[-1].kv_bytes if self.traces else 0

    def pieces(self) -> list[str]:
        """The text of every position so far (prompt and generated), one string per token."""
        return token_pieces(self.lm.tokenizer, self.ids[0].tolist())

    def report(self, attention: bool = False) -> dict:
        """The whole run as plain JSON-ready data: what `run --json` writes and the page exports."""
        s = self.lm.spec
        return {"model": {**s.__dict__, "attention": s.attention, "dtype": self.lm.dtype_name,
                          "device": str(self.lm.device)},
                "prompt": self.prompt, "use_cache": self.use_cache,
                "sampling": self.sampling.__dict__, "max_new_tokens": self.max_new_tokens,
                "stop_strings": list(self.stop_strings), "text": self.text, "generated_text": self.generated_text,
                "stop_reason": self.stop_reason, "timed_repeats": self.repeats,
                "steps": [t.to_dict(attention=attention) for t in self.traces]}

    def free(self) -> None:
        """Drop the cache and traces (Reset, or a session ending)."""
        self.cache = None
        self.traces = []
        self.last_logits = None

    # ------------------------------------------------------------ the record of one pass

    def _record(self, phase: str, fed: torch.Tensor, result: Pass, past: int) -> StepTrace:
        t0 = time.perf_counter()
        choice = choose(self.sampling, self._processors, self.ids, result.logits[0, -1], self._generator,
                        probs=self.record)
        sample_ms = (time.perf_counter() - t0) * 1e3
        self.last_logits = choice.logits
        q_len, kv_len = fed.shape[1], past + fed.shape[1]
        rows = rows_kept(self.lm, phase, q_len, kv_len) if self.record else 0
        trace = StepTrace(
            phase=phase, step=len(self.traces), use_cache=self.use_cache,
            fed_from=kv_len - q_len, fed_ids=tuple(fed[0].tolist()),
            fed_tokens=tuple(token_pieces(self.lm.tokenizer, fed[0].tolist())) if self.record else (),
            q_len=q_len, kv_len=kv_len,
            token_id=choice.token_id, token=token_pieces(self.lm.tokenizer, [choice.token_id])[0],
            rule=self.sampling.describe(),
            top=record_candidates(self.lm, choice) if self.record else (),
            layers=record_layers(self.lm, self.cache, result, q_len, kv_len, rows) if self.record else (),
            pattern_rows=rows, attention_note=_attention_note(phase, self.use_cache, self.record, rows, q_len, kv_len),
            hidden_shape=result.hidden_shape, logits_shape=tuple(result.logits.shape),
            timing=Timing(result.timing.samples_ms, result.timing.warmup_ms, sample_ms),
            flops_estimate=step_flops(self.lm.spec, q_len, past),
            bytes_estimate=step_bytes(self.lm.spec, q_len, past, self.lm.elem_bytes),
        )
        self.ids = torch.cat([self.ids, torch.tensor([[choice.token_id]])], dim=1)
        self.traces.append(trace)
        self._check_stop(choice.token_id)
        return trace

    def _check_stop(self, token_id: int) -> None:
        eos = self.lm.tokenizer.eos_token_id
        if self.stop_on_eos and eos is not None and token_id == eos:
            self.stop_reason = "eos"
        elif self.ids.shape[1] - self.prompt_len >= self.max_new_tokens:
            self.stop_reason = "max_new_tokens"
        elif self.stop_strings and any(stop in self.generated_text for stop in self.stop_strings):
            self.stop_reason = "stop_string"
        elif self.ids.shape[1] >= self.lm.spec.max_positions:
            self.stop_reason = "context_limit"


# ---------------------------------------------------------------- parts of the record


def rows_kept(lm: LoadedModel, phase: str, q_len: int, kv_len: int) -> int:
    """Query rows of attention to keep: all of a prefill, the newest one of a decode; one if too big."""
    s = lm.spec
    rows = q_len if phase == "prefill" else 1
    if s.layers * s.heads * rows * kv_len * 2 > ATTENTION_BUDGET_BYTES:
        rows = 1
    return rows


def _attention_note(phase: str, use_cache: bool, record: bool, rows: int, q_len: int, kv_len: int) -> str:
    if not record:
        return "not recorded (recording off)"
    if phase == "prefill" and rows == q_len:
        return f"all {q_len} × {kv_len} causal rows"
    if phase == "prefill":
        return f"last row only: {q_len} × {kv_len} rows were computed, too many to keep"
    if use_cache:
        return f"one new row of {kv_len} keys (the cache supplied the other {kv_len - 1})"
    return f"last row shown; all {q_len} × {kv_len} were recomputed this step"


def record_candidates(lm: LoadedModel, choice: Choice) -> tuple[Candidate, ...]:
    """The most likely tokens before the warpers (and the chosen one, if it is not among them)."""
    top_ids = torch.topk(choice.probs_before, min(TOP_CANDIDATES, choice.probs_before.numel())).indices.tolist()
    if choice.token_id not in top_ids:
        top_ids.append(choice.token_id)
    pieces = token_pieces(lm.tokenizer, top_ids)
    return tuple(Candidate(i, piece, float(choice.logits[i]), float(choice.probs_before[i]),
                           float(choice.probs_after[i])) for i, piece in zip(top_ids, pieces))


def record_layers(lm: LoadedModel, cache, result: Pass, q_len: int, kv_len: int, rows: int) -> tuple[LayerTrace, ...]:
    """Per layer: window, keys read, positions cached, K/V bytes (measured), tensor shapes, attention rows."""
    s = lm.spec
    held = kv_tensors(cache) if cache is not None else [None] * s.layers
    captured = {c.layer: c for c in result.captures}
    patterns = result.patterns()
    out = []
    for layer in range(s.layers):
        kv = held[layer] if layer < len(held) else None
        shapes = {}
        if result.hidden_shape is not None:
            shapes["resid_in"] = result.hidden_shape
        c = captured.get(layer)
        if c is not None:  # read off the real tensors
            shapes["attn.q"] = tuple(c.q.shape)
            shapes["attn.k"] = tuple(c.k[:, :, -q_len:].shape)
            shapes["attn.v"] = tuple(c.v[:, :, -q_len:].shape)
            shapes["attn.pattern"] = tuple(c.pattern.shape)
        elif result.hidden_shape is not None:  # a family whose attention is not captured: from the config
            shapes["attn.q"] = (1, s.heads, q_len, s.head_dim)
            shapes["attn.k"] = shapes["attn.v"] = (1, s.kv_heads, q_len, s.head_dim)
        if kv is not None:
            shapes["kv.keys"], shapes["kv.values"] = tuple(kv[0].shape), tuple(kv[1].shape)
        pattern, key_start = None, 0
        source = patterns[layer] if layer < len(patterns) else None
        if source is not None and rows:
            weights = source[0, :, -rows:, :]  # [head, query_pos, key_pos] over the last `width` positions
            pattern, key_start = weights.to(torch.float16).cpu(), kv_len - weights.shape[-1]
        out.append(LayerTrace(
            layer=layer, window=s.window(layer), kv_len=s.span(layer, kv_len - 1),
            cached=0 if kv is None else kv[0].shape[2],
            kv_bytes=0 if kv is None else kv[0].numel() * kv[0].element_size() + kv[1].numel() * kv[1].element_size(),
            shapes=shapes, measured=c is not None, pattern=pattern, key_start=key_start,
        ))
    return tuple(out)


# ---------------------------------------------------------------- checks


def encode_prompt(lm: LoadedModel, prompt: str) -> torch.Tensor:
    """Token ids of the prompt, [batch=1, pos], with the model's BOS if its tokenizer adds one."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise StepError("The prompt is empty: type some text (spaces alone do not count).")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise StepError(f"The prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}. Shorten it.")
    ids = lm.tokenizer(prompt)["input_ids"]
    limit = lm.spec.max_positions
    if len(ids) >= limit:
        raise StepError(f"The prompt is {len(ids):,} tokens, but this model sees at most {limit:,} positions "
                        "and needs one free for the next token. Shorten it.")
    return torch.tensor([ids], dtype=torch.long)


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token stands for (a word, part of one, or a space), one string per id."""
    return [tokenizer.decode([i]) for i in ids]


def _check_max_new_tokens(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise StepError(f"Max new tokens must be a whole number (got {n!r}).")
    if n < 1:
        raise StepError(f"Max new tokens must be at least 1 (got {n}).")
    if n > MAX_NEW_TOKENS:
        raise StepError(f"Max new tokens is capped at {MAX_NEW_TOKENS:,} per run (got {n:,}).")
    return n


def _check_stop_strings(stops) -> tuple[str, ...]:
    stops = tuple(stops or ())
    if any(not isinstance(s, str) or s == "" for s in stops):
        raise StepError("A stop string is empty: it would match everywhere. Remove it.")
    return stops
