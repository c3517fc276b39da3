"""Generation one forward pass at a time: `prefill()` once, then `decode()` per token.

    prefill:  input_ids [batch, s]  -> one pass over every prompt position, fills the KV cache
    decode:   input_ids [batch, 1]  -> one new position; reads the cache, appends one K/V row
    no cache: input_ids [batch, n]  -> every decode step recomputes all n positions again

The cache switch is the one `if self.use_cache:` branch in `decode()`.
"""

from __future__ import annotations

import time

import torch

from engine import device as dev
from engine.cache import kv_length, kv_tensors, new_cache
from engine.errors import StepError
from engine.estimates import CostModel, step_bytes, step_flops
from engine.loading import LoadedModel
from engine.sampling import Sampling, choose
from engine.trace import Candidate, ShapeRow, StepTrace

MAX_PROMPT_CHARS = 50_000  # refuse before tokenizing: a teaching prompt is never this long
MAX_NEW_TOKENS = 2048  # per run: bounds what one session can hold
ATTENTION_BUDGET_BYTES = 32 * 2**20  # per trace; above it only the last row is kept
TOP_CANDIDATES = 10


class Stepper:
    """One generation run on a shared LoadedModel; owns its cache, ids and traces."""

    def __init__(self, lm: LoadedModel, prompt: str, use_cache: bool = True, sampling: Sampling | None = None,
                 max_new_tokens: int = 32, stop_strings: tuple[str, ...] | list[str] = (), record: bool = True,
                 stop_on_eos: bool = True):
        self.lm = lm
        self.use_cache = bool(use_cache)
        self.sampling = sampling or Sampling()
        self.record = record
        self.stop_on_eos = stop_on_eos  # benchmarks turn this off to time a fixed number of steps
        self.max_new_tokens = _check_max_new_tokens(max_new_tokens)
        self.stop_strings = _check_stop_strings(stop_strings)
        self.sampling.validate(lm.summary.vocab)
        self.prompt = prompt
        self.ids = encode_prompt(lm, prompt)  # [batch=1, pos]
        self.prompt_len = self.ids.shape[1]
        self.cache = None
        self.traces: list[StepTrace] = []
        self.stop_reason: str | None = None
        self.last_logits: torch.Tensor | None = None  # [vocab] float32 on the CPU, for comparisons
        self._processors = self.sampling.processors()
        self._generator = torch.Generator().manual_seed(self.sampling.seed)
        self._cost = CostModel.from_summary(lm.summary, torch.finfo(lm.dtype).bits // 8)

    # ------------------------------------------------------------ the two phases

    def prefill(self) -> StepTrace:
        """First forward pass: all s prompt positions at once (matrix x matrix, compute-bound)."""
        if self.traces:
            raise StepError("Prefill has already run for this prompt: press Reset to start again.")
        self.cache = new_cache(self.lm.config) if self.use_cache else None
        fed = self.ids  # [batch, s]
        out, forward_ms, first = self._forward(fed, self.cache)
        return self._record("prefill", fed, out, forward_ms, past=0, warmup=first)

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
        out, forward_ms, first = self._forward(fed, self.cache)
        return self._record("decode", fed, out, forward_ms, past=past, warmup=first)

    # ------------------------------------------------------------ conveniences

    def step(self) -> StepTrace:
        return self.decode() if self.traces else self.prefill()

    def run(self, n: int | None = None, on_step=None) -> list[StepTrace]:
        """Step until the run stops, or n more forward passes; on_step(trace) after each."""
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

    @property
    def kv_bytes(self) -> int:
        return self.traces[-1].kv_bytes if self.traces else 0

    def report(self, attention: bool = False) -> dict:
        """The whole run as plain JSON-ready data: what `run --json` writes and the page exports."""
        return {"model": self.lm.summary.__dict__, "prompt": self.prompt, "use_cache": self.use_cache,
                "sampling": self.sampling.__dict__, "max_new_tokens": self.max_new_tokens,
                "stop_strings": list(self.stop_strings), "text": self.text, "generated_text": self.generated_text,
                "stop_reason": self.stop_reason, "steps": [t.to_dict(attention=attention) for t in self.traces]}

    def free(self) -> None:
        """Drop the cache and traces (Reset, or a session ending)."""
        self.cache = None
        self.traces = []
        self.last_logits = None

    # ------------------------------------------------------------ internals

    @torch.inference_mode()
    def _forward(self, input_ids: torch.Tensor, cache):
        """One timed forward pass under the model's lock; time = perf_counter around a device sync.

        Returns (output, ms, first) where `first` says this was the model's first pass since
        loading: a warm-up, which pays one-off setup costs and is excluded from medians.
        """
        kv_len = kv_length(cache) + input_ids.shape[1]
        kwargs = dict(input_ids=input_ids.to(self.lm.device), attention_mask=torch.ones(1, kv_len, dtype=torch.long,
                      device=self.lm.device), use_cache=self.use_cache, logits_to_keep=1,
                      output_attentions=self.record, output_hidden_states=self.record)
        if cache is not None:
            kwargs["past_key_values"] = cache
        with self.lm.turn():
            dev.sync(self.lm.device)
            t0 = time.perf_counter()
            out = self.lm.model(**kwargs)
            dev.sync(self.lm.device)
            forward_ms = (time.perf_counter() - t0) * 1e3
            first = self.lm.passes == 0
            self.lm.passes += 1
        return out, forward_ms, first

    def _record(self, phase: str, fed: torch.Tensor, out, forward_ms: float, past: int, warmup: bool) -> StepTrace:
        tok = self.lm.tokenizer
        t0 = time.perf_counter()
        choice = choose(self.sampling, self._processors, self.ids, out.logits[0, -1], self._generator)
        sample_ms = (time.perf_counter() - t0) * 1e3
        self.last_logits = out.logits[0, -1].detach().float().cpu()
        self.ids = torch.cat([self.ids, torch.tensor([[choice.token_id]])], dim=1)

        q_len = fed.shape[1]
        kv_len = past + q_len
        kv = kv_tensors(self.cache) if self.use_cache else []
        kv_per_layer = tuple(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        attention, note = self._attention(phase, out, q_len, kv_len)
        if self.record:
            fed_tokens = tuple(token_pieces(tok, fed[0].tolist()))
            top = self._candidates(choice)
            shapes = self._shapes(out, q_len, kv_len, kv)
        else:  # recording off (benchmarks): keep what timing and the proof need, skip the views' extras
            fed_tokens, top, shapes = (), (), ()
        trace = StepTrace(
            phase=phase,
            step=len(self.traces),
            use_cache=self.use_cache,
            fed_ids=tuple(fed[0].tolist()),
            fed_tokens=fed_tokens,
            q_len=q_len,
            kv_len=kv_len,
            token_id=choice.token_id,
            token=token_pieces(tok, [choice.token_id])[0],
            rule=self.sampling.describe(),
            top=top,
            attention=attention,
            attention_note=note,
            kv_shapes=tuple(tuple(k.shape) for k, _ in kv),
            kv_bytes_per_layer=kv_per_layer,
            kv_bytes=sum(kv_per_layer),
            shapes=shapes,
            forward_ms=forward_ms,
            sample_ms=sample_ms,
            warmup=warmup,
            flops_estimate=step_flops(self._cost, q_len, past),
            bytes_estimate=step_bytes(self._cost, q_len, past),
        )
        self.traces.append(trace)
        self._check_stop(choice.token_id)
        return trace

    def _candidates(self, choice) -> tuple[Candidate, ...]:
        """The most likely tokens before the warpers (and the chosen one, if it is not among them)."""
        top_ids = torch.topk(choice.probs_before, min(TOP_CANDIDATES, choice.probs_before.numel())).indices.tolist()
        if choice.token_id not in top_ids:
            top_ids.append(choice.token_id)
        pieces = token_pieces(self.lm.tokenizer, top_ids)
        return tuple(Candidate(i, piece, float(choice.probs_before[i]), float(choice.probs_after[i]))
                     for i, piece in zip(top_ids, pieces))

    def _attention(self, phase: str, out, q_len: int, kv_len: int):
        """Attention weights of the new query rows: [layer, head, row, kv_len] in float16 on the CPU."""
        if not self.record:
            return None, "not recorded (recording off)"
        if not out.attentions or any(a is None for a in out.attentions):
            raise StepError("The model returned no attention weights (is it using SDPA/flash attention?). "
                            "Decode Lab loads models with attn_implementation='eager'.")
        s = self.lm.summary
        rows = q_len if phase == "prefill" else 1
        if s.layers * s.heads * rows * kv_len * 2 > ATTENTION_BUDGET_BYTES:
            rows = 1
        weights = torch.stack([a[0, :, -rows:, :] for a in out.attentions])  # [layer, head, row, kv_len]
        if phase == "prefill" and rows == q_len:
            note = f"all {q_len} x {kv_len} causal rows"
        elif phase == "prefill":
            note = f"last row only: {q_len} x {kv_len} rows were computed, too many to keep"
        elif self.use_cache:
            note = f"one new row of {kv_len} keys (the cache supplied the other {kv_len - 1})"
        else:
            note = f"last row shown; all {q_len} x {kv_len} were recomputed this step"
        return weights.to(torch.float16).cpu(), note

    def _shapes(self, out, q_len: int, kv_len: int, kv) -> tuple[ShapeRow, ...]:
        s = self.lm.summary
        rows = [ShapeRow("input_ids", (1, q_len), "[batch, pos]", "measured")]
        if out.hidden_states:
            rows.append(ShapeRow("hidden states (each layer)", tuple(out.hidden_states[-1].shape),
                                 "[batch, pos, d_model]", "measured"))
        rows.append(ShapeRow("Q (each layer)", (1, s.heads, q_len, s.head_dim), "[batch, head, pos, head_dim]", "derived"))
        rows.append(ShapeRow("K, V new (each layer)", (1, s.kv_heads, q_len, s.head_dim),
                             "[batch, kv_head, pos, head_dim]", "derived"))
        if kv:
            rows.append(ShapeRow("K, V cached (each layer)", tuple(kv[0][0].shape),
                                 "[batch, kv_head, pos, head_dim]", "measured"))
        if out.attentions:
            rows.append(ShapeRow("attention weights (each layer)", tuple(out.attentions[0].shape),
                                 "[batch, head, pos, kv_pos]", "measured"))
        rows.append(ShapeRow("logits (last position only)", tuple(out.logits.shape), "[batch, pos, vocab]", "measured"))
        return tuple(rows)

    def _check_stop(self, token_id: int) -> None:
        eos = self.lm.tokenizer.eos_token_id
        if self.stop_on_eos and eos is not None and token_id == eos:
            self.stop_reason = "eos"
        elif len(self.generated_ids) >= self.max_new_tokens:
            self.stop_reason = "max_new_tokens"
        elif self.stop_strings and any(stop in self.generated_text for stop in self.stop_strings):
            self.stop_reason = "stop_string"
        elif self.ids.shape[1] >= self.lm.summary.max_positions:
            self.stop_reason = "context_limit"


def encode_prompt(lm: LoadedModel, prompt: str) -> torch.Tensor:
    """Token ids of the prompt, [batch=1, pos], with the model's BOS if its tokenizer adds one."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise StepError("The prompt is empty: type some text (spaces alone do not count).")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise StepError(f"The prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}. Shorten it.")
    ids = lm.tokenizer(prompt)["input_ids"]
    limit = lm.summary.max_positions
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
