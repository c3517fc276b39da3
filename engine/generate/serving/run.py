"""A serving run: many requests on one model, one engine step at a time. `ServingRun.step()` is three calls:

    plan = scheduler.schedule(step)            scheduler.py: requests whose arrival step has come join the queue,
                                               then ONE forward pass is filled under the token budget: decodes,
                                               prefill chunks, whole prompts. Blocks are checked, then committed;
                                               prefixes shared (held, or cached after their request finished);
                                               requests preempted by the policy. The Plan says who feeds what.
    forward_ms, chosen = self.forward(plan)    the pass on the paged pool (engine/forward/paged.py: [batch=1, T]
                                               in, one row of logits per request that reaches the end of what it
                                               had to feed); each such request's Sequence chooses its token
    scheduler.postprocess(plan, chosen, step)  positions computed, full blocks hashed (now shareable), each token
                                               appended through the generation loop's stop rule; a request that
                                               stops gives its blocks back

and then the step is recorded (record.py): rows, queue, block tables, counts, measured times.

A ServingRun is a Run of the generation loop (engine/generate/loop.py): records (its ServingSteps), step(),
done, run(n), free(), like the Stepper and the Speculator. A request decoded here gives
exactly the tokens it gives alone (tests/test_serving.py checks it against the Stepper, transformers'
generate and transformers' own continuous batching, generate_batch).
"""

from __future__ import annotations

from itertools import accumulate

from engine.errors import StepError
from engine.forward.paged import PagedKV, PagedPass, Row, run_paged_pass
from engine.forward.sampling import Sampling
from engine.generate.loop import Run, token_pieces
from engine.generate.serving.blocks import BlockManager
from engine.generate.serving.record import Latency, RowRecord, ServingStep, keys_read
from engine.generate.serving.requests import Request, RequestSpec, Status
from engine.generate.serving.scheduler import Batching, Phase, Plan, Preemption, Scheduler
from engine.load.loaded import LoadedModel
from engine.timing import span

MAX_REQUESTS = 64  # per run: what one session may ask of a shared server
MAX_PAGE_SIZE = 1024
MAX_BLOCKS = 65_536
MAX_BATCH_TOKENS = 65_536
MAX_POOL_BYTES = 2 * 2**30
# What we chose, and why (the same sizing for transformers' generate_batch when it is the reference): 16-position
# pages, 128 blocks (2,048 positions: 8 requests of ~250 tokens), 256 tokens per pass (a whole short prompt, or a
# chunk of a long one, beside every decode). transformers' own defaults size its pool and budget for a GPU, far
# more than these small models on a CPU need.
DEFAULTS = {"page_size": 16, "num_blocks": 128, "max_batch_tokens": 256}
PREEMPTION = tuple(p.value for p in Preemption)  # the policies a run may name: "newest" (vLLM's), "most_blocks"
BATCHING = tuple(b.value for b in Batching)  # how a freed batch slot is refilled: "continuous", "static"


class ServingRun(Run):
    """Requests, the pool, the scheduler and the record of every step; `step()` until `done`."""

    paged_pass = PagedPass  # one attention call per layer for every request (the benchmark times it against a loop)

    def __init__(self, lm: LoadedModel, requests: list[RequestSpec], *, page_size: int = DEFAULTS["page_size"],
                 num_blocks: int = DEFAULTS["num_blocks"], max_batch_tokens: int = DEFAULTS["max_batch_tokens"],
                 prefix_sharing: bool = True, chunking: bool = True, preemption: str = Preemption.NEWEST,
                 max_seqs: int | None = None, batching: str = Batching.CONTINUOUS,
                 sampling: Sampling | None = None, stop_on_eos: bool = True, record: bool = True,
                 max_requests: int = MAX_REQUESTS):
        if not lm.captures:
            raise StepError(f"Serving needs a model whose attention goes through transformers' attention interface; "
                            f"'{lm.spec.name}' does not, so its passes cannot be paged here.")
        check_sizes(page_size, num_blocks, max_batch_tokens)
        if preemption not in PREEMPTION:
            raise StepError(f"The preemption policy must be one of {', '.join(PREEMPTION)} "
                            f"(got {str(preemption)[:40]!r}).")
        if batching not in BATCHING:
            raise StepError(f"The batching must be one of {', '.join(BATCHING)} (got {str(batching)[:40]!r}).")
        if max_seqs is not None:
            _whole(max_seqs, "The number of batch slots", 1, MAX_REQUESTS)
        check_requests(requests, max_requests)
        self.lm = lm
        self.page_size, self.num_blocks, self.max_batch_tokens = page_size, num_blocks, max_batch_tokens
        self.prefix_sharing, self.chunking, self.record = prefix_sharing, chunking, record
        self.preemption = Preemption(preemption)
        self.max_seqs, self.batching = max_seqs, Batching(batching)
        self.requests = [_request(lm, i, spec, sampling, stop_on_eos) for i, spec in enumerate(requests)]
        for r in self.requests:  # a pool that could never hold a request alone would stall for ever
            need = -(-min(r.prompt_len + r.max_new_tokens, lm.spec.max_positions) // page_size)
            if need > num_blocks:
                raise StepError(f"The pool holds {num_blocks} block{'s' if num_blocks != 1 else ''} of {page_size} "
                                f"positions ({num_blocks * page_size:,} positions); request {r.id} alone needs "
                                f"{need} blocks "
                                f"(its {r.prompt_len}-token prompt and up to {r.max_new_tokens} new tokens). "
                                "Give the pool more blocks, or ask for fewer tokens.")
        self.kv = PagedKV(lm, num_blocks, page_size)
        if self.kv.bytes > MAX_POOL_BYTES:
            raise StepError(f"A pool of {num_blocks} blocks x {page_size} positions would hold "
                            f"{self.kv.bytes / 2**30:.1f} GiB of keys and values; the limit here is "
                            f"{MAX_POOL_BYTES / 2**30:.0f} GiB.")
        self.blocks = BlockManager(num_blocks, page_size)
        self.scheduler = Scheduler(self.blocks, self.requests, max_batch_tokens, chunking=chunking,
                                   prefix_sharing=prefix_sharing, preemption=self.preemption, max_seqs=max_seqs,
                                   batching=self.batching)
        self.records: list[ServingStep] = []  # every step's record (record=False: the last one only)
        self.step_ms: list[float] = []  # every step's wall time, recorded or not: the clock of TTFT and TPOT
        self.passes = 0  # steps that ran a forward pass (a step waiting for arrivals runs none)
        self.step_index = 0

    @property
    def done(self) -> bool:
        return all(r.status == Status.DONE for r in self.requests)

    # ------------------------------------------------------------ one engine step: three calls

    def step(self) -> ServingStep:
        """schedule -> forward -> postprocess (see the module docstring), then the step's record."""
        if self.done:
            raise StepError("Every request has finished: press Reset to serve them again.")
        evicted = self.blocks.evicted
        with span(self.lm.device) as took:
            plan = self.scheduler.schedule(self.step_index)
            forward_ms, chosen = self.forward(plan)
            self.scheduler.postprocess(plan, chosen, self.step_index)
        return self._close(plan, chosen, forward_ms, took.ms, self.blocks.evicted - evicted)

    def forward(self, plan: Plan) -> tuple[float | None, dict[str, int]]:
        """The pass on the pool, and each emitting request's token chosen from its row of logits: (the pass's
        measured ms, {request id: token id}); (None, {}) when nothing is scheduled (waiting for arrivals)."""
        if not plan.rows:
            return None, {}
        rows = [Row(s.fed, s.start, self.blocks.slots(s.request.table, s.start + s.q_len), s.emits) for s in plan.rows]
        result = run_paged_pass(self.lm, self.paged_pass(self.kv, rows))
        emitting = [s.request for s in plan.rows if s.emits]
        logits = result.logits[0].float().cpu()  # [emitting rows, vocab], in plan order: one copy off the device
        return result.timing.forward_ms, {r.id: r.choose(row) for r, row in zip(emitting, logits)}

    def free(self) -> None:
        """Drop the pool's tensors and the records (Reset, or a session ending)."""
        self.kv = None
        self.records = []

    # ------------------------------------------------------------ the record of a step

    def _close(self, plan: Plan, chosen: dict[str, int], forward_ms: float | None, step_ms: float,
               evicted: int) -> ServingStep:
        """Count the step, keep its time, record it (record=False keeps only the newest record)."""
        step = self.step_index
        self.step_index += 1
        self.step_ms.append(step_ms)
        self.passes += forward_ms is not None
        record = self._record(step, plan, chosen, forward_ms, evicted)
        if self.record or not self.records:
            self.records.append(record)
        else:
            self.records[-1] = record
        return record

    def _record(self, step: int, plan: Plan, chosen: dict[str, int], forward_ms, evicted: int) -> ServingStep:
        tok = self.lm.tokenizer
        rows = tuple(RowRecord(s.request.id, s.phase, s.start, s.q_len,
                               0 if s.phase in (Phase.DECODE, Phase.PADDING) else s.request.chunks,
                               chosen.get(s.request.id) if s.emits else None,
                               token_pieces(tok, [chosen[s.request.id]])[0] if s.emits and self.record else "")
                     for s in plan.rows)
        full = self.record
        return ServingStep(
            step=step, rows=rows, arrived=tuple(plan.arrived), admitted=tuple(plan.admitted),
            preempted=tuple(plan.preempted), finished=tuple(r.id for r in self.requests if r.finish_step == step),
            prefix_hits=tuple(plan.prefix_hits.items()),
            statuses=tuple((r.id, r.status) for r in self.requests) if full else (),
            tables=tuple((r.id, tuple(r.table)) for r in self.requests if r.table) if full else (),
            held=tuple((r.id, r.computed) for r in self.requests if r.table) if full else (),
            ref_counts=self.blocks.ref_counts() if full else (), block_states=self.blocks.states() if full else (),
            blocks_used=self.blocks.num_used, blocks_free=self.blocks.num_free, blocks_shared=self.blocks.num_shared,
            blocks_cached=self.blocks.num_cached, blocks_evicted=evicted,
            tokens=plan.tokens, kv_read=keys_read(plan.rows),
            forward_ms=forward_ms, step_ms=self.step_ms[-1],
        )

    # ------------------------------------------------------------ what a client sees

    def clock_ms(self, step: int) -> float:
        """Milliseconds from the start of the run to the end of `step` (the sum of measured step times)."""
        return sum(self.step_ms[: step + 1])

    def latency(self, r: Request) -> Latency:
        """Time to first token and time per output token (record.py: their definitions), in steps and measured ms."""
        if r.first_token_step is None:
            return Latency(None, None, None)
        clock = list(accumulate(self.step_ms))  # ms from the run's start to the end of each step
        arrived_at = clock[r.arrive - 1] if r.arrive > 0 else 0.0  # the start of its arrival step
        made = [clock[step] for step in r.token_steps]  # when each of its tokens was chosen
        gaps = [b - a for a, b in zip(made, made[1:])]
        return Latency(r.first_token_step - r.arrive + 1, made[0] - arrived_at,
                       sum(gaps) / len(gaps) if gaps else None)

    @property
    def generated_tokens(self) -> int:
        return sum(len(r.generated_ids) for r in self.requests)

    @property
    def tokens_per_s(self) -> float:
        total = sum(self.step_ms)
        return self.generated_tokens / (total / 1e3) if total else 0.0

    @property
    def prefix_hit_tokens(self) -> int:
        return sum(r.prefix_hit_tokens for r in self.requests)

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.requests)

    def report(self) -> dict:
        """Plain JSON-ready data: what `python -m engine serve --json` writes."""
        return {
            "model": self.lm.spec.name, "device": str(self.lm.device), "dtype": self.lm.dtype_name,
            "page_size": self.page_size, "num_blocks": self.num_blocks, "max_batch_tokens": self.max_batch_tokens,
            "prefix_sharing": self.prefix_sharing, "chunking": self.chunking, "preemption": self.preemption,
            "batching": self.batching, "max_seqs": self.max_seqs,
            "block_bytes": self.kv.bytes_per_block, "pool_bytes": self.kv.bytes,
            "requests": [{"id": r.id, "prompt": r.prompt, "prompt_ids": r.tokens[: r.prompt_len],
                          "generated_ids": r.generated_ids, "text": r.generated_text, "arrive": r.arrive,
                          "first_token_step": r.first_token_step, "finish_step": r.finish_step,
                          "stop_reason": r.stop_reason, "preemptions": r.preemptions,
                          "prefix_hit_tokens": r.prefix_hit_tokens, "recomputed_tokens": r.recomputed_tokens,
                          **self.latency(r).to_dict()} for r in self.requests],
            "steps": [s.to_dict() for s in self.records],
            "prefix_hit_tokens": self.prefix_hit_tokens, "preemptions": self.preemptions,
            "blocks_evicted": self.blocks.evicted,
            "generated_tokens": self.generated_tokens, "engine_steps": self.step_index,
            "wall_ms": sum(self.step_ms), "tokens_per_s": self.tokens_per_s,
            "timing": "each step's wall time, perf_counter around a device sync; the passes are not repeated",
        }


# ---------------------------------------------------------------- checks


def _request(lm, index: int, spec, sampling, stop_on_eos: bool) -> Request:
    try:
        return Request(lm, index, spec, sampling=sampling, stop_on_eos=stop_on_eos)
    except StepError as e:
        raise StepError(f"Request r{index}: {e}") from None


def _whole(value, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise StepError(f"{name} must be a whole number from {lo:,} to {hi:,} (got {value!r}).")
    return value


def check_sizes(page_size, num_blocks, max_batch_tokens) -> None:
    _whole(page_size, "The page size (positions per block)", 1, MAX_PAGE_SIZE)
    _whole(num_blocks, "The number of blocks in the pool", 1, MAX_BLOCKS)
    _whole(max_batch_tokens, "The token budget of one pass", 1, MAX_BATCH_TOKENS)


def check_requests(requests, max_requests: int) -> None:
    """A list of RequestSpec: not empty, not too many, arrivals going forward in time."""
    if not requests:
        raise StepError("No requests to serve: add at least one (a prompt, max new tokens, an arrival step).")
    if len(requests) > max_requests:
        raise StepError(f"{len(requests)} requests is more than one run may serve here ({max_requests}).")
    last = 0
    for i, spec in enumerate(requests):
        if not isinstance(spec, RequestSpec):
            raise StepError(f"Request r{i} is not a request (a prompt, max new tokens and an arrival step).")
        _whole(spec.arrive, f"Request r{i}'s arrival step", 0, 1_000_000)
        if spec.arrive < last:
            raise StepError(f"Arrivals must go forward in time: request r{i} arrives at step {spec.arrive}, "
                            f"after r{i - 1} at step {last}. List the requests in the order they arrive.")
        last = spec.arrive
