"""Every story, with its spread: each policy's damage over several held-out stories, in fp32 and in bf16.

One story gives one agreement figure, and neighbouring policies differ by about one token of it. Here:

    stories      the first STORIES stories of the held-out text (assets/held_out/tinystories_eval_40.txt, split at
                 its end-of-text marks) at least MIN_TOKENS tokens long, each cut at CONTEXT tokens: its first half
                 prefilled, the rest teacher-forced one token a decode step (measure.forced_logprobs), and a free run
                 of FREE_TOKENS greedy tokens from its first half (measure.greedy): where it parts from the full cache
    pooled       a policy's agreement is its agreeing steps over all stories' steps, its KL the mean over those steps
    interval     95 % percentile bootstrap over the stories (RESAMPLES resamples of the stories with replacement,
                 seeded; the same resamples for every policy): steps within a story are not independent, stories are
    tied         two neighbours of the ranking whose intervals overlap are tied; ">" only where they do not
    dtypes       every run twice: the model, its full cache and every policy's full-precision rows in fp32, then the
                 same in bf16 (a copy of the weights cast to bf16: the dtype a server holds, what "counted at bf16"
                 counts); each against the full cache in its own dtype, and bf16's full cache against fp32's
    saturation   fp8 freezes its scale on the prompt: every decoded K and V number past ±448 · scale is counted as it
                 arrives (quant.QuantizedLayer.count_past_range), its share of every decoded number, and the worst

`python -m engine budget --policy all --stories assets/budget_stories_default.json` records it for the page.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from engine.errors import StepError
from engine.timing import now
from topics.budget.measure import BUDGET, EVAL_TEXT, compare_forced, forced_logprobs, greedy
from topics.budget.policies import POLICIES, check
from topics.budget.quant import QuantizedLayer
from topics.budget.records import (
    BF16_BYTES,
    Interval,
    PolicySpread,
    Saturation,
    StoryScore,
    StorySpread,
)

STORIES = 8
MIN_TOKENS = 160  # 80 prefilled, 80 teacher-forced at least: more than the default budget of 64 on either side
CONTEXT = 256
FREE_TOKENS = 48
RESAMPLES = 2000
SEED = 0
END = "<|endoftext|>"


def story_ids(lm, stories: int = STORIES, min_tokens: int = MIN_TOKENS, context: int = CONTEXT) -> list[list[int]]:
    """The first `stories` held-out stories at least `min_tokens` long, in this model's tokenizer, cut at `context`."""
    limit = min(context, lm.spec.max_positions or context)
    out = []
    for story in EVAL_TEXT.read_text(encoding="utf-8").split(END):
        if story.strip():
            ids = lm.tokenizer(story.strip(), verbose=False)["input_ids"][:limit]
            if len(ids) >= min_tokens:
                out.append(ids)
        if len(out) == stories:
            return out
    raise StepError(f"The held-out text has {len(out)} stories of at least {min_tokens} tokens; asked for {stories}.")


def in_dtype(lm, dtype: torch.dtype):
    """The same model with its weights cast to `dtype` (a copy: the shared model is left as it is)."""
    from engine.load.loaded import LoadedModel

    if lm.dtype == dtype:
        return lm
    return LoadedModel(model=copy.deepcopy(lm.model).to(dtype), tokenizer=lm.tokenizer, spec=lm.spec, device=lm.device,
                       dtype=dtype, captures=lm.captures)


def saturation(cache) -> Saturation | None:
    """fp8's decoded numbers past the frozen scale's range, every layer (None: the cache holds no frozen scale)."""
    layers = [layer for layer in getattr(cache, "layers", ()) if isinstance(layer, QuantizedLayer)
              and getattr(layer.codec, "frozen", None) is not None]
    if not layers:
        return None
    return Saturation(decoded=sum(x.decoded_numel for x in layers), past_range=sum(x.past_range for x in layers),
                      worst=max(x.worst_over for x in layers))


def score_stories(lm, policies, budget: int, stories: list[list[int]], free_tokens: int = FREE_TOKENS,
                  on_story=None) -> tuple[dict[str, list[StoryScore]], dict[str, Saturation], list[torch.Tensor]]:
    """Per policy, one StoryScore a story (against the full cache in lm's dtype); fp8's saturation summed over the
    stories; and the full cache's teacher-forced log-probs of each story (to hold another dtype's full cache to)."""
    scores: dict[str, list[StoryScore]] = {p: [] for p in policies}
    sat: dict[str, list[Saturation]] = {}
    fulls = []
    for n, ids in enumerate(stories):
        if on_story:
            on_story(n)
        half = len(ids) // 2
        ref, _ = forced_logprobs(lm, "full", None, ids, half)
        fulls.append(ref)
        prompt = lm.tokenizer.decode(ids[:half], skip_special_tokens=True)
        runs = (("full", None), *((p, budget) for p in policies))
        free = {g.policy: g for g in greedy(lm, runs, prompt, free_tokens)}
        for policy in policies:
            logp, cache = forced_logprobs(lm, policy, budget, ids, half)
            f = compare_forced(policy, budget, half, ref, logp)
            scores[policy].append(StoryScore.of(n, len(ids), f.agree, f.kl, free[policy].tokens, free["full"].tokens))
            if (s := saturation(cache)) is not None:
                sat.setdefault(policy, []).append(s)
    summed = {p: Saturation(sum(s.decoded for s in v), sum(s.past_range for s in v), max(s.worst for s in v))
              for p, v in sat.items()}
    return scores, summed, fulls


def intervals(scores: list[StoryScore], picks: np.ndarray) -> tuple[Interval, Interval]:
    """95 % percentile bootstrap of the pooled agreement and mean KL: `picks` [resamples, stories] story indexes."""
    agree = np.array([s.agreeing for s in scores], dtype=float)
    kl = np.array([s.kl_sum for s in scores])
    steps = np.array([s.steps for s in scores], dtype=float)
    a = agree[picks].sum(1) / steps[picks].sum(1)
    k = kl[picks].sum(1) / steps[picks].sum(1)
    return (Interval(float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))),
            Interval(float(np.percentile(k, 2.5)), float(np.percentile(k, 97.5))))


def spread_rows(scores: dict[str, list[StoryScore]], sat: dict[str, Saturation], budget: int, dtype: str,
                picks: np.ndarray) -> list[PolicySpread]:
    rows = []
    for policy, per_story in scores.items():
        agreement, kl = intervals(per_story, picks)
        rows.append(PolicySpread(policy, None if policy == "full" else budget, dtype, tuple(per_story), agreement, kl,
                                 sat.get(policy)))
    return rows


def measure_stories(lm, policies=tuple(p for p in POLICIES if p != "full"), budget: int = BUDGET,
                    stories: int = STORIES, context: int = CONTEXT, free_tokens: int = FREE_TOKENS,
                    dtypes=(torch.float32, torch.bfloat16), resamples: int = RESAMPLES, seed: int = SEED,
                    command: str = "", log=None) -> StorySpread:
    """Every policy over `stories` held-out stories, in each dtype, with its interval (see the module docstring)."""
    for policy in policies:
        check(lm, policy, budget)
    t0 = now()
    picks = np.random.default_rng(seed).integers(0, stories, size=(resamples, stories))
    rows, fulls, lengths = [], {}, []
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        model = in_dtype(lm, dtype)
        ids = story_ids(model, stories, min(MIN_TOKENS, context), context)
        lengths = [len(x) for x in ids]
        scores, sat, fulls[name] = score_stories(
            model, policies, budget, ids, free_tokens,
            on_story=(lambda n, d=name: log(f"  {d}: story {n + 1} of {stories}")) if log else None)
        rows += spread_rows(scores, sat, budget, name, picks)
    if "float32" in fulls and "bfloat16" in fulls:  # what bf16 alone does: its full cache against fp32's
        per_story = []
        for n, (a, b) in enumerate(zip(fulls["float32"], fulls["bfloat16"])):
            f = compare_forced("full", None, 0, a, b)
            per_story.append(StoryScore.of(n, lengths[n], f.agree, f.kl, (), ()))
        agreement, kl = intervals(per_story, picks)
        rows.append(PolicySpread("full", None, "bfloat16 vs float32", tuple(per_story), agreement, kl, None))
    from datetime import datetime, timezone

    from physics import machine

    return StorySpread(model=lm.spec.name, device=machine.describe(lm.device), budget=budget, stories=stories,
                       context=context, free_tokens=free_tokens, resamples=resamples, seed=seed, rows=tuple(rows),
                       measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       wall_s=round(now() - t0, 1), command=command, bf16_bytes=BF16_BYTES)


def recorded_stories(lm) -> StorySpread | None:
    """The spread recorded for this model (assets/budget_stories_<model>.json), or None."""
    import json

    from engine.paths import ASSETS
    from topics.budget.measure import sweep_name

    path = ASSETS / f"budget_stories_{sweep_name(lm)}.json"
    if not path.is_file():
        return None
    return StorySpread.from_dict(json.loads(path.read_text(encoding="utf-8")))
