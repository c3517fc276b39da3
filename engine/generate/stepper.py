"""Generation one forward pass at a time: `prefill()` once, then `decode()` per token.

    prefill:  input_ids [batch, s]  -> one pass over every prompt position, fills the KV cache
    decode:   input_ids [batch, 1]  -> one new position; reads the cache, appends one K/V row
    no cache: input_ids [batch, n]  -> every decode step recomputes all n positions again

The cache switch is the one `if self.use_cache:` branch in `decode()`. A Stepper is one Sequence
of the generation loop (its tokens, chooser and stop rule) and one Run (records, step(), done,
run(n), free()); the record of each pass is the loop's `record_pass` (engine/generate/loop.py).
"""

from __future__ import annotations

from engine.errors import StepError
from engine.forward.cache import kv_length, new_cache
from engine.forward.run import Pass, run_pass
from engine.forward.sampling import Sampling
from engine.forward.trace import StepTrace
from engine.generate.loop import Run, Sequence, record_candidates, record_pass, rows_kept, timing_repeats
from engine.load.loaded import LoadedModel
from engine.timing import span


class Stepper(Sequence, Run):
    """One sequence generated one pass at a time on a shared LoadedModel; owns its cache and its StepTraces."""

    def __init__(self, lm: LoadedModel, prompt: str, use_cache: bool = True, sampling: Sampling | None = None,
                 max_new_tokens: int = 32, stop_strings: tuple[str, ...] | list[str] = (), record: bool = True,
                 stop_on_eos: bool = True, repeats: int | None = None, make_cache=None):
        super().__init__(lm, prompt, sampling=sampling, max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                         stop_on_eos=stop_on_eos)
        self.use_cache = bool(use_cache)
        self.record = record
        self.repeats = timing_repeats(record, repeats)
        self.make_cache = make_cache or new_cache  # config -> an empty cache: the full one, or a budgeted one
        self.cache = None
        self.records: list[StepTrace] = []  # one per forward pass
        self.last_logits = None  # [vocab] float32 on the CPU, for comparisons


    # ------------------------------------------------------------ the two phases

    def prefill(self) -> StepTrace:
        """First forward pass: all s prompt positions at once (matrix x matrix: many FLOPs per weight read)."""
        if self.records:
            raise StepError("Prefill has already run for this prompt: press Reset to start again.")
        self.cache = self.make_cache(self.lm.config) if self.use_cache else None
        if not getattr(self.cache, "repeatable", True):  # it drops or rounds what it holds: a pass cannot be undone
            self.repeats = 1  # and timed again, so each pass runs once
        fed = self.ids  # [batch, s]
        result = run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats)
        return self._close("prefill", fed, result, past=0)

    def decode(self) -> StepTrace:
        """One more token: feed the last chosen token (with the cache) or everything (without)."""
        if not self.records:
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
        return self._close("decode", fed, result, past=past)

    # ------------------------------------------------------------ conveniences

    def step(self) -> StepTrace:
        """The prefill first, then one decode per call."""
        return self.decode() if self.records else self.prefill()

    @property
    def kv_bytes(self) -> int:
        return self.records[-1].kv_bytes if self.records else 0

    def report(self, attention: bool = False) -> dict:
        """The whole run as plain JSON-ready data: what `run --json` writes and the page exports."""
        s = self.lm.spec
        return {"model": {**s.__dict__, "attention": s.attention, "dtype": self.lm.dtype_name,
                          "device": str(self.lm.device)},
                "prompt": self.prompt, "use_cache": self.use_cache,
                "sampling": self.sampling.__dict__, "max_new_tokens": self.max_new_tokens,
                "stop_strings": list(self.stop_strings), "text": self.text, "generated_text": self.generated_text,
                "stop_reason": self.stop_reason, "timed_repeats": self.repeats,
                "steps": [t.to_dict(attention=attention) for t in self.records]}

    def free(self) -> None:
        """Drop the cache and records (Reset, or a session ending)."""
        self.cache = None
        self.records = []
        self.last_logits = None

    # ------------------------------------------------------------ after each pass

    def _close(self, phase: str, fed, result: Pass, past: int) -> StepTrace:
        """Choose the token, record the pass, append the token (the loop's stop rule decides if the run ends)."""
        with span(self.lm.device) as choosing:
            choice = self.choose(result.logits[0, -1], probs=self.record)
        sample_ms = choosing.ms
        self.last_logits = choice.logits
        q_len, kv_len = fed.shape[1], past + fed.shape[1]
        rows = rows_kept(self.lm, q_len, kv_len, every_row=phase == "prefill") if self.record else 0
        trace = record_pass(
            self, record=self.record, phase=phase, step=len(self.records), fed=fed, result=result, past=past,
            cache=self.cache, token_id=choice.token_id, top=record_candidates(self.lm, choice) if self.record else (),
            sample_ms=sample_ms, rows=rows, note=attention_note(phase, self.use_cache, rows, q_len, kv_len),
            use_cache=self.use_cache)
        self.records.append(trace)
        self.append(choice.token_id)
        return trace


def attention_note(phase: str, use_cache: bool, rows: int, q_len: int, kv_len: int) -> str:
    """Which attention rows a step's trace keeps, in words."""
    if phase == "prefill" and rows == q_len:
        return f"all {q_len} × {kv_len} causal rows"
    if phase == "prefill":
        return f"last row only: {q_len} × {kv_len} rows were computed, too many to keep"
    if use_cache:
        return f"one new row of {kv_len} keys (the cache supplied the other {kv_len - 1})"
    return f"last row shown; all {q_len} × {kv_len} were recomputed this step"
