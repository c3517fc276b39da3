"""Plant the bugs the fast tier must catch, one at a time, and say which test caught each.

    python -m tools.mutants              every mutant (each a run of its fast tests: a few minutes on 2 cores)
    python -m tools.mutants NAME ...     only these
    python -m tools.mutants --list       what each one plants, and the tests meant to kill it

Each bug is planted at run time inside a pytest subprocess: this module is loaded there as a plugin
(`-p tools.mutants`) and, with DECODE_LAB_MUTANT naming the bug, patches the engine before any test runs. Nothing
is written to disk. A mutant is killed when one of its tests (fast tier only) fails; if all pass it survived, and
this exits 1. The same tests run once first with nothing planted: they must pass, or a kill would mean nothing.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

ENV = "DECODE_LAB_MUTANT"
FAST = "not browser and not system and not slow and not perf"
REFERENCE_TESTS = [  # the engine's tokens and logits against transformers' own copy of the model
    "tests/test_bundled.py::test_bundled_models_give_transformers_own_tokens_and_logits",
    "tests/test_families.py::test_greedy_tokens_and_logits_with_and_without_cache_equal_transformers",
    "tests/test_serving.py::test_tiny_families_serve_transformers_own_tokens_and_logits",
    "tests/test_speculative.py::test_greedy_speculation_gives_the_targets_own_greedy_tokens_and_logits",
]
SPECULATIVE_SAMPLING_TESTS = [
    "tests/test_speculative.py::test_speculative_sampling_draws_the_targets_distribution_by_frequency",
    "tests/test_speculative.py::test_a_round_of_the_engines_judge_yields_the_expected_tokens_per_pass",
]
SAMPLING_TESTS = ["tests/test_sampling.py"]


# ---------------------------------------------------------------- the bugs, planted in this process


def _replace(original, patched) -> None:
    """Put `patched` wherever an engine module holds `original` (its own module, and every `from x import name`)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("engine"):
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, patched)


def attention_temperature() -> None:
    """The capture path's attention 1% too hot (queries x 1.01): logits off by ~1e-2, greedy tokens kept."""
    from engine.forward import capture

    own = capture._eager
    capture._eager = lambda module: lambda m, q, *args, **kw: own(module)(m, q * 1.01, *args, **kw)


def cache_rolled_back_one_too_far() -> None:
    """A KV-cache off-by-one: undoing a pass (a timing repeat, a rejected proposal) forgets one position more."""
    from engine.forward.cache import roll_back

    _replace(roll_back, lambda cache, positions: roll_back(cache, positions + 1 if positions > 0 else positions))


def inverted_keep() -> None:
    """A speculative proposal kept with chance 1 - min(1, p/q) when that chance is fractional."""
    from engine.forward.sampling import Chooser

    coin = Chooser.coin
    Chooser.coin = lambda self, chance: coin(self, 1.0 - chance if 0.0 < chance < 1.0 else chance)


def residual_is_p() -> None:
    """After a rejection, the token is drawn from p itself instead of max(0, p - q), normalised."""
    from engine.generate.speculative import residual

    _replace(residual, lambda p, q: p)


def _without(kind: str):
    """Sampling's processors, less the transformers warper named `kind`."""
    from transformers import LogitsProcessorList

    from engine.forward.sampling import Sampling

    build = Sampling.processors
    Sampling.processors = lambda self: LogitsProcessorList(p for p in build(self) if type(p).__name__ != kind)


def temperature_ignored() -> None:
    """Sampling draws from softmax(logits), whatever the temperature."""
    _without("TemperatureLogitsWarper")


def top_k_ignored() -> None:
    """Sampling draws from every token, whatever top-k says."""
    _without("TopKLogitsWarper")


def remote_code_trusted() -> None:
    """A model's config is read with trust_remote_code on: the code in its folder runs."""
    from transformers import AutoConfig

    read = AutoConfig.from_pretrained.__func__
    AutoConfig.from_pretrained = classmethod(lambda cls, *a, **kw: read(cls, *a, **{**kw, "trust_remote_code": True}))


def probe_counts_half_the_flops() -> None:
    """The device probe counts a matmul's n³ multiply-adds as n³ FLOPs, not 2·n³: the roofline's peak halves."""
    from physics import roofline

    rate = roofline.best_rate
    roofline.best_rate = lambda fn, work, device, **how: rate(fn, work / 2 if work == 2 * 1024**3 else work, device,
                                                              **how)


def overhead_rule_at_8x() -> None:
    """A step up to 8x its larger bound is still labelled bound by it (the rule says 3x)."""
    from physics import roofline

    roofline.OVERHEAD = 8.0


def race_headline_untold() -> None:
    """The race's headline says "cannot be told apart" when the cached run's growth was measurably steeper."""
    from topics.race import measure

    said = measure.headline
    measure.headline = lambda s: re.sub(r"Here the cached run's time grew measurably faster.*Run again\.",
                                        "At this length the two growth rates cannot be told apart: run longer.",
                                        said(s))


def link_forgets_seed() -> None:
    """A copied link no longer carries the seed: a sampled run opened from it draws other tokens."""
    from ui import links

    links.LINK_KEYS.pop("seed")


def double_click_steps_twice() -> None:
    """Next token takes a step for a click made before the last step reached the screen (a double click: two)."""
    from ui.controller import Controller

    Controller._too_soon = lambda self: False


# ---- texts


def penalty_multiplies_positive() -> None:
    """The repetition penalty multiplies a seen token's positive logit (and divides a negative one): seen tokens
    gain where they should lose."""
    from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

    from engine.forward.sampling import Sampling

    build = Sampling.processors
    Sampling.processors = lambda self: LogitsProcessorList(
        RepetitionPenaltyLogitsProcessor(1.0 / p.penalty) if isinstance(p, RepetitionPenaltyLogitsProcessor) else p
        for p in build(self))


def penalty_on_unseen_tokens() -> None:
    """The repetition penalty is applied to every token of the vocabulary, seen or not."""
    import torch
    from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

    from engine.forward.sampling import Sampling

    class Everywhere:
        def __init__(self, penalty: float):
            self.penalty = penalty

        def __call__(self, input_ids, scores):
            return torch.where(scores < 0, scores * self.penalty, scores / self.penalty)

    build = Sampling.processors
    Sampling.processors = lambda self: LogitsProcessorList(
        Everywhere(p.penalty) if isinstance(p, RepetitionPenaltyLogitsProcessor) else p for p in build(self))


def penalty_reads_the_newest_token_only() -> None:
    """The generation loop hands the processors only the newest token, not every id so far: a repetition penalty
    forgets the prompt and all but the last token."""
    from engine.generate.loop import Sequence

    Sequence.choose = lambda self, logits, probs=True: self.chooser.choose(self.ids[:, -1:], logits, probs=probs)


def ladder_gap_per_prompt_token_twice() -> None:
    """The ladder's decode ÷ prefill per token divides the prefill's time by its prompt tokens twice (×s too big)."""
    from topics.ladder.record import RungResult

    RungResult.decode_vs_prefill_per_token = property(
        lambda r: r.decode.per_token_ms / (r.prefill.per_token_ms / r.prefill.tokens))


def rows_verdict_at_a_cut_off() -> None:
    """Lesson 9's reading of its bet gets back a verdict that flips at a cut-off (x1.15) a busy minute crosses."""
    from topics.speculative import measure

    said = measure.rows_cost_sentence

    def flipping(rows, verify, one, tokens_per_pass):
        ratio = verify.forward_ms / one.forward_ms
        return said(rows, verify, one, tokens_per_pass) + (" The extra rows cost about nothing." if ratio <= 1.15
                                                           else f" So here {rows} rows do not cost 'little more'.")

    measure.rows_cost_sentence = flipping


def head_labels_averaged() -> None:
    """The Attention view labels the newest query's row with each head's role averaged over every prefill row."""
    from drawing import views
    from drawing.head_roles import head_roles

    views.head_roles = lambda t, layer, ids, every_row=False: head_roles(t, layer, ids, every_row=True)


def c_over_the_verify_pass() -> None:
    """Speculative decoding's c is taken over the verify pass of k + 1 rows, not over a one-row target step."""
    from topics.speculative.measure import Comparison

    Comparison.cost_ratio_c = property(lambda m: m.draft_ms_per_proposed_token / m.verify_ms if m.verify_ms else 0.0)
# ---- budget
BUDGET_TESTS = "tests/test_budget.py::"


def fp8_scale_from_first_rows_out() -> None:
    """fp8's scale is set by the first rows that leave the full-precision window, not by the prompt (at B >= 128:
    one row, the start token, and later keys saturate)."""
    from topics.budget import quant

    calibrate, pack = quant.Fp8.calibrate, quant.Fp8.pack
    quant.Fp8.calibrate = lambda self, x, keys: None  # the prefill's call sets nothing

    def first_rows(self, x, keys):
        calibrate(self, x, keys)
        return pack(self, x, keys)

    quant.Fp8.pack = first_rows


def snap_pools_its_window() -> None:
    """SnapKV smooths over the observation window's own columns too, padding left out of the mean."""
    import torch

    from topics.budget import evict

    def pooled_with_window(grouped, window):
        b, kv_heads, group, q_len, k_len = grouped.shape
        seen = grouped[:, :, :, -window:, :].mean(dim=3)
        pooled = torch.nn.functional.avg_pool1d(seen.reshape(-1, 1, k_len), evict.KERNEL, stride=1,
                                                padding=evict.KERNEL // 2, count_include_pad=False)
        scores = pooled.view(b, kv_heads, group, k_len).mean(dim=2)
        scores[..., k_len - window:] = scores.max()
        return scores

    evict.snap_scores = pooled_with_window


def h2o_protects_the_oldest_half() -> None:
    """Heavy hitters protect the oldest B/2 positions instead of the newest."""
    from topics.budget import evict

    protected = evict.EvictingLayer.protected

    def oldest(self):
        if self.rule in ("heavy", "heavy-avg"):
            return self.positions < max(1, self.budget // 2)
        return protected(self)

    evict.EvictingLayer.protected = oldest


def heavy_avg_ranks_by_the_sum() -> None:
    """heavy-avg ranks by H2O's plain sum: never divided by the queries that could see a position."""
    from topics.budget import evict

    evict.EvictingLayer.ranked = lambda self: self.scores


def snap_evicts_while_decoding() -> None:
    """SnapKV as published keeps evicting while decoding (capped at B): it becomes snap-capped."""
    from topics.budget import evict

    observe = evict.EvictingLayer.observe

    def capped(self, weights):
        rule = self.rule
        self.rule = "snap-capped" if rule == "snap" else rule
        try:
            observe(self, weights)
        finally:
            self.rule = rule

    evict.EvictingLayer.observe = capped


def kl_the_wrong_way_round() -> None:
    """The damage's KL is KL(policy || full) instead of KL(full || policy)."""
    from topics.budget import measure
    from topics.budget.records import Forced

    def backwards(policy, budget, prompt_tokens, full, other):
        agree = (full.argmax(-1) == other.argmax(-1)).tolist()
        kl = (other.exp() * (other - full)).sum(-1).clamp(min=0).tolist()
        return Forced(policy, budget, prompt_tokens, tuple(bool(a) for a in agree), tuple(kl))

    measure.compare_forced = backwards


def kivi_values_per_channel() -> None:
    """KIVI groups values as it groups keys (per channel over 16 positions) instead of per position."""
    import dataclasses

    from topics.budget import quant

    pack, unpack = quant.Kivi.pack, quant.Kivi.unpack
    quant.Kivi.pack = lambda self, x, keys: dataclasses.replace(pack(self, x, True), keys=keys)
    quant.Kivi.unpack = lambda self, p, dtype: unpack(self, dataclasses.replace(p, keys=True), dtype)


# ---- physics


def ridge_from_the_cache() -> None:
    """The ridge read off the cache's rate (the fastest probed) instead of DRAM's: the in-cache roof called the ridge."""
    from physics.roofline import DeviceRoof

    DeviceRoof.ridge = property(lambda self: self.peak_flops / self.bandwidth)


def knee_one_row_early() -> None:
    """The measured knee reported at the timed row count before the one where the flat level and the slope meet."""
    import dataclasses

    from topics.ladder.curve import Curve

    knee = Curve.knee

    def early(self, kind, roof):
        k = knee(self, kind, roof)
        if k is None or k.measured is None:
            return k
        below = [p.rows for p in self.of(kind) if p.rows < k.measured]
        return dataclasses.replace(k, measured=float(below[-1])) if below else k

    Curve.knee = early


def recording_read_as_fp32() -> None:
    """A recorded ladder read back with 4 bytes an element, whatever dtype it records (the H200's bf16 read as fp32)."""
    from topics.ladder.record import Ladder

    read = Ladder.from_dict.__func__
    Ladder.from_dict = classmethod(lambda cls, d: read(cls, d | {"roof": d["roof"] | {"elem_bytes": 4.0}}))


def rope_from_theta_alone() -> None:
    """The lean pass's RoPE built from rope_theta alone, ignoring the model's own inv_freq (Llama-3's scaling lost)."""
    from engine.forward import lean

    build = lean.LeanLlama.__init__

    def init(self, model, max_batch, max_len):
        rotary = model.model.rotary_emb
        saved = rotary.inv_freq
        c = model.config
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        rotary.inv_freq = 1.0 / theta ** (torch_arange(0, hd, 2) / hd)
        try:
            build(self, model, max_batch, max_len)
        finally:
            rotary.inv_freq = saved

    lean.LeanLlama.__init__ = init


def torch_arange(*args):
    import torch

    return torch.arange(*args, dtype=torch.float32)


def batch_flops_of_one_sequence() -> None:
    """A decode step for n sequences charged one sequence's FLOPs: its intensity, and its knee, n times too low."""
    from topics.ladder import curve

    estimate = curve.estimates
    curve.estimates = lambda spec, kind, rows, context, elem: (
        (estimate(spec, kind, 1, context, elem)[0], estimate(spec, kind, rows, context, elem)[1]) if kind == "batch"
        else estimate(spec, kind, rows, context, elem))
def ratio_against_the_decode_step() -> None:
    """A pass over n rows compared with the rung's decode step (another kernel) instead of its own kind's first pass:
    the CPU recording's 8-row ratios read ×1.82 / ×2.08 instead of ×1.16 / ×1.33."""
    from topics.ladder.curve import DECODE, Curve

    Curve.base = lambda self, kind, rows: next(iter(self.of(DECODE)), None) if self.at(kind, rows) else None
    Curve.compare = lambda self, a, b: None if a is None or b is None else a.median_ms / b.median_ms


def batch_knee_from_the_prefill() -> None:
    """The batched decode's predicted knee taken from the prefill's (the ridge in rows), every sequence's K/V
    forgotten: a caption predicting the knee from the wrong kind."""
    from topics.ladder.curve import Curve

    Curve.batch_knee = lambda self, roof: Curve.predicted_knee(self, "prefill", roof)


def batch_knee_one_intensity() -> None:
    """The batched decode's knee with every sequence's K/V counted into one intensity (n · flops over the weights
    and all the K/V meeting the ridge), as if the attention's reads hid under the products' arithmetic: the model
    the H200 measured ×3 off. Both places that predict it (the Scale page's curve, the serving page's sentence)."""
    import physics.batched
    import topics.ladder.curve

    def one_intensity(weights, flops_each, more_each, ridge):
        return ridge * weights / (flops_each - ridge * more_each) if flops_each > ridge * more_each else math.inf

    physics.batched.weights_knee = topics.ladder.curve.weights_knee = one_intensity


def ratio_against_the_outlier() -> None:
    """n rows read against the one-row pass even where that pass is an outlier (slower than more rows): the CPU
    caption's 8-token prefill read ×1.16 the 1-token one, for a pass it then named an outlier."""
    from topics.ladder.curve import Curve

    def base(self, kind, rows):
        p = self.at(kind, rows)
        same = [q for q in self.of(kind) if p is not None and self.kernel(q) == self.kernel(p) and q.rows < rows]
        return same[0] if same else None

    Curve.base = base


def readmission_hits_unrowed() -> None:
    """A request back from a preemption finds its own blocks cached, and only the status line counts it: its row's
    prefix hits say 0 where the line said 32 (scenario 4)."""
    from engine.generate.serving.scheduler import Scheduler

    admit = Scheduler._admit_waiting

    def _admit_waiting(self, plan, budget):
        back = {r.id: r.prefix_hit_tokens for r in self.waiting if r.preemptions}
        admit(self, plan, budget)
        for r in self.running:
            if r.id in back and r.id in plan.prefix_hits:
                r.prefix_hit_tokens = back[r.id]

    Scheduler._admit_waiting = _admit_waiting


def short_probe_trusted() -> None:
    """A round's quick probe kept as the ceiling though a pass ran faster than it: the big prefills read as
    beating their compute bound (×0.94)."""
    from topics.ladder.curve import Curve

    Curve.probes_short = lambda self, p: False


def deadline_ignored() -> None:
    """The bytes part's time limit ignored: a lent GPU's call runs out in a compile and keeps nothing of it."""
    from topics.bytes import measure

    storages = measure.storages
    measure.storages = lambda *a, **k: storages(*a, **{**k, "deadline": None})


def warmup_among_the_samples() -> None:
    """A pass's warm-up run (a compile's first call) counted among its timed runs."""
    from engine.forward.run import Timing
    from topics.ladder.curve import RowsPass

    RowsPass.timing = lambda self: Timing(samples_ms=self.samples_ms + ((self.warmup_ms,) if self.warmup_ms else ()),
                                          warmup_ms=self.warmup_ms)


def curve_json_loses_its_rounds() -> None:
    """A curve read back from JSON with its per-round probes and kernels at their defaults."""
    from topics.ladder.curve import Curve

    read = Curve.from_dict.__func__
    Curve.from_dict = classmethod(lambda cls, d, roof: read(cls, {k: v for k, v in d.items() if k != "rounds"}
                                                            | {"points": [{k: v for k, v in p.items() if k != "kernel"}
                                                                          for p in d["points"]]}, roof))


def busy_note_from_one_pass() -> None:
    """The curve's busy/noise note judged from the first pass's spread alone."""
    import dataclasses

    from topics.ladder import curve_draw, notes

    note = notes.curve_note
    notes.curve_note = lambda curve: note(dataclasses.replace(curve, points=curve.points[:1]) if curve.points
                                          else curve)
    curve_draw.curve_note = notes.curve_note


def knee_check_one_sided() -> None:
    """gpu-check's knee target one-sided: a knee far before its prediction (n = 20 against ~190) reads 'yes'."""
    from topics.ladder.curve import Knee

    Knee.within = lambda self, factor: self.off is not None and self.off <= factor


def far_prefill_decided_by_the_last() -> None:
    """gpu-check's far-prefill target decided by the last pass past four knees, not the nearest its bound."""
    import dataclasses

    from benchmarks import gpu_check

    targets = gpu_check.curve_targets

    def last(curve, roof, label=""):
        rows = targets(curve, roof, label)
        knee = curve.predicted_knee("prefill", roof) if curve else None
        far = [p for p in (curve.of("prefill") if curve else ()) if knee and p.rows >= 4 * knee]
        return [dataclasses.replace(r, holds=gpu_check._over_compute(curve, far[-1]) <= gpu_check.FAR_BOUND)
                if far and "prefill pass of n ≥ 4×" in r.target else r for r in rows]

    gpu_check.curve_targets = last


def bound_from_the_dram_ridge() -> None:
    """The verdict names its bound from the intensity against DRAM's ridge, even where the bytes fit the cache."""
    from physics.roofline import Verdict

    Verdict.bound = property(lambda self: "compute" if self.intensity >= self.ridge else "memory")


def held_from_the_first_round() -> None:
    """A pass's ratio to its bound read off the first round alone, not the median over rounds."""
    from topics.ladder.curve import Curve, Held

    def first(self, p):
        ratios = p.round_ratios(self.rounds)
        return Held(median=ratios[0], low=min(ratios), high=max(ratios), rounds=len(ratios)) if ratios else None

    Curve.held = first


def level_averaged_with_the_one_row_pass() -> None:
    """The knee's flat level the mean of every pass below the predicted knee, the one-row outlier included."""
    import dataclasses
    import statistics

    from topics.ladder.curve import Curve

    knee = Curve.knee

    def mean(self, kind, roof):
        k = knee(self, kind, roof)
        if k is None or not k.predicted or k.slope_ms is None:
            return k
        flat = [p for p in self.of(kind) if p.rows < k.predicted]
        level = statistics.fmean(p.median_ms for p in flat)
        return dataclasses.replace(k, level_ms=level, measured=(level - k.intercept_ms) / k.slope_ms)

    Curve.knee = mean


# ---- serving


def prefix_hit_unchecked() -> None:
    """The prefix cache trusts a 64-bit hash: a block found by its prefix hash is taken whatever tokens it holds."""
    from engine.generate.serving.blocks import BlockManager

    BlockManager.holds = lambda self, block_id, token_ids: True


def tpot_counts_first_gap() -> None:
    """TPOT counts the wait for the first token as one more gap: (last token - arrival) / tokens made."""
    from dataclasses import replace

    from engine.generate.serving.run import ServingRun

    latency = ServingRun.latency

    def mutant(self, r):
        lat = latency(self, r)
        if lat.tpot_ms is None:
            return lat
        made = len(r.token_steps)
        return replace(lat, tpot_ms=(lat.ttft_ms + lat.tpot_ms * (made - 1)) / made)

    ServingRun.latency = mutant


def keys_read_without_new_rows() -> None:
    """A pass's keys read leave out the rows it writes: only the positions already in the pool are counted."""
    from engine.generate.serving.record import keys_read

    _replace(keys_read, lambda rows: sum(r.start for r in rows))


def static_batch_does_not_wait() -> None:
    """Static batching refills a freed slot at once, as continuous batching does: no batch waits for its longest."""
    from engine.generate.serving.scheduler import Scheduler

    Scheduler.has_slot = lambda self, r: self.max_seqs is None or len(self.running) < self.max_seqs


def batch_order_unchecked() -> None:
    """A decode pass of more sequences timed faster than one of fewer is drawn as it came, neither re-timed nor
    flagged (issue 42: B = 2 at 5 ms beside B = 1 at 9.3 ms, no word of a busy server)."""
    from topics.serving import measure

    measure._against_physics = lambda sizes, times: []


def sat_out_during_the_long_prompt_only() -> None:
    """The steps sat out are counted only from the long prompt's arrival on, while the timeline draws every one."""
    from dataclasses import replace

    from topics.serving import measure

    decode_stall = measure.decode_stall

    def mutant(run, long_id):
        stall = decode_stall(run, long_id)
        arrive = run.requests[int(long_id[1:])].arrive
        kept = {rid: tuple(k for k in v if k >= arrive) for rid, v in stall.sat_out.items()}
        return replace(stall, sat_out={rid: v for rid, v in kept.items() if v})

    measure.decode_stall = mutant

def paged_decodes_unmasked() -> None:
    """The one-call paged pass skips its mask whenever every request decodes one token, whatever their lengths: a
    shorter request reads its padding (the null slot's zeros) as keys of its own."""
    from engine.forward.paged import PagedPass

    mask = PagedPass.mask
    PagedPass.mask = lambda self, window, dtype: None if self.shape[1] == 1 else mask(self, window, dtype)


def paged_reads_the_previous_table() -> None:
    """The one-call paged pass reads each request's first block through the block table of the request before it."""
    from engine.forward.paged import PagedPass

    init = PagedPass.__init__

    def mutant(self, kv, rows):
        init(self, kv, rows)
        batch, _, max_kv = self.shape
        own = self.read.view(batch, max_kv)
        read = own.clone()
        for i in range(1, batch):
            n = min(kv.page_size, rows[i].start, rows[i - 1].kv_len)
            read[i, :n] = own[i - 1, :n]
        self.read = read.flatten()

    PagedPass.__init__ = mutant


def preemption_tie_toward_oldest() -> None:
    """'most_blocks' breaks a tie toward the oldest of the requests holding the most blocks, not the newest."""
    from engine.generate.serving.scheduler import Preemption, Scheduler

    victim = Scheduler.victim

    def mutant(self, plan):
        if self.preemption != Preemption.MOST_BLOCKS:
            return victim(self, plan)
        scheduled = {s.request.id for s in plan.rows}
        return max((q for q in self.running if q.id not in scheduled), key=lambda q: len(q.table))

    Scheduler.victim = mutant


def orders_from_the_shipped_order_only() -> None:
    """The every-order histogram is the shipped order again and again: no spread, the shipped ratio as its median."""
    from topics.serving import orders

    orders.shuffled = lambda requests, order: list(requests)


def ranking_ignores_intervals() -> None:
    """The budget's ranking calls two neighbours tied only when their intervals are identical, not when they overlap."""
    from topics.budget.records import Interval

    Interval.overlaps = lambda self, other: self == other


def bf16_rows_run_in_fp32() -> None:
    """The budget's bf16 rows are measured with the fp32 model: only their label says bf16."""
    from topics.budget import stories

    stories.in_dtype = lambda lm, dtype: lm
# ---- class


def class_picture_at_layer_zero() -> None:
    """A follower's stage is built for layer 0, whatever layer the lecturer picked (the phone's layout too)."""
    import classroom.hub as hub

    real = hub.stage_part
    hub.stage_part = lambda shared, at, layer, head, phone=False: real(shared, at, 0, head, phone)


def class_told_head_zero() -> None:
    """The class is told head 0 (its pictures drawn for it), whatever head the lecturer's stage draws."""
    from classroom.publisher import Publisher

    update = Publisher.update
    Publisher.update = lambda self, s, at, view, layer, head, fork, hold=None: update(self, s, at, view, layer, 0,
                                                                                      fork, hold)


def link_drops_zeros() -> None:
    """A link leaves out every zero (seed 0, top-k 0, temperature 0, step 0, layer 0, an empty stop list): opened,
    the defaults come back instead of the values on screen."""
    from ui import link_codec
    from ui import links as ui_links

    make = link_codec.make_link

    def dropping(settings: dict) -> dict:
        return make({k: v for k, v in settings.items() if v not in (0, "")})

    link_codec.make_link = ui_links.make_link = dropping


def fork_without_a_way_back() -> None:
    """A forked page has no link back to the class: the student can return only by typing the code again."""
    import classroom.page

    classroom.page.back_to_class = lambda follow_page: None


CLASS_PICTURE_TESTS = [
    "tests/test_class.py::test_a_followers_pictures_are_the_lecturers_own_at_the_layer_and_head_the_lecturer_picked",
    "tests/test_class.py::test_a_stream_starts_with_the_whole_state_then_gets_each_version_pushed",
    "tests/test_class.py::test_a_picture_asked_for_by_many_followers_at_once_is_built_once",
]


def newest_key_unlabelled() -> None:
    """Past 15 keys the attention axis names every k-th key and drops the newest, the query's own."""
    from drawing import attention

    attention.every_kth = lambda n, every: list(range(0, n, every))


def tie_called_faster() -> None:
    """Two throughputs within 1 % read 'continuous ×1.00 faster'."""
    from topics.serving import draw

    draw._faster = lambda a, b, a_name, b_name: (f"{a_name} ×{a / b:.2f} faster" if a >= b
                                                 else f"{b_name} ×{b / a:.2f} faster")


def bytes_target_lenient() -> None:
    """bytes_targets holds a decode ratio to ×1.0 (any step not slower passes) instead of its target's bound."""
    from benchmarks import bytes_targets

    own = bytes_targets._ratio
    bytes_targets._ratio = lambda rec, storage, kind, most=None, least=None, target="": own(
        rec, storage, kind, most=None if most is None else 1.0, least=least, target=target)


def storages_stacked() -> None:
    """Storages of the same bytes drawn at the same x again: bf16, fp16 and the bf16 model one blob on a projector."""
    from topics.bytes import figures

    figures.DODGE = 0.0


def bytes_said_to_follow() -> None:
    """int8 faster than bf16 but far from its bytes' share is called faster and nothing more: 'half the bytes, half
    the time', which the chart beside it contradicts."""
    from topics.bytes import draw

    draw.FOLLOWS = 100.0


def recordings_never_set_apart() -> None:
    """The bytes section's fp32 step and the curve's, timed on two days ×1.74 apart, shown with nothing between."""
    from topics.bytes import draw

    draw.other_recording = lambda rec, curve: ""


def side_against_the_dram_ridge_only() -> None:
    """A step whose bytes fit the cache is put on THE ridge's side alone: 'the memory side' beside a compute bound
    larger than its memory bound."""
    from physics import roofline

    roofline.cache_side = lambda intensity, bytes_moved, roof, mark=str: ""


def mask_summed_from_the_blanks() -> None:
    """Lesson 2's weight above the diagonal read from the picture's blanks again: 0 whatever the model wrote."""
    from drawing import attention

    attention.masked_weight = lambda t, layer, head: 0.0


def one_round_names_a_cause() -> None:
    """A throughput difference one round measured, or rounds on both sides of ×1, called clear and given a cause."""
    from topics.serving import draw

    draw.clear = lambda rounds: True


def near_tie_names_a_key() -> None:
    """A head whose two largest weights are 0.36 and 0.35 'looks at' the first."""
    from drawing import head_roles

    head_roles.SPLIT_GAP = 0.0


def one_story_gap_a_rule() -> None:
    """The two heavy-hitter scores' gap on one story called a rule, whatever the stories' intervals say."""
    from topics.budget import draw

    draw.scores_words = lambda heavy, avg, spread: (
        f"Evicting by heavy hitters agrees on **{heavy.forced.agreement:.1%}** of next tokens when they are "
        f"scored by H2O's plain sum, and on **{avg.forced.agreement:.1%}** when each position's sum is divided "
        "by the queries that could see it (kvpress's score): "
        "which positions count as heavy depends on how you score them.")


def rest_a_fixed_cost() -> None:
    """The bundled model's rest called a fixed cost again, and bigger rungs said to show the physics whatever their
    own verdict (the H200's largest readable step was still overhead-bound)."""
    from topics.ladder import draw

    draw._rest_ms = lambda r: 0.0
    draw._bigger_words = lambda ladder, own: "Bigger rungs show the physics."


def gap_off_the_rule_unsaid() -> None:
    """Each measured per-token gap beside the rule with nothing to say it is ×1.3-2.25 the rule, or why."""
    from topics.ladder import draw

    draw._against_rule = lambda gap, rule, decode, prefill, name=False: f"the rule: ×{rule:.0f}"


def window_damage_one_story_bare() -> None:
    """The window's damage quoted from one story, bare, beside a recording of eight."""
    from topics.bytes import draw

    draw._window_damage = lambda w: f"top-1 agreement {w.agreement:.1%}, KL {w.kl_mean:.3f} nats ({w.source})."


def batch_read_against_its_own_graph() -> None:
    """A CPU curve's batch ratio read against the one-sequence step, which ran on n = 1's graph of its own."""
    from topics.ladder.curve import Curve

    Curve.one_apart = property(lambda self: False)


def one_probe_called_now() -> None:
    """This server's roof, one short probe on a busy VM, called 'measured now' with nothing about how it reads."""
    from topics.ladder import scale_draw

    scale_draw._probes = lambda here: "measured now"


def zero_called_rounding() -> None:
    """A difference of zero said to be within 0, by float rounding."""
    from drawing import differences

    differences.cache_match_words = lambda k, v: (f"keys within **{k:.1g}** and values within **{v:.1g}** of what "
                                                  "the cache holds (float rounding)")
    differences.logit_gap_words = lambda d: f"{d:.2g} (floating-point rounding; the computation order differs)"


def draft_drafts_for_itself() -> None:
    """The draft model, loaded as the target, drafts for itself in lesson 9 and unsaid on the Speculative page."""
    from lessons import l09_speculative
    from topics.speculative import page_parts

    page_parts.drafts_itself = l09_speculative.drafts_itself = lambda choice, lm: False


def poll_forgets_its_step() -> None:
    """A follower's question arrives without the step it is about: looking back, it shows under any step."""
    from classroom.poll import Polls

    public = Polls.public
    Polls.public = lambda self, code: {k: v for k, v in (public(self, code) or {}).items() if k != "at"} or None


def bytes_faster_below_one() -> None:
    """Bytes are time: any time under fp32's is called "faster" (×0.97 too), not only under ×0.9."""
    from topics.bytes import draw

    draw.verdict = lambda ratio: "not measured" if ratio is None else "faster" if ratio < 1 else "slower"


def int8_scales_uncounted() -> None:
    """The int8 storage's bytes count its int8 codes only, not the fp32 scale each row carries."""
    from topics.bytes import storage

    count = storage.nbytes
    storage.nbytes = lambda t: count(t.q) if isinstance(t, storage.NarrowWeight) else count(t)


def crossing_at_the_slope_over_intercept() -> None:
    """The context where the K/V's time reaches the weights' read as slope / intercept, not intercept / slope."""
    from topics.bytes.records import Line

    Line.crossing = property(lambda self: self.slope_ms / self.intercept_ms)


def flash_decode_one_past() -> None:
    """The CPU decode kernel attends one position past the step's own (a cache read off by one)."""
    from engine.forward import flash_decode

    attend = flash_decode.attend
    flash_decode.attend = lambda q, k, v, input_pos, kv_len: attend(q, k, v, input_pos + 1, kv_len)


def slope_against_the_roof() -> None:
    """The context's slope predicted from the roof's read even where the cache's own read was probed."""
    from topics.bytes.records import Rates

    init = Rates.__init__
    Rates.__init__ = lambda self, read, peaks, cache=0.0: init(self, read, peaks, 0.0)


def contexts_warmed_once() -> None:
    """The context steps timed right after their own two first calls: no second warm-up once every graph is made
    (the H200's first recording timed a CUDA graph's warm-up and recording)."""
    from topics.bytes import measure

    warm = measure._warm
    seen = set()

    def once(fn, ids, pos, *more):
        key = (id(fn), tuple(more))
        if more and key in seen:
            return 0.0, 0.0
        seen.add(key)
        return warm(fn, ids, pos, *more)

    measure._warm = once


def every_event_a_kernel() -> None:
    """The time "inside the kernels" summed over every event the profiler recorded, Python and the attention's
    op included: the step's split would put nothing outside."""
    import statistics

    import torch

    from topics.bytes import measure

    def every(fn, args, runs: int = 3):
        inside, whole = [], []
        for _ in range(runs):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                whole.append(measure.run_once(fn, *args))
            inside.append(sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e3)
        return statistics.median(inside), statistics.median(whole)

    measure.in_kernels_ms = every


def outside_from_another_run() -> None:
    """The time outside the kernels taken from the rounds' median instead of the profiled calls the kernels' time
    came from: two runs' figures subtracted."""
    from topics.bytes.records import Pass

    Pass.outside_ms = property(lambda self: max(self.median_ms - self.kernels_ms, 0.0) if self.kernels_ms else 0.0)


def int8_in_gpt_fasts_form() -> None:
    """int8 weight-only several rows as `F.linear(x, q.to(x.dtype)) * scales`: the form inductor swaps for
    torch's slow `_weight_int8pack_mm` (5.9 s for a 384-token prefill on the H200)."""
    import torch.nn.functional as F

    from topics.bytes import storage

    forward = storage.NarrowWeight.forward

    def gpt_fast(self, x):
        if self.scale is None or x.shape[:-1].numel() == 1:
            return forward(self, x)
        return F.linear(x, self.q.to(x.dtype)) * self.scale

    storage.NarrowWeight.forward = gpt_fast


def int4_halves_swapped() -> None:
    """The GPU's int4 packing with a group's two halves swapped (weight t high, t + GROUP/2 low), which its kernel
    then reads as if they were not: every int4 product on a GPU multiplies the wrong half of x."""
    import torch

    from topics.bytes import gpu_kernels

    def swapped(steps):
        g = steps.to(torch.uint8).view(steps.shape[0], -1, 2, gpu_kernels.GROUP // 2)
        return (g[:, :, 1] | g[:, :, 0] << 4).view(steps.shape[0], -1)

    gpu_kernels.pack_int4 = swapped


def int8_scale_dropped() -> None:
    """The GPU's one-row int8 product without its rows' scales (the kernel handed ones)."""
    import torch

    from topics.bytes import gpu_kernels

    own = gpu_kernels.int8_rows
    gpu_kernels.int8_rows = lambda x, q, scale: own(x, q, torch.ones_like(scale))


def blocks_out_of_order() -> None:
    """The one-row product's blocks of rows joined in the wrong order (each output given another block's sums)."""
    from engine.forward import streamed

    own = streamed.rows_times

    def rows_times(x, w, streams=None):
        y, blocks = own(x, w, streams), streams or streamed.STREAMS
        return y if w.shape[0] % blocks else y.view(-1, blocks, w.shape[0] // blocks).flip(1).view(y.shape)

    streamed.rows_times = rows_times


MUTANTS = {  # name -> (plant it, the fast-tier tests meant to kill it)
    "blocks-out-of-order": (blocks_out_of_order, [
        "tests/test_lean.py::test_the_one_row_product_read_in_blocks_gives_every_output_its_own_row_times_x",
        "tests/test_lean.py::test_the_lean_pass_gives_the_bundled_llamas_own_logits_at_prefill_and_every_decode_step"]),
    "attention-temperature": (attention_temperature, REFERENCE_TESTS),
    "int4-halves-swapped": (int4_halves_swapped, [
        "tests/test_gpu_kernels.py::test_int4_kernel_gives_the_stored_groups_times_x"]),
    "int8-scale-dropped": (int8_scale_dropped, [
        "tests/test_gpu_kernels.py::test_a_compiled_pass_calls_the_kernels_inside_its_graph"]),
    "newest-key-unlabelled": (newest_key_unlabelled, [
        "tests/test_figures.py::test_the_heatmap_labels_every_key_up_to_15_then_evenly_spaced_ones_and_always_the_newest"]),
    "tie-called-faster": (tie_called_faster, ["tests/test_sentences.py::test_a_tie_in_throughput_is_called_a_tie_not_x1_00_faster"]),
    "bytes-target-lenient": (bytes_target_lenient, [
        "tests/test_bytes_targets.py::test_a_bf16_decode_made_slower_or_faster_flips_its_verdict_and_the_exit_code"]),
    "storages-stacked": (storages_stacked, [
        "tests/test_bytes.py::test_storages_of_the_same_bytes_are_drawn_side_by_side_and_the_axis_says_so"]),
    "bytes-said-to-follow": (bytes_said_to_follow, [
        "tests/test_bytes.py::test_int8_faster_than_bf16_but_far_from_its_bytes_says_its_time_did_not_follow_them"]),
    "recordings-never-set-apart": (recordings_never_set_apart, [
        "tests/test_bytes.py::test_a_step_another_recording_timed_apart_on_the_same_machine_kind_is_said_with_both_figures"]),
    "side-against-the-dram-ridge-only": (side_against_the_dram_ridge_only, [
        "tests/test_scale.py::test_a_step_that_fits_the_cache_is_never_put_on_a_side_its_own_bounds_contradict"]),
    "mask-summed-from-the-blanks": (mask_summed_from_the_blanks, [
        "tests/test_lessons.py::test_the_weight_above_the_diagonal_is_read_from_the_recorded_pattern_not_the_pictures_blanks"]),
    "one-round-names-a-cause": (one_round_names_a_cause, [
        "tests/test_serving_page.py::test_a_throughput_ranking_from_rounds_that_disagree_is_no_clear_difference"]),
    "near-tie-names-a-key": (near_tie_names_a_key, [
        "tests/test_head_roles.py::test_a_row_whose_two_largest_weights_nearly_tie_names_no_one_key"]),
    "one-story-gap-a-rule": (one_story_gap_a_rule, [
        "tests/test_budget.py::test_the_two_heavy_hitter_scores_gap_on_one_story_is_called_a_rule_only_where_the_stories_set_them_apart"]),
    "poll-forgets-its-step": (poll_forgets_its_step, [
        "tests/test_class.py::test_a_question_carries_the_step_it_is_about_to_the_followers_open_and_revealed"]),
    "cache-off-by-one": (cache_rolled_back_one_too_far, REFERENCE_TESTS),
    "inverted-keep": (inverted_keep, SPECULATIVE_SAMPLING_TESTS),
    "residual-is-p": (residual_is_p, SPECULATIVE_SAMPLING_TESTS),
    "temperature-ignored": (temperature_ignored, SAMPLING_TESTS),
    "top-k-ignored": (top_k_ignored, SAMPLING_TESTS),
    "remote-code-trusted": (remote_code_trusted, ["tests/test_loading.py::test_remote_code_is_refused_and_never_runs"]),
    "probe-half-flops": (probe_counts_half_the_flops,
                         ["tests/test_scale.py::test_device_probe_counts_the_work_it_times"]),
    "overhead-rule-8x": (overhead_rule_at_8x, [
        "tests/test_fidelity.py::test_no_step_is_labelled_memory_bound_when_its_time_is_more_than_3x_its_memory_bound"]),
    "race-headline-untold": (race_headline_untold,
                             ["tests/test_race.py::test_the_headline_never_claims_more_than_the_fit"]),
    "link-forgets-seed": (link_forgets_seed,
                          ["tests/test_app.py::test_a_sampled_runs_link_reproduces_its_text_and_stage"]),
    "double-click-two-steps": (double_click_steps_twice, [
        "tests/test_odd_input.py::test_a_click_made_before_the_last_step_reached_the_screen_takes_no_step"]),
    # texts
    "penalty-multiplies-positive": (penalty_multiplies_positive, SAMPLING_TESTS),
    "penalty-on-unseen-tokens": (penalty_on_unseen_tokens, SAMPLING_TESTS),
    "penalty-reads-newest-only": (penalty_reads_the_newest_token_only, [
        "tests/test_sampling.py::test_a_penalised_greedy_run_reads_every_id_so_far_as_transformers_generate_does"]),
    "ladder-gap-twice-per-token": (ladder_gap_per_prompt_token_twice, [
        "tests/test_ladder.py::test_the_decode_prefill_gap_is_said_as_a_rule_with_this_devices_ridge_and_the_gpus",
        "tests/test_ladder.py::test_captions_say_what_the_numbers_say_even_when_decode_is_cheaper"]),
    "rows-verdict-cut-off": (rows_verdict_at_a_cut_off, [
        "tests/test_fidelity.py::test_the_extra_rows_sentence_says_the_ratio_and_its_implication_in_the_same_words_"
        "whatever_the_ratio",
        "tests/test_lessons.py::test_lesson_9_says_the_measured_ratio_of_its_bet_and_what_it_implies_without_a_cut_off"]),
    "head-labels-averaged": (head_labels_averaged, [
        "tests/test_head_roles.py::test_at_a_prefill_each_heads_label_says_where_the_row_drawn_beside_it_peaks"]),
    "c-over-verify-pass": (c_over_the_verify_pass, [
        "tests/test_speculative.py::test_the_papers_formula_uses_its_own_c_and_each_correction_is_read_off_the_run"]),
    # physics
    "ridge-from-the-cache": (ridge_from_the_cache, [
        "tests/test_ridge.py::test_the_scale_page_and_the_lessons_quote_one_ridge_for_this_device"]),
    "knee-one-row-early": (knee_one_row_early, [
        "tests/test_curve.py::test_the_knee_is_where_the_flat_level_and_the_slope_meet"]),
    "recording-read-as-fp32": (recording_read_as_fp32, [
        "tests/test_curve.py::test_the_recorded_gpu_ladder_is_read_back_in_bfloat16"]),
    "rope-from-theta-alone": (rope_from_theta_alone, [
        "tests/test_lean.py::test_llama_3_rope_scaling_is_read_from_the_models_own_frequencies"]),
    "batch-flops-of-one-sequence": (batch_flops_of_one_sequence, [
        "tests/test_curve.py::test_a_pass_over_n_rows_is_charged_n_rows_of_arithmetic_and_its_weights_once"]),
    "ratio-against-decode-step": (ratio_against_the_decode_step, [
        "tests/test_curve.py::test_a_ratio_compares_passes_of_one_kernel_and_says_which",
        "tests/test_curve.py::test_the_cpu_recordings_knees_ratios_and_captions_are_pinned"]),
    "batch-knee-from-prefill": (batch_knee_from_the_prefill, [
        "tests/test_curve.py::test_a_batchs_knee_adds_every_sequences_kv_read_and_is_its_own",
        "tests/test_curve.py::test_the_h200_recordings_knees_gap_cache_and_shares_are_pinned"]),
    "batch-knee-one-intensity": (batch_knee_one_intensity, [
        "tests/test_curve.py::test_a_batchs_knee_adds_every_sequences_kv_read_and_is_its_own",
        "tests/test_curve.py::test_the_h200_batch_knee_is_predicted_from_the_published_shape_and_measured_near_it",
        "tests/test_serving_page.py::test_the_batch_roofline_places_each_measured_pass_and_a_gpus_prediction_labelled_so"]),
    "ratio-against-the-outlier": (ratio_against_the_outlier, [
        "tests/test_curve.py::test_the_cpu_recordings_knees_ratios_and_captions_are_pinned"]),
    "readmission-hits-unrowed": (readmission_hits_unrowed, [
        "tests/test_serving_page.py::test_the_status_lines_skipped_tokens_are_the_requests_prefix_hits_added_up"]),
    "short-probe-trusted": (short_probe_trusted, [
        "tests/test_curve.py::test_gpu_check_on_the_shipped_h200_recording_says_each_figure_and_which_hold"]),
    "deadline-ignored": (deadline_ignored, [
        "tests/test_bytes.py::test_a_bytes_run_out_of_time_keeps_the_reference_and_says_what_it_left_out"]),
    "warmup-among-samples": (warmup_among_the_samples, [
        "tests/test_curve.py::test_the_cpu_recordings_knees_ratios_and_captions_are_pinned",
        "tests/test_curve.py::test_the_h200_recordings_knees_gap_cache_and_shares_are_pinned"]),
    "curve-json-loses-rounds": (curve_json_loses_its_rounds, [
        "tests/test_curve.py::test_the_whole_curve_survives_its_json"]),
    "busy-note-from-one-pass": (busy_note_from_one_pass, [
        "tests/test_curve.py::test_a_wide_spread_on_any_pass_is_said_on_the_chart"]),
    "knee-check-one-sided": (knee_check_one_sided, [
        "tests/test_curve.py::test_gpu_checks_targets_catch_the_passes_planted_in_the_h200_recording"]),
    "far-prefill-by-last": (far_prefill_decided_by_the_last, [
        "tests/test_curve.py::test_gpu_checks_targets_catch_the_passes_planted_in_the_h200_recording"]),
    "bound-from-dram-ridge": (bound_from_the_dram_ridge, [
        "tests/test_curve.py::test_a_verdict_whose_bytes_fit_the_cache_names_the_larger_bound_not_the_dram_ridges_side"]),
    "held-from-first-round": (held_from_the_first_round, [
        "tests/test_curve.py::test_each_ratio_to_a_bound_is_the_median_of_the_rounds_own"]),
    "level-with-one-row-outlier": (level_averaged_with_the_one_row_pass, [
        "tests/test_curve.py::test_a_one_row_outlier_is_drawn_and_named_and_never_the_level"]),
    # budget
    "fp8-scale-first-rows-out": (fp8_scale_from_first_rows_out, [
        BUDGET_TESTS + "test_fp8_rounds_a_run_within_1_5x_of_transformers_fp8_layer_on_the_same_tensors"]),
    "snap-pools-its-window": (snap_pools_its_window, [
        BUDGET_TESTS + "test_every_eviction_rule_keeps_what_its_hand_written_paper_rule_keeps"]),
    "h2o-protects-oldest-half": (h2o_protects_the_oldest_half, [
        BUDGET_TESTS + "test_every_eviction_rule_keeps_what_its_hand_written_paper_rule_keeps"]),
    "heavy-avg-ranks-by-sum": (heavy_avg_ranks_by_the_sum, [
        BUDGET_TESTS + "test_every_eviction_rule_keeps_what_its_hand_written_paper_rule_keeps"]),
    "snap-evicts-while-decoding": (snap_evicts_while_decoding, [
        BUDGET_TESTS + "test_every_eviction_rule_keeps_what_its_hand_written_paper_rule_keeps"]),
    "kl-wrong-way-round": (kl_the_wrong_way_round, [
        BUDGET_TESTS + "test_kl_and_agreement_are_the_textbook_ones_recomputed_by_hand"]),
    "kivi-values-per-channel": (kivi_values_per_channel, [
        BUDGET_TESTS + "test_kivi_rounds_each_number_to_within_half_a_step_and_int4_packs_two_a_byte"]),
    # serving
    "prefix-hit-unchecked": (prefix_hit_unchecked, [
        "tests/test_serving.py::test_a_prefix_hit_is_checked_against_the_blocks_token_ids",
        "tests/test_serving.py::test_a_request_whose_prefix_hash_collides_computes_its_own_keys"]),
    "tpot-counts-first-gap": (tpot_counts_first_gap, [
        "tests/test_serving.py::test_the_record_says_what_each_step_did",
        "tests/test_serving.py::test_cli_serve_json_has_the_same_keys_and_plain_string_values"]),
    "keys-read-without-new-rows": (keys_read_without_new_rows, [
        "tests/test_serving.py::test_the_record_says_what_each_step_did",
        "tests/test_serving.py::test_keys_read_count_shared_and_recomputed_positions_as_their_requests_hold_them",
        "tests/test_serving.py::test_cli_serve_json_has_the_same_keys_and_plain_string_values"]),
    "static-batch-does-not-wait": (static_batch_does_not_wait, [
        "tests/test_serving.py::test_static_batching_waits_for_its_longest_member_and_continuous_refills_a_slot_the_next_pass"]),
    "batch-order-unchecked": (batch_order_unchecked, [
        "tests/test_serving.py::test_a_batch_timed_faster_than_a_smaller_one_is_timed_again_and_flagged_if_it_stays_so"]),
    "sat-out-during-the-long-prompt-only": (sat_out_during_the_long_prompt_only, [
        "tests/test_serving_page.py::test_the_steps_sat_out_are_counted_drawn_and_written_from_the_same_records"]),
    "paged-decodes-unmasked": (paged_decodes_unmasked, [
        "tests/test_serving_paged.py::test_a_request_reads_no_block_outside_its_own_table"]),
    "paged-reads-previous-table": (paged_reads_the_previous_table, [
        "tests/test_serving_paged.py::test_a_request_reads_no_block_outside_its_own_table"]),
    "preemption-tie-toward-oldest": (preemption_tie_toward_oldest, [
        "tests/test_serving_pool.py::test_most_blocks_breaks_a_tie_toward_the_newest_and_newest_is_the_last_admitted"]),
    "orders-shipped-only": (orders_from_the_shipped_order_only, [
        "tests/test_serving_orders.py::test_the_shipped_order_is_the_most_favourable_and_the_median_order_still_wins"]),
    "ranking-ignores-intervals": (ranking_ignores_intervals, [
        BUDGET_TESTS + "test_the_ranking_says_tied_exactly_where_the_intervals_overlap"]),
    "bf16-rows-run-in-fp32": (bf16_rows_run_in_fp32, [
        BUDGET_TESTS + "test_the_bf16_rows_run_the_model_and_the_cache_in_bf16"]),
    # class
    "class-picture-layer-0": (class_picture_at_layer_zero, CLASS_PICTURE_TESTS),
    "class-told-head-0": (class_told_head_zero, CLASS_PICTURE_TESTS[:2]),
    "link-drops-zeros": (link_drops_zeros, ["tests/test_links.py"]),
    "fork-without-way-back": (fork_without_a_way_back, [
        "tests/test_class.py::test_a_forked_page_links_back_to_the_lecturers_live_step_until_the_class_ends"]),
    # the physics' sentences against their own records
    "rest-a-fixed-cost": (rest_a_fixed_cost, [
        "tests/test_ladder.py::test_the_bundled_models_sentence_says_what_the_largest_rung_measured_not_a_fixed_rest"]),
    "gap-off-the-rule-unsaid": (gap_off_the_rule_unsaid, [
        "tests/test_ladder.py::test_every_measured_gap_says_how_far_it_is_off_the_rule_and_which_pass_ran_further_above"
        "_its_bound"]),
    "window-damage-one-story-bare": (window_damage_one_story_bare, [
        "tests/test_bytes.py::test_the_windows_damage_is_quoted_with_its_spread_over_the_recorded_stories_not_one"
        "_storys_alone"]),
    "batch-read-against-its-own-graph": (batch_read_against_its_own_graph, [
        "tests/test_curve.py::test_the_cpu_recordings_knees_ratios_and_captions_are_pinned"]),
    "one-probe-called-now": (one_probe_called_now, [
        "tests/test_ridge.py::test_this_servers_roof_says_how_many_probes_set_it_and_that_a_busy_one_reads_low"]),
    "zero-called-rounding": (zero_called_rounding, [
        "tests/test_readable.py::test_a_difference_of_zero_is_said_to_be_identical_never_rounding"]),
    "draft-drafts-for-itself": (draft_drafts_for_itself, [
        "tests/test_lessons.py::test_lesson_9_never_lets_the_draft_model_draft_for_itself"]),
    # bytes are time
    "bytes-faster-below-one": (bytes_faster_below_one, [
        "tests/test_bytes.py::test_a_bf16_decode_that_did_not_speed_up_is_never_called_faster"]),
    "int8-scales-uncounted": (int8_scales_uncounted, [
        "tests/test_bytes.py::test_bytes_read_are_counted_from_the_tensors_the_pass_holds"]),
    "crossing-slope-over-intercept": (crossing_at_the_slope_over_intercept, [
        "tests/test_bytes.py::test_the_fit_finds_the_slope_intercept_and_crossing_of_a_known_line"]),
    "flash-decode-one-past": (flash_decode_one_past, [
        "tests/test_flash_decode.py::test_the_kernel_never_reads_a_position_past_the_steps_own"]),
    "slope-against-the-roof": (slope_against_the_roof, [
        "tests/test_bytes.py::test_the_slope_is_predicted_from_the_caches_own_read_with_the_roofs_and_the_arithmetics_beside_it"]),
    "contexts-warmed-once": (contexts_warmed_once, [
        "tests/test_bytes.py::test_every_context_is_run_twice_more_after_the_last_graph_is_made_before_any_is_timed"]),
    "int8-in-gpt-fasts-form": (int8_in_gpt_fasts_form, [
        "tests/test_bytes.py::test_int8_products_never_take_the_form_inductor_swaps_for_torchs_slow_int8_kernel"]),
    "every-event-a-kernel": (every_event_a_kernel, [
        "tests/test_bytes.py::test_a_compiled_steps_time_in_inductors_kernels_is_timed_apart_from_the_rest"]),
    "outside-from-another-run": (outside_from_another_run, [
        "tests/test_bytes.py::test_a_step_split_into_its_products_and_the_rest_says_which_shrank_with_the_bytes"]),
}


def pytest_configure(config) -> None:
    """As a pytest plugin: plant the mutant DECODE_LAB_MUTANT names (none: the control run)."""
    name = os.environ.get(ENV)
    if name:
        MUTANTS[name][0]()


# ---------------------------------------------------------------- the runner


def run_tests(tests: list[str], mutant: str | None) -> tuple[int, list[str], str]:
    """pytest in a subprocess, one process, fast tier only, a mutant's run stopping at its first failure:
    (exit code, the failed test ids, the output). The cache is off, so `--lf` never replays a mutant's failures."""
    env = {k: v for k, v in os.environ.items() if k != ENV} | ({ENV: mutant} if mutant else {})
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "tools.mutants", "-p", "no:cacheprovider",
           "-m", FAST, "-rf", *(["-x"] if mutant else []), *tests]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    return done.returncode, re.findall(r"^FAILED (.+?)(?: - .*)?$", out, flags=re.MULTILINE), out


def main(argv: list[str]) -> int:
    from engine.timing import now

    if argv == ["--list"]:
        for name, (plant, tests) in MUTANTS.items():
            print(f"{name}: {plant.__doc__}\n    " + "\n    ".join(tests))
        return 0
    names = argv or list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        print(f"unknown mutant(s) {unknown}; known: {', '.join(MUTANTS)}", file=sys.stderr)
        return 2
    every_test = list(dict.fromkeys(t for n in names for t in MUTANTS[n][1]))
    t0 = now()
    code, failed, out = run_tests(every_test, None)
    if code != 0:
        print(out[-3000:] + f"\nwith no bug planted the tests do not pass (exit {code}): fix them first.")
        return 2
    print(f"{'(nothing planted)':24} all pass  ({now() - t0:.0f} s)")
    survivors = []
    for name in names:
        t0 = now()
        code, failed, out = run_tests(MUTANTS[name][1], name)
        took = f"({now() - t0:.0f} s)"
        if code == 1 and failed:
            print(f"{name:24} killed by {failed[0]}  {took}")
        else:
            survivors.append(name)
            why = "SURVIVED: every test passed" if code == 0 else f"did not run (pytest exit {code}):\n{out[-2000:]}"
            print(f"{name:24} {why}  {took}")
    print(f"{len(names) - len(survivors)} of {len(names)} mutants killed" +
          (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
