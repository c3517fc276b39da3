"""The one generation loop: a sequence (its tokens, its chooser, its stop rule), the loop that steps a run,
and the record of a pass. Every way of generating in the engine is a use of it.

Where to read what happens (files in engine/generate/):

    prefill              Stepper.prefill()    stepper.py        one pass over every prompt position
    decode               Stepper.decode()     stepper.py        one pass per new token; the cache switch is
                                                                its one `if self.use_cache:` branch
    a speculative round  Speculator.round()   speculative.py    draft k, verify them in one pass, judge, crop
    a serving step       ServingRun.step()    serving/run.py    schedule, one paged pass, postprocess
    a padded batch       run_batch()          batch.py          every row in one pass, left-padded

What they share, all in this file:

    Sequence     one sequence: its token ids (kept once, a list), how it chooses the next token (`chooser`:
                 transformers' LogitsProcessors and one seeded CPU generator), and when it stops (`append`
                 applies the stop rule: end-of-text, max new tokens, a stop string, the context limit).
                 A Stepper and a Speculator each are one; a serving Request and a batch row each hold one.
    Run          what every run that steps has: `records` (what each step recorded), `step()`, `done`,
                 `run(n)`, `free()`. `run` is the loop, written once here. A Stepper, a Speculator and a
                 ServingRun are Runs; one controller (ui/) drives any of them.
    record_pass  a forward pass as a frozen StepTrace: what was fed, what each layer did, the token, the time.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

import torch

from engine.errors import StepError
from engine.forward.cache import kv_tensors, layer_bytes
from engine.forward.estimates import step_bytes, step_flops
from engine.forward.run import Pass, Timing
from engine.forward.sampling import Choice, Chooser, Sampling
from engine.forward.trace import Candidate, LayerTrace, StepTrace
from engine.load.loaded import LoadedModel
from engine.load.pieces import piece

MAX_NEW_TOKENS = 2048  # per run: bounds what one session can hold
ATTENTION_BUDGET_BYTES = 32 * 2**20  # per trace; above it only the last query row is kept
TOP_CANDIDATES = 10
# each step's pass is timed this many times after a warm-up run: a median, with its spread. A server for a full
# classroom can trade honesty of timings for throughput with DECODE_LAB_REPEATS=1 (one run, no warm-up).
TIMED_REPEATS = max(1, min(9, int(os.environ.get("DECODE_LAB_REPEATS", "3") or 3)))

# The one limit on a prompt's length, for the prompt box (refused here before tokenizing) and for a link
# alike (ui/link_codec.py). A link carries the prompt in its address, and nginx's default buffers hold a
# request line of at most 8 KiB (large_client_header_buffers 4 8k; longer gets "414 Request-URI Too Large"):
# English text takes ~1.1 bytes a character once URL-encoded, so 4,000 characters leave a link near 4.5 KiB with
# room for every other setting. (A bundled model sees 512 positions, about 2,000 characters of its stories.)
MAX_PROMPT_CHARS = 4000


class Sequence:
    """One sequence being generated on a shared LoadedModel: its tokens, how it chooses, when it stops.

    It makes no pass itself: a Stepper or a Speculator is a Sequence that also steps (a Run); a serving
    Request and a batch row hold one, and the server or the batch makes the passes.
    """

    def __init__(self, lm: LoadedModel, prompt: str, *, sampling: Sampling | None = None, max_new_tokens: int = 32,
                 stop_strings: tuple[str, ...] | list[str] = (), stop_on_eos: bool = True):
        self.lm = lm
        self.sampling = sampling or Sampling()
        self.sampling.validate(lm.spec.vocab)
        self.max_new_tokens = check_max_new_tokens(max_new_tokens)
        self.stop_strings = check_stop_strings(stop_strings)
        self.stop_on_eos = stop_on_eos  # benchmarks turn this off to time a fixed number of steps
        self.prompt = prompt
        self.tokens: list[int] = prompt_ids(lm, prompt)  # prompt + generated: the ids, kept once
        self.prompt_len = len(self.tokens)
        self.stop_reason: str | None = None
        self.chooser = Chooser(self.sampling)

    @property
    def ids(self) -> torch.Tensor:
        """The tokens as a tensor [batch=1, pos]: what a pass and the LogitsProcessors take."""
        return torch.tensor([self.tokens], dtype=torch.long)

    # ------------------------------------------------------------ choosing, and the stop rule

    def choose(self, logits: torch.Tensor, probs: bool = True) -> Choice:
        """The next token from one row of logits [vocab], by this sequence's chooser, given its tokens so far."""
        return self.chooser.choose(self.ids, logits, probs=probs)

    def append(self, token_id: int) -> bool:
        """Add one chosen token and apply the stop rule; True when the sequence has stopped."""
        self.tokens.append(token_id)
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
        return len(self.tokens)

    @property
    def generated_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def generated_text(self) -> str:
        return self.lm.tokenizer.decode(self.generated_ids, skip_special_tokens=True)

    @property
    def text(self) -> str:
        return self.prompt + self.generated_text

    def pieces(self) -> list[str]:
        """The text of every position so far (prompt and generated), one string per token."""
        return token_pieces(self.lm.tokenizer, self.tokens)


class Run(ABC):
    """The one interface of every run that steps (Stepper, Speculator, ServingRun), and the one loop.

        records   what each step recorded, in order: StepTrace (a pass) · RoundTrace (a round) · ServingStep
        step()    one step: the prefill or a decode, a speculative round, an engine step; returns its record
        done      True once the run has stopped: no more steps
        run(n)    step until done, or n more steps
        free()    drop caches and records (Reset, or a session ending)
    """

    records: list

    @abstractmethod
    def step(self):
        """One step; returns its record (also appended to `records`)."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """True once the run has stopped."""

    @abstractmethod
    def free(self) -> None:
        """Drop caches and records."""

    def run(self, n: int | None = None, on_step=None) -> list:
        """Step until the run stops, or n more steps; on_step(record) after each. Returns the new records."""
        new = []
        while not self.done and (n is None or len(new) < n):
            new.append(self.step())
            if on_step:
                on_step(new[-1])
        return new


def timing_repeats(record: bool, repeats: int | None) -> int:
    """How often each pass is timed: recorded runs are what a student reads, so they get a median of
    TIMED_REPEATS after a warm-up; benchmarks (record=False) time each pass once."""
    return (TIMED_REPEATS if record else 1) if repeats is None else max(1, int(repeats))


# ---------------------------------------------------------------- the record of one pass


def record_pass(seq: Sequence, *, record: bool, phase: str, step: int, fed: torch.Tensor, result: Pass, past: int,
                cache, token_id: int, top: tuple, sample_ms: float, rows: int, note: str,
                use_cache: bool = True) -> StepTrace:
    """One forward pass over `seq` as a frozen StepTrace: what was fed, what each layer did, the token, the time.

    fed [batch=1, q_len] went in on top of `past` positions; `rows` query rows of attention are kept.
    record=False keeps the figures and the timing, not the layers, candidates or attention.
    """
    lm = seq.lm
    q_len = fed.shape[1]
    kv_len = past + q_len
    tok = lm.tokenizer
    return StepTrace(
        phase=phase, step=step, use_cache=use_cache, past=past, fed_ids=tuple(fed[0].tolist()),
        fed_tokens=tuple(token_pieces(tok, fed[0].tolist())) if record else (),
        q_len=q_len, kv_len=kv_len, token_id=token_id, token=token_pieces(tok, [token_id])[0],
        rule=seq.sampling.describe(), top=top if record else (),
        layers=record_layers(lm, cache, result, q_len, kv_len, rows) if record else (),
        pattern_rows=rows, attention_note=note if record else "not recorded (recording off)",
        hidden_shape=result.hidden_shape, logits_shape=tuple(result.logits.shape),
        timing=Timing(result.timing.samples_ms, result.timing.warmup_ms, sample_ms),
        flops_estimate=step_flops(lm.spec, q_len, past, logit_rows=result.logits.shape[1]),
        bytes_estimate=step_bytes(lm.spec, q_len, past, lm.elem_bytes),
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
    held_bytes = [layer_bytes(layer) for layer in cache.layers] if cache is not None else []
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
            kv_bytes=held_bytes[layer] if layer < len(held_bytes) else 0,
            shapes=shapes, measured=c is not None, pattern=pattern, key_start=key_start,
        ))
    return tuple(out)


# ---------------------------------------------------------------- checks


def prompt_ids(lm: LoadedModel, prompt: str) -> list[int]:
    """Token ids of the prompt, with the model's BOS if its tokenizer adds one; refused with a plain reason."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise StepError("The prompt is empty: type some text (spaces alone do not count).")
    limit = lm.spec.max_positions
    if len(prompt) > MAX_PROMPT_CHARS:  # refused before tokenizing; the context limit is said too: both must be met
        raise StepError(f"The prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,} characters "
                        f"(a shareable link carries the prompt in its address), and this model sees at most "
                        f"{limit:,} positions (tokens). Shorten it.")
    ids = lm.tokenizer(prompt)["input_ids"]
    if len(ids) >= limit:
        raise StepError(f"The prompt is {len(ids):,} tokens, but this model sees at most {limit:,} positions "
                        "and needs one free for the next token. Shorten it.")
    return ids


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token stands for (a word, part of one, or a space), one string per id; a token that is only
    part of a character (a byte of an emoji, a CJK or Cyrillic letter) as its bytes, '⟨F0 9F⟩' (engine.load.pieces)."""
    return [piece(tokenizer, i) for i in ids]


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
