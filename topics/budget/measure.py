"""Each policy side by side with the full cache: bytes held, the damage two ways, the time, the attention sink.

    bytes        numel * element_size over the tensors the cache holds, against the full cache's at the same
                 positions, both in the model's own dtype (measured, never derived); beside them what a bf16
                 server would hold, counted from the same tensors at 2 bytes a full-precision number
    forced       teacher-forced on a held-out text (assets/held_out/tinystories_eval_40.txt: the models never
                 trained on it): prefill the first half of a CONTEXT-token slice, then feed the rest one token a
                 decode step; at each step the policy's next-token distribution against the full cache's: top-1
                 agreement, and KL(full || policy)
    greedy       free-running from a prompt: the first step where the tokens part, and both texts
    ms/step      each decode step's forward pass, perf_counter around a device sync (engine/forward/run.py),
                 the first WARMUP steps excluded; median and quartiles; for a quantized cache, also the part of
                 each step spent dequantizing the older rows (timed inside the pass, quant.py)
    sinks        the attention each layer pays position 0, against a uniform reader's, averaged over the heads
                 and head by head

Every policy goes through the one generation loop (the Stepper with `make_cache`) or `run_pass`, as the full
cache does; the full cache is measured in the same run, on the same tokens.
"""

from __future__ import annotations

import torch

from engine.errors import StepError
from engine.forward.cache import layer_bytes
from engine.forward.run import run_pass
from engine.generate.stepper import Stepper
from engine.paths import ASSETS
from engine.timing import now
from topics.budget.evict import EvictingLayer
from topics.budget.policies import CAPPED, POLICIES, budget_cache, check
from topics.budget.quant import QuantizedLayer
from topics.budget.records import (
    CacheMap,
    Forced,
    Greedy,
    LayerMap,
    PolicyRow,
    RecordedSweep,
    SinkRow,
    Summary,
    SweepPoint,
)

EVAL_TEXT = ASSETS / "held_out" / "tinystories_eval_40.txt"
CONTEXT = 256  # tokens of the held-out text: the first half prefilled, the second teacher-forced
BUDGET = 64  # a quarter of the context
NEW_TOKENS = 96  # free-running greedy steps
WARMUP = 1  # decode steps excluded from the timing
SINK_FROM = 32  # query rows read for the sink: far enough from the start that a uniform reader pays it little


def held_out_ids(lm, context: int = CONTEXT) -> list[int]:
    """The first `context` tokens of the held-out text, in this model's tokenizer."""
    text = EVAL_TEXT.read_text(encoding="utf-8")
    chars = 8 * context  # tokenize a head of the text that holds the context (a token is a few characters)
    ids = lm.tokenizer(text[:chars], verbose=False)["input_ids"]
    while len(ids) < context and chars < len(text):
        chars *= 2
        ids = lm.tokenizer(text[:chars], verbose=False)["input_ids"]
    limit = lm.spec.max_positions or len(ids)
    if context < 8 or context > min(len(ids), limit):
        raise StepError(f"A context of {context} tokens: choose 8 to {min(len(ids), limit):,} (the held-out text "
                        "and the model's window both bound it).")
    return ids[:context]


# ---------------------------------------------------------------- the cache, as a picture reads it


def cache_map(lm, cache, policy: str, budget: int | None, positions: int, bytes_full: int,
              prefilled: int = 0) -> CacheMap:
    """Which positions each layer holds (and in how many bits), and the bytes, from the cache's own tensors."""
    kv_heads = lm.spec.kv_heads
    layers = []
    for i, layer in enumerate(cache.layers):
        held = [kv_heads] * positions
        quantized = [False] * positions
        packed = dequantized = 0
        if isinstance(layer, EvictingLayer) and layer.positions is not None:
            held = [0] * positions
            for p in layer.positions[0].flatten().tolist():  # [kv_head, held] of batch 0
                held[p] += 1
        if isinstance(layer, QuantizedLayer):
            quantized = [p < layer.quantized for p in range(positions)]
            full, packed, dequantized = layer.tail_numel(), layer.packed_nbytes(), layer.quantized_numel()
        else:
            keys = getattr(layer, "keys", None)
            full = 0 if keys is None else keys.numel() + layer.values.numel()
        layers.append(LayerMap(i, tuple(held), tuple(quantized), kv_heads, layer_bytes(layer), full, packed,
                               dequantized))
    return CacheMap(policy, budget, positions, tuple(layers), sum(m.nbytes for m in layers), bytes_full, prefilled,
                    lm.dtype_name, lm.elem_bytes)


def full_bytes(cache) -> int:
    return sum(layer_bytes(layer) for layer in cache.layers)


# ---------------------------------------------------------------- the damage, teacher-forced


def forced_logprobs(lm, policy: str, budget: int | None, ids: list[int], prompt_tokens: int):
    """Prefill ids[:prompt_tokens], then feed the rest one per decode step: (log-probs [steps, vocab], cache)."""
    make = budget_cache(lm, policy, budget)
    cache = make(lm.config)
    out = [run_pass(lm, torch.tensor([ids[:prompt_tokens]]), cache).logits[0, -1]]
    for token in ids[prompt_tokens:]:
        out.append(run_pass(lm, torch.tensor([[token]]), cache).logits[0, -1])
    # the prefill's own prediction is the full cache's in every policy (nothing is dropped before it): not compared
    return torch.log_softmax(torch.stack(out[1:]).float(), dim=-1).cpu(), cache


def compare_forced(policy: str, budget: int | None, prompt_tokens: int, full: torch.Tensor,
                   other: torch.Tensor) -> Forced:
    """Top-1 agreement and KL(full || policy) at every step, from two [steps, vocab] log-prob tensors.

    KL(full || policy) = Σ_token p_full · (log p_full − log p_policy): the nats lost by reading the full cache's
    next token through the policy's distribution (zero only where the two agree)."""
    agree = (full.argmax(-1) == other.argmax(-1)).tolist()
    kl = (full.exp() * (full - other)).sum(-1).clamp(min=0).tolist()
    return Forced(policy, budget, prompt_tokens, tuple(bool(a) for a in agree), tuple(kl))


# ---------------------------------------------------------------- free-running greedy, timed


def dequant_ms(cache) -> float:
    """Time a quantized cache has spent dequantizing its older rows so far (0 for any other cache)."""
    return sum(getattr(layer, "dequant_ms", 0.0) for layer in getattr(cache, "layers", ()))


def time_dequantize(cache) -> None:
    """From now on a quantized cache's layers time their dequantize (`dequant_ms`); other caches are left be."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, QuantizedLayer):
            layer.timed = True


def greedy(lm, runs: tuple[tuple[str, int | None], ...], prompt: str, new_tokens: int = NEW_TOKENS
           ) -> tuple[Greedy, ...]:
    """Greedy decoding from `prompt` under each (policy, budget), through the Stepper with its cache.

    The runs step in alternation (one decode each, in turn), so a busy machine slows them alike and their
    times compare; every decode pass is timed once, the first WARMUP steps excluded from the median.
    """
    steppers = [Stepper(lm, prompt, make_cache=budget_cache(lm, name, budget), max_new_tokens=new_tokens,
                        record=False, stop_on_eos=False, repeats=1) for name, budget in runs]
    spent: list[list[float]] = [[] for _ in runs]  # per run, per decode step: ms spent dequantizing
    for run in steppers:
        run.prefill()
        time_dequantize(run.cache)
    while not all(run.done for run in steppers):
        for run, dq in zip(steppers, spent):
            if not run.done:
                before = dequant_ms(run.cache)
                run.decode()
                dq.append(dequant_ms(run.cache) - before)
    out = []
    for (name, budget), run, dq in zip(runs, steppers, spent):
        ms = tuple(t.timing.samples_ms[0] for t in run.records if t.phase == "decode")
        pieces = tuple(lm.tokenizer.decode([i]) for i in run.generated_ids)
        out.append(Greedy(name, budget, prompt, tuple(run.generated_ids), pieces, ms, WARMUP,
                          tuple(run.tokens[:run.prompt_len]), tuple(dq) if any(dq) else ()))
    return tuple(out)


# ---------------------------------------------------------------- side by side


def compare_policies(lm, policies=tuple(POLICIES), budget: int = BUDGET, context: int = CONTEXT,
                     prompt: str | None = None, new_tokens: int = NEW_TOKENS, on_policy=None) -> list[PolicyRow]:
    """Every policy against the full cache, measured in one run on the same tokens: one PolicyRow each.

    The teacher-forced text is the first `context` tokens of the held-out text (half prefilled, half fed one a
    step); the free run starts from `prompt` (default: the same first half, as text, its start token left to the
    tokenizer, which adds it once). on_policy(name) before each.
    """
    for policy in policies:
        check(lm, policy, None if policy == "full" else budget)
    ids = held_out_ids(lm, context)
    half = context // 2
    prompt = prompt if prompt is not None else lm.tokenizer.decode(ids[:half], skip_special_tokens=True)
    ref, ref_cache = forced_logprobs(lm, "full", None, ids, half)
    bytes_full = full_bytes(ref_cache)
    budgets = {policy: None if policy == "full" else budget for policy in ("full", *policies)}
    runs = {g.policy: g for g in greedy(lm, tuple(budgets.items()), prompt, new_tokens)}
    rows = []
    for policy in policies:
        if on_policy:
            on_policy(policy)
        b = budgets[policy]
        logp, cache = (ref, ref_cache) if policy == "full" else forced_logprobs(lm, policy, b, ids, half)
        rows.append(PolicyRow(policy, b, compare_forced(policy, b, half, ref, logp), runs[policy], runs["full"],
                              cache_map(lm, cache, policy, b, context, bytes_full, half)))
    return rows


def sweep(lm, budgets=(16, 32, 64, 128), policies=tuple(p for p in POLICIES if p != "full"),
          context: int = CONTEXT, on_point=None) -> list[SweepPoint]:
    """Every policy at every budget, teacher-forced on the held-out text: the points of the divergence charts.

    The full cache runs once; on_point(policy, budget) before each of the others.
    """
    for policy in policies:
        for budget in budgets:
            check(lm, policy, budget)
    ids = held_out_ids(lm, context)
    half = context // 2
    ref, ref_cache = forced_logprobs(lm, "full", None, ids, half)
    bytes_full = full_bytes(ref_cache)
    points = []
    for policy in policies:
        for budget in budgets:
            if on_point:
                on_point(policy, budget)
            logp, cache = forced_logprobs(lm, policy, budget, ids, half)
            f = compare_forced(policy, budget, half, ref, logp)
            points.append(SweepPoint(policy, budget, f.agreement, f.kl_mean, full_bytes(cache) / bytes_full))
    return points


def bench_rows(lm, budget: int = BUDGET, context: int = CONTEXT, new_tokens: int = NEW_TOKENS,
               policies=tuple(POLICIES), log=None) -> list[Summary]:
    """A row per policy at one budget for `python -m engine bench`: bytes, agreement, KL, parting step, ms/step."""
    rows = compare_policies(lm, policies, budget, context, new_tokens=new_tokens,
                            on_policy=(lambda p: log(f"  budget {budget}: {p}")) if log else None)
    return [r.summary() for r in rows]


def ranking(rows, policies=CAPPED, budget: int | None = None) -> list[str]:
    """The eviction policies that hold B positions, from the most to the least agreement (ties: the lower KL first).

    snap (SnapKV as published) holds B plus every decoded position, so it is left out unless named.

    rows: PolicyRows (the CLI's table) or SweepPoints (the page's charts, at `budget`): one ordering rule for both.
    """
    return [policy for policy, _ in _ranked(rows, policies, budget)]


def _ranked(rows, policies, budget) -> list[tuple[str, object]]:
    """(policy, its teacher-forced scores) from the most agreement to the least (ties: the lower KL first)."""
    chosen = [(r.policy, getattr(r, "forced", r)) for r in rows
              if r.policy in policies and (budget is None or r.budget == budget)]
    return sorted(chosen, key=lambda c: (-c[1].agreement, c[1].kl_mean))


def ranking_words(rows, policies=CAPPED, budget: int | None = None) -> str:
    """`ranking` in words: "a > b = c", '=' where two neighbours' agreement is the same at the 0.1 % every table shows
    (their order then the lower KL's, which no one reads as "more agreement")."""
    ranked = _ranked(rows, policies, budget)
    shown = [f"{score.agreement:.1%}" for _, score in ranked]
    return "".join(policy + ("" if i == len(ranked) - 1 else " = " if shown[i] == shown[i + 1] else " > ")
                   for i, (policy, _) in enumerate(ranked))


# ---------------------------------------------------------------- the attention sink


def sink_mass(lm, context: int = CONTEXT, from_pos: int = SINK_FROM) -> list[SinkRow]:
    """Per layer: the mean weight the query rows at positions >= from_pos put on position 0, against 1/(pos+1),
    averaged over the heads and head by head.

    One recorded prefill of the held-out text's first `context` tokens, no cache; attention read off the real
    weights (engine/forward/capture.py). A layer with a sink puts far more than a uniform reader on position 0; a
    single head can be one while the layer's average is not.
    """
    ids = held_out_ids(lm, context)
    from_pos = min(from_pos, context - 1)
    result = run_pass(lm, torch.tensor([ids]), None, record=True)
    rows = []
    for layer, pattern in enumerate(result.patterns()):
        w = pattern[0, :, from_pos:, 0].float()  # [head, query_pos] weight on position 0
        q = torch.arange(from_pos, from_pos + w.shape[1], dtype=torch.float32)
        rows.append(SinkRow(layer, float(w.mean()), float((1.0 / (q + 1)).mean()), int(w.shape[1]),
                            tuple(float(h) for h in w.mean(dim=1))))
    if not rows:
        raise StepError(f"{lm.spec.name}'s attention weights are not recorded, so the sink cannot be measured.")
    return rows


# ---------------------------------------------------------------- recorded sweeps, for a page's first screen

SWEEP_BUDGETS = (8, 16, 32, 64, 128)  # the divergence charts' budgets


def sweep_name(lm) -> str:
    """The model a sweep is recorded for: the bundled default model under its short name (one model, two names)."""
    from engine.load.load import DEFAULT_MODEL

    return "default" if lm.spec.name == DEFAULT_MODEL else lm.spec.name


def sweep_path(lm):
    """assets/budget_sweep_<model>.json (`sweep_name`)."""
    return ASSETS / f"budget_sweep_{sweep_name(lm)}.json"


def record_sweep(lm, budgets=SWEEP_BUDGETS, context: int = CONTEXT, command: str = "", on_point=None) -> RecordedSweep:
    """Every policy at every budget (`sweep`), as a recording that names its machine, date and command."""
    from datetime import datetime, timezone

    from physics import machine

    t0 = now()
    points = sweep(lm, budgets, context=context, on_point=on_point)
    return RecordedSweep(sweep_name(lm), machine.describe(lm.device),
                         lm.dtype_name, context, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         round(now() - t0, 1), tuple(points), command)


def recorded_sweep(lm) -> RecordedSweep | None:
    """The divergence charts' points recorded for this model (assets/budget_sweep_<model>.json) and where they were
    measured, or None. Agreement and KL are teacher-forced on a fixed text: they do not depend on the machine's
    speed, so a page can show them before it measures its own (`sweep`, a minute on a laptop)."""
    import json

    path = sweep_path(lm)
    if not path.is_file():
        return None
    return RecordedSweep.from_dict(json.loads(path.read_text(encoding="utf-8")))
