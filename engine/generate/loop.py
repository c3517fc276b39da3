"""The one generation loop: a sequence's state, its stop rule, and the record of each pass.

Every way of generating in the engine is a use of it:

    Stepper      prefill() once, then decode() per token               engine/generate/stepper.py
    Speculator   prefill() once, then round() per draft-verify-crop    engine/generate/speculative.py
    Request      one row of a serving step: many requests, one pass    engine/generate/serving/

Each holds its token ids, appends every chosen token through `append` (the stop rule lives
there, once: end-of-text, max new tokens, a stop string, the context limit), chooses tokens
with the same `Chooser` (transformers' LogitsProcessors and one seeded CPU generator), and
turns a forward pass into a StepTrace with `record_pass`.
"""

from __future__ import annotations

import os

import torch

from engine.errors import StepError
from engine.forward.cache import kv_tensors
from engine.forward.estimates import step_bytes, step_flops
from engine.forward.run import Pass, Timing
from engine.forward.sampling import Choice, Chooser, Sampling
from engine.forward.trace import Candidate, LayerTrace, StepTrace
from engine.load.loaded import LoadedModel

MAX_PROMPT_CHARS = 50_000  # refuse before tokenizing: a teaching prompt is never this long
MAX_NEW_TOKENS = 2048  # per run: bounds what one session can hold
ATTENTION_BUDGET_BYTES = 32 * 2**20  # per trace; above it only the last query row is kept
TOP_CANDIDATES = 10
# each step's pass is timed this many times after a warm-up run: a median, with its spread. A server for a full
# classroom can trade honesty of timings for throughput with DECODE_LAB_REPEATS=1 (one run, no warm-up).
TIMED_REPEATS = max(1, min(9, int(os.environ.get("DECODE_LAB_REPEATS", "3") or 3)))


class Generation:
    """One sequence being generated on a shared LoadedModel: its ids, how it chooses, when it stops.

    Subclasses add the passes (`step()`); `run` steps until the stop rule says so.
    """

    def __init__(self, lm: LoadedModel, prompt: str, *, sampling: Sampling | None = None, max_new_tokens: int = 32,
                 stop_strings: tuple[str, ...] | list[str] = (), stop_on_eos: bool = True, record: bool = True,
                 repeats: int | None = None):
        self.lm = lm
        self.sampling = sampling or Sampling()
        self.sampling.validate(lm.spec.vocab)
        self.max_new_tokens = check_max_new_tokens(max_new_tokens)
        self.stop_strings = check_stop_strings(stop_strings)
        self.stop_on_eos = stop_on_eos  # benchmarks turn this off to time a fixed number of steps
        self.record = record
        # timing repeats: recorded runs are what a student reads, so they get a median; benchmarks time each pass once
        self.repeats = (TIMED_REPEATS if record else 1) if repeats is None else max(1, int(repeats))
        self.prompt = prompt
        self.ids = encode_prompt(lm, prompt)  # [batch=1, pos]
        self.prompt_len = self.ids.shape[1]
        self.stop_reason: str | None = None
        self.chooser = Chooser(self.sampling)

    # ------------------------------------------------------------ the loop

    def step(self):
        raise NotImplementedError

    def run(self, n: int | None = None, on_step=None) -> list:
        """Step until the run stops, or n more steps; on_step(record) after each."""
        new = []
        while not self.done and (n is None or len(new) < n):
            new.append(self.step())
            if on_step:
                on_step(new[-1])
        return new

    # ------------------------------------------------------------ the stop rule

    def append(self, token_id: int) -> bool:
        """Add one chosen token to the sequence and apply the stop rule; True when the run has stopped."""
        self.ids = torch.cat([self.ids, torch.tensor([[token_id]])], dim=1)
        self.stop_reason = self.stop_rule(token_id)
        return self.done

    def stop_rule(self, token_id: int) -> str | None:
        """Why the run stops after this token, or None: end-of-text, max new tokens, a stop string, the context."""
        eos = self.lm.tokenizer.eos_token_id
        if self.stop_on_eos and eos is not None and token_id == eos:
            return "eos"
        if len(self) - self.prompt_len >= self.max_new_tokens:
            return "max_new_tokens"
        if self.stop_strings and any(stop in self.generated_text for stop in self.stop_strings):
            return "stop_string"
        if len(self) >= self.lm.spec.max_positions:
            return "context_limit"
        return None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    # ------------------------------------------------------------ the text so far

    def __len__(self) -> int:
        """Positions in the sequence: prompt + generated."""
        return self.ids.shape[1]

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[0, self.prompt_len:].tolist()

    @property
    def generated_text(self) -> str:
        return self.lm.tokenizer.decode(self.generated_ids, skip_special_tokens=True)

    @property
    def text(self) -> str:
        return self.prompt + self.generated_text

    def pieces(self) -> list[str]:
        """The text of every position so far (prompt and generated), one string per token."""
        return token_pieces(self.lm.tokenizer, self.ids[0].tolist())

    # ------------------------------------------------------------ the record of one pass

    def record_pass(self, *, phase: str, step: int, fed: torch.Tensor, result: Pass, past: int, cache,
                    token_id: int, top: tuple, sample_ms: float, rows: int, note: str,
                    use_cache: bool = True) -> StepTrace:
        """One forward pass as a frozen StepTrace: what was fed, what each layer did, the token chosen, the time.

        fed [batch=1, q_len] went in on top of `past` positions; `rows` query rows of attention are kept.
        """
        q_len = fed.shape[1]
        kv_len = past + q_len
        tok = self.lm.tokenizer
        return StepTrace(
            phase=phase, step=step, use_cache=use_cache, past=past, fed_ids=tuple(fed[0].tolist()),
            fed_tokens=tuple(token_pieces(tok, fed[0].tolist())) if self.record else (),
            q_len=q_len, kv_len=kv_len, token_id=token_id, token=token_pieces(tok, [token_id])[0],
            rule=self.sampling.describe(), top=top if self.record else (),
            layers=record_layers(self.lm, cache, result, q_len, kv_len, rows) if self.record else (),
            pattern_rows=rows, attention_note=note if self.record else "not recorded (recording off)",
            hidden_shape=result.hidden_shape, logits_shape=tuple(result.logits.shape),
            timing=Timing(result.timing.samples_ms, result.timing.warmup_ms, sample_ms),
            flops_estimate=step_flops(self.lm.spec, q_len, past, logit_rows=result.logits.shape[1]),
            bytes_estimate=step_bytes(self.lm.spec, q_len, past, self.lm.elem_bytes),
        )


# ---------------------------------------------------------------- parts of the record


def rows_kept(lm: LoadedModel, q_len: int, kv_len: int, every_row: bool) -> int:
    """Query rows of attention to keep: every fed row (a prefill, a verify pass) or the newest; one if too big."""
    s = lm.spec
    rows = q_len if every_row else 1
    if s.layers * s.heads * rows * kv_len * 2 > ATTENTION_BUDGET_BYTES:
        rows = 1
    return rows


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


def check_max_new_tokens(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise StepError(f"Max new tokens must be a whole number (got {n!r}).")
    if n < 1:
        raise StepError(f"Max new tokens must be at least 1 (got {n}).")
    if n > MAX_NEW_TOKENS:
        raise StepError(f"Max new tokens is capped at {MAX_NEW_TOKENS:,} per run (got {n:,}).")
    return n


def check_stop_strings(stops) -> tuple[str, ...]:
    stops = tuple(stops or ())
    if any(not isinstance(s, str) or s == "" for s in stops):
        raise StepError("A stop string is empty: it would match everywhere. Remove it.")
    return stops
