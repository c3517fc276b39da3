"""Does speculative decoding pay on this machine? Plain vs speculative decoding of the same prompt, measured.

Measured, not derived: the acceptance rate α, the cost ratio c of a draft step to a one-row target step (the
paper's c), what the verify pass over k + 1 rows costs in one-row steps (r), the time outside the passes, the
speed-up. The formula's prediction (Leviathan et al. 2023, E/(k·c+1)) is computed from the measured α and c and
labelled so, then corrected step by step for what it assumes away (`corrected_speedup`: r, then the overheads);
`verdict` reads the numbers back in plain English and says which one explains the outcome.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from drawing.caveats import BUSY, WIDE
from engine.errors import StepError
from engine.forward.run import Timing
from engine.forward.sampling import Sampling
from engine.generate.drafters import DraftModel, PromptLookup
from engine.generate.speculative import Speculator
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel
from engine.timing import timed


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """E = (1 - α^(k+1)) / (1 - α): tokens one verify pass yields when each proposal is kept with chance α."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. 2023: E / (k·c + 1), c = one draft step's cost over one ONE-ROW target step's (their c: the
    verify pass over k + 1 rows is assumed to cost what one row costs)."""
    return expected_tokens_per_pass(alpha, k) / (k * c + 1.0)


def corrected_speedup(alpha: float, k: int, c: float, r: float = 1.0, round_extra: float = 0.0,
                      step_extra: float = 0.0) -> float:
    """The paper's formula with what it leaves out, every cost in one-row target steps:

        E · (1 + step_extra) / (k·c + r + round_extra)

    r            the verify pass over k + 1 rows against a one-row step (the paper: 1; a small model on a CPU: more)
    round_extra  each round's time outside the passes (judging, cropping both caches, bookkeeping)
    step_extra   a plain decode step's time outside its pass (sampling, bookkeeping): plain decoding pays it too
    With r = 1 and no extras it is `predicted_speedup`."""
    return expected_tokens_per_pass(alpha, k) * (1.0 + step_extra) / (k * c + r + round_extra)


@dataclass(frozen=True)
class Comparison:
    """Plain decoding against speculative decoding of one prompt, measured in this process (`measure`).

    The fields are what was measured or counted; every ratio (the speed-up, c, r, the formula's predictions) is a
    property computed from them, so a page, the CLI and a test all read one definition. `to_dict()` is the JSON the
    CLI writes."""

    target: str
    drafter: str
    k: int
    prompt: str
    new_tokens: int
    stop_strings: tuple[str, ...]
    stop_reason: str | None  # the last speculative run's
    device: str
    sampling: str  # Sampling.describe()
    text: str  # the last speculative run's
    generated_ids: tuple[int, ...]  # the last speculative run's
    plain_ids: tuple[int, ...]  # the last plain run's
    proposed: int  # over every timed speculative run's rounds
    checked: int  # proposals the target judged: the accepted ones and each round's first rejected one
    accepted: int
    rounds_timed: int  # verify rounds over every timed speculative run
    tokens_made: int  # tokens those rounds appended
    target_passes: int  # the last speculative run's: 1 prefill + its verify passes
    plain_target_passes: int  # the last plain run's: 1 prefill + one decode pass per token
    plain_ms_per_token_runs: tuple[float, ...]  # each timed plain run: decode wall time per generated token
    speculative_ms_per_token_runs: tuple[float, ...]
    draft_ms_total: float  # every draft pass (or lookup) of every timed round
    verify_ms: float  # median verify pass over the timed rounds that fed k + 1 rows (every round's if none did)
    verify_rows: int  # the rows those passes fed: k + 1, or the median fed when no round proposed k
    verify_rounds: int  # the rounds that median is over
    plain_decode_ms: float  # median one-row decode pass of the plain runs (0.0: none ran)
    overhead_ms_per_round: float  # median, per round: wall time outside the draft and verify passes
    plain_overhead_ms_per_step: float  # median, per plain step: wall time outside its pass
    repeats: int
    warmup: str
    rounds: tuple  # the last speculative run's RoundTraces (engine.generate.speculative), prefill first

    # ---- counted
    @property
    def identical(self) -> bool:
        return self.generated_ids == self.plain_ids

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    @property
    def alpha(self) -> float | None:
        """The formula's α: the chance that a proposal the target looks at is kept. Proposals after a rejection are
        never looked at, so accepted / proposed would understate it."""
        return self.accepted / self.checked if self.checked else None

    @property
    def proposals_per_round(self) -> float:
        return self.proposed / self.rounds_timed if self.rounds_timed else 0.0

    @property
    def tokens_per_target_pass(self) -> float | None:
        return self.tokens_made / self.rounds_timed if self.rounds_timed else None

    @property
    def expected_tokens_per_pass(self) -> float:
        return expected_tokens_per_pass(self.alpha or 0.0, self.k)

    @property
    def target_passes_saved(self) -> int:
        return self.plain_target_passes - self.target_passes

    # ---- measured, then divided
    @property
    def plain_ms_per_token(self) -> float:
        return statistics.median(self.plain_ms_per_token_runs)

    @property
    def speculative_ms_per_token(self) -> float:
        return statistics.median(self.speculative_ms_per_token_runs)

    @property
    def speedup(self) -> float:
        return self.plain_ms_per_token / self.speculative_ms_per_token

    @property
    def spread(self) -> float:
        """The wider of the two sides' timed runs: slowest over fastest."""
        return max(max(x) / min(x) for x in (self.plain_ms_per_token_runs, self.speculative_ms_per_token_runs))

    @property
    def draft_ms_per_proposed_token(self) -> float:
        return self.draft_ms_total / self.proposed if self.proposed else 0.0

    @property
    def verify_vs_decode(self) -> float | None:
        return self.verify_ms / self.plain_decode_ms if self.plain_decode_ms else None

    @property
    def step_ms(self) -> float:
        """One ONE-ROW target step: the paper's unit (the verify pass where no plain decode pass ran)."""
        return self.plain_decode_ms or self.verify_ms

    @property
    def cost_ratio_c(self) -> float:
        """Leviathan et al.'s c: a draft step over a one-row target step."""
        return self.draft_ms_per_proposed_token / self.step_ms if self.step_ms else 0.0

    @property
    def verify_cost_r(self) -> float:
        """The verify pass over k + 1 rows (verify_rows where no round fed k + 1), in one-row steps (the paper
        assumes 1)."""
        return self.verify_ms / self.step_ms if self.step_ms else 1.0

    # ---- the formula's predictions, from the measured α, c and r (computed, not measured)
    @property
    def predicted_speedup(self) -> float:
        return predicted_speedup(self.alpha or 0.0, self.k, self.cost_ratio_c)

    @property
    def predicted_with_verify(self) -> float:
        return corrected_speedup(self.alpha or 0.0, self.k, self.cost_ratio_c, self.verify_cost_r)

    @property
    def predicted_with_overhead(self) -> float:
        step = self.step_ms
        return corrected_speedup(self.alpha or 0.0, self.k, self.cost_ratio_c, self.verify_cost_r,
                                 self.overhead_ms_per_round / step if step else 0.0,
                                 self.plain_overhead_ms_per_step / step if step else 0.0)

    @property
    def verdict(self) -> str:
        return verdict(self)

    def to_dict(self) -> dict:
        """The JSON the CLI writes (`python -m engine speculate --json`)."""
        return {
            "target": self.target, "drafter": self.drafter, "k": self.k, "prompt": self.prompt,
            "new_tokens": self.new_tokens, "stop_strings": list(self.stop_strings), "stop_reason": self.stop_reason,
            "device": self.device, "sampling": self.sampling,
            "text": self.text, "generated_ids": list(self.generated_ids), "plain_ids": list(self.plain_ids),
            "identical": self.identical,
            "acceptance_rate": self.acceptance_rate, "alpha": self.alpha,
            "proposed": self.proposed, "checked": self.checked, "accepted": self.accepted,
            "proposals_per_round": self.proposals_per_round,
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "expected_tokens_per_pass": self.expected_tokens_per_pass,
            "target_passes": self.target_passes, "plain_target_passes": self.plain_target_passes,
            "target_passes_saved": self.target_passes_saved,
            "plain_ms_per_token": self.plain_ms_per_token, "speculative_ms_per_token": self.speculative_ms_per_token,
            "plain_ms_per_token_runs": list(self.plain_ms_per_token_runs),
            "speculative_ms_per_token_runs": list(self.speculative_ms_per_token_runs),
            "speedup": self.speedup,
            "draft_ms_per_proposed_token": self.draft_ms_per_proposed_token, "verify_ms": self.verify_ms,
            "verify_rows": self.verify_rows, "verify_rounds": self.verify_rounds,
            "plain_decode_ms": self.plain_decode_ms, "verify_vs_decode": self.verify_vs_decode,
            "overhead_ms_per_round": self.overhead_ms_per_round,
            "plain_overhead_ms_per_step": self.plain_overhead_ms_per_step,
            "spread": self.spread, "cost_ratio_c": self.cost_ratio_c, "predicted_speedup": self.predicted_speedup,
            "verify_cost_r": self.verify_cost_r, "predicted_with_verify": self.predicted_with_verify,
            "predicted_with_overhead": self.predicted_with_overhead,
            "repeats": self.repeats, "warmup": self.warmup,
            "rounds": [r.to_dict() for r in self.rounds],
            "verdict": self.verdict,
        }


def measure(target: LoadedModel, prompt: str, new_tokens: int, drafter: DraftModel | PromptLookup, k: int = 4,
            repeats: int = 3, sampling: Sampling | None = None, stop_strings: tuple[str, ...] = ()) -> Comparison:
    """Plain decoding vs speculative decoding of the same prompt and length, in this process, alternated.

    One untimed run of each first (warm-up, excluded), then `repeats` runs of each in alternating order, so
    neither has a quieter machine. Times are per generated token over the decode phase (after the prefill,
    which both make once: the target's, plus the draft model's own). Measured, not derived: α, the cost
    ratio c, the speed-up; the formula's prediction is computed from the measured α and c and labelled so.
    """
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 2:
        raise StepError(f"Comparing decoding needs at least 2 new tokens (got {new_tokens!r}): the first comes from the "
                        "prefill, which both make alike.")
    sampling = sampling or Sampling()

    def timed_decode(run):
        run.prefill()
        return run, timed(run.run, target.device, repeats=1, warmup=0).forward_ms

    def plain():
        return timed_decode(Stepper(target, prompt, sampling=sampling, max_new_tokens=new_tokens,
                                    stop_strings=stop_strings, record=False, repeats=1))

    def speculative():
        return timed_decode(Speculator(target, prompt, drafter, k=k, sampling=sampling, max_new_tokens=new_tokens,
                                       stop_strings=stop_strings, record=False, repeats=1))

    plain(), speculative()  # warm-up: first-call costs of both paths, excluded
    done = {plain: [], speculative: []}  # (run, decode wall ms) in the order they ran
    for r in range(max(1, repeats)):
        for which in ((plain, speculative) if r % 2 == 0 else (speculative, plain)):
            done[which].append(which())

    def per_token(run, ms):
        return ms / max(1, len(run.generated_ids) - 1)  # the first token came from the prefill

    # time outside the forward passes: sampling, bookkeeping, judging, cropping (wall - passes, per pass)
    plain_overhead = statistics.median((ms - sum(t.forward_ms for t in run.records[1:])) / max(1, len(run.records) - 1)
                                       for run, ms in done[plain])
    speculative_overhead = statistics.median((ms - sum(sum(r.draft_ms) + r.verify_ms for r in run.records[1:]))
                                      / max(1, len(run.records) - 1) for run, ms in done[speculative])
    plain_runs, speculative_runs = [run for run, _ in done[plain]], [run for run, _ in done[speculative]]
    base, last = plain_runs[-1], speculative_runs[-1]
    rounds = [r for run in speculative_runs for r in run.records[1:]]
    # r is the pass over k + 1 rows: a round that proposed fewer (prompt lookup found no match) fed fewer rows
    full = [r for r in rounds if r.q_len == k + 1]
    judged = full or rounds
    verify_rows = k + 1 if full or not rounds else round(statistics.median(r.q_len for r in rounds))
    decode_ms = statistics.median(t.forward_ms for run in plain_runs for t in run.records if t.phase == "decode") \
        if any(len(run.records) > 1 for run in plain_runs) else 0.0
    return Comparison(
        target=target.spec.name, drafter=drafter.name, k=k, prompt=prompt, new_tokens=new_tokens,
        stop_strings=tuple(stop_strings), stop_reason=last.stop_reason, device=str(target.device),
        sampling=sampling.describe(), text=last.text, generated_ids=tuple(last.generated_ids),
        plain_ids=tuple(base.generated_ids), proposed=sum(r.proposed for r in rounds),
        checked=sum(r.checked for r in rounds), accepted=sum(r.accepted for r in rounds), rounds_timed=len(rounds),
        tokens_made=sum(len(r.new_ids) for r in rounds), target_passes=last.target_passes,
        plain_target_passes=len(base.records),
        plain_ms_per_token_runs=tuple(per_token(*x) for x in done[plain]),
        speculative_ms_per_token_runs=tuple(per_token(*x) for x in done[speculative]),
        draft_ms_total=sum(sum(r.draft_ms) for r in rounds),
        verify_ms=statistics.median(r.verify_ms for r in judged) if judged else 0.0, verify_rows=verify_rows,
        verify_rounds=len(judged), plain_decode_ms=decode_ms,
        overhead_ms_per_round=speculative_overhead, plain_overhead_ms_per_step=plain_overhead,
        repeats=max(1, repeats), warmup="one run of each before timing, excluded", rounds=tuple(last.records))


def formula_words(m: Comparison) -> str:
    """The paper's prediction, then each correction the measurement makes to it, then what was measured."""
    return (f"The paper's formula E/(k·c+1) predicts ×{m.predicted_speedup:.2f}; counting the verify pass's cost, "
            f"E/(k·c+r) with r = {m.verify_cost_r:.2f}, ×{m.predicted_with_verify:.2f}; adding the time each round "
            f"and each plain step spend outside their passes ({m.overhead_ms_per_round:.2f} and "
            f"{m.plain_overhead_ms_per_step:.2f} ms), ×{m.predicted_with_overhead:.2f} (the tile 'with this pass's "
            f"costs'). Measured: ×{m.speedup:.2f}.")


def verdict(m: Comparison) -> str:
    """A plain-English reading of `measure`'s numbers: did it pay, and which number says why."""
    speedup, k = m.speedup, m.k
    plain, speculative = m.plain_ms_per_token_runs, m.speculative_ms_per_token_runs
    overlap = len(plain) > 1 and len(speculative) > 1 and min(plain) <= max(speculative) and min(speculative) <= max(plain)
    if overlap and (speedup >= 1.05 or speedup <= 0.95):
        parts = [f"No clear difference here: the medians give ×{speedup:.2f}, but the runs overlap (plain "
                 f"{min(plain):.2f}–{max(plain):.2f} ms per token, speculative {min(speculative):.2f}–{max(speculative):.2f} ms)."]
    elif speedup >= 1.05:
        parts = [f"Speculative decoding paid here: ×{speedup:.2f} faster per token than plain decoding."]
    elif speedup > 0.95:
        parts = [f"About break-even here: ×{speedup:.2f} per token against plain decoding."]
    else:
        parts = [f"Speculative decoding did not pay here: each token took ×{1 / speedup:.2f} as long as with plain "
                 "decoding."]
    if not m.proposed:
        parts.append("The drafter proposed nothing (no earlier n-gram matched), so every round was a plain decode "
                     "step plus bookkeeping.")
        return " ".join(parts)
    a, tpp, e = m.alpha, m.tokens_per_target_pass, m.expected_tokens_per_pass
    parts.append(f"The target kept {m.acceptance_rate:.0%} of all proposals and {a:.0%} of those it checked "
                 f"(α), so one verify pass made {tpp:.2f} tokens (the formula expects {e:.2f} from α = {a:.2f} "
                 f"and k = {k}).")
    if m.proposals_per_round < k - 0.5:
        parts.append(f"The drafter proposed {m.proposals_per_round:.1f} tokens per round on average, not k = {k}: "
                     "the formula assumes k every round.")
    c, r = m.cost_ratio_c, m.verify_cost_r
    parts.append(f"Drafting cost c = {c:.3f} of a one-row target step per proposed token (Leviathan et al.'s c), so "
                 f"k proposals cost {k * c:.2f} steps per round.")
    rows = m.verify_rows
    over = (f"the median of the {m.verify_rounds} rounds that fed {rows}" if rows == k + 1 else
            f"no round proposed all k = {k}, so the median of every round's pass, which fed {rows}")
    parts.append(f"A verify pass over {rows} rows took ×{r:.2f} as long as a one-row decode pass (r; {over}); the "
                 "formula takes k + 1 rows at r = 1, extra rows free, as when a pass is held up by reading the weights "
                 "(a large model on a GPU).")
    parts.append(formula_words(m))
    extra, plain_extra = m.overhead_ms_per_round, m.plain_overhead_ms_per_step
    if extra > 1.5 * plain_extra and extra > 0.1 * m.verify_ms:
        parts.append(f"The formula counts forward passes only; each round also spent {extra:.2f} ms outside them "
                     f"(judging, cropping both caches, bookkeeping) against {plain_extra:.2f} ms per plain step.")
    if m.spread > 1.3:
        parts.append(f"The timed runs varied by up to ×{m.spread:.2f} from one another (other work on the "
                     "machine does this), so read these times as rough.")
    return " ".join(parts)


def bet_timings(lm: LoadedModel, ids, rows: int) -> tuple[Timing, Timing]:
    """The bet's two passes, timed in alternation on one cache: `rows` rows fed at once (a verify pass's shape) and
    1 row (a plain decode step), each after the same prefix and rolled back after it; a round of one of each, the
    first round the warm-up of both, then the timed repeats every recorded step gets. A busy moment slows both
    alike, not the one timed then. ids: [batch=1, pos] or a list: the prefix, then the `rows` ids the verify pass
    feeds (a pass's time is its shape's, not its tokens')."""
    import torch

    from engine.forward.cache import new_cache, roll_back
    from engine.forward.run import run_pass
    from engine.generate.loop import TIMED_REPEATS

    ids = ids if isinstance(ids, torch.Tensor) else torch.tensor([list(ids)])
    past = ids.shape[1] - rows
    cache = new_cache(lm.config)
    run_pass(lm, ids[:, :past], cache)
    times = {rows: [], 1: []}
    for _ in range(1 + TIMED_REPEATS):  # warm-up round, then the timed ones
        for fed in (rows, 1):
            times[fed].append(run_pass(lm, ids[:, past: past + fed], cache, trim=False).timing.forward_ms)
            roll_back(cache, fed)
    return tuple(Timing(samples_ms=tuple(t[1:]), warmup_ms=t[0]) for t in (times[rows], times[1]))


def rows_cost_sentence(rows: int, verify: Timing, one: Timing, tokens_per_pass: float | None) -> str:
    """The bet speculative decoding makes (a pass over several rows costs about what one row costs), read off two
    measured passes: the ratio of their medians, how far it moves across their timed runs, and what it implies for
    a round (the tokens a verify pass must yield to beat plain decoding). The same words whatever the ratio: only
    the numbers change, so no wording flips when a busy minute moves the ratio."""
    ratio = verify.forward_ms / one.forward_ms
    digits = 2 if max(verify.forward_ms, one.forward_ms) < 10 else 1  # figures enough that the times give the ratio
    said = (f"Measured here, in alternation after the stage's prefix: a pass of {rows} rows, the verify pass's "
            f"shape, in {verify.forward_ms:.{digits}f} ms; one plain decode step after the same prefix feeds 1 row in "
            f"{one.forward_ms:.{digits}f} ms (×{ratio:.2f}")
    if verify.repeats > 1 and one.repeats > 1:
        said += (f"; medians of {verify.repeats} and {one.repeats} timed runs, warm-up excluded: across their fastest "
                 f"and slowest runs the ratio lies between ×{verify.low_ms / one.high_ms:.2f} and "
                 f"×{verify.high_ms / one.low_ms:.2f}")
    said += (f"). A round costs a verify pass, ×{ratio:.2f} a plain step, plus its drafting, and plain decoding makes "
             f"one token a step: so a round pays only if its verify pass yields more than {ratio:.2f} tokens, and "
             "more again to cover the drafting.")
    if tokens_per_pass is not None:
        said += f" This run's verify passes yielded {tokens_per_pass:.2f} tokens each."
    said += (f" A pass over {rows} rows cannot take less time than one over 1 row of the same cache (the same "
             "weights read, more arithmetic), so the bet's ratio is at least ×1: one measured under it is the two "
             "timings' noise.")  # said whatever the ratio: no words that flip when noise moves it across ×1
    wide = [(name, t) for name, t in (("verify", verify), ("one-row", one))
            if t.repeats > 1 and t.low_ms > 0 and t.high_ms / t.low_ms > WIDE]
    if wide:  # the project's one rule for a busy machine (drawing.caveats), with the spread that shows it
        said += (f" {BUSY}: " + "; ".join(f"the {name} pass's {t.repeats} timed runs ranged {t.low_ms:.1f}–"
                                          f"{t.high_ms:.1f} ms (×{t.high_ms / t.low_ms:.1f})" for name, t in wide)
                 + ", so read the ratio as rough.")
    return said + (" Speculative decoding bets on a ratio near ×1: a pass held up by reading every weight (lesson 3), "
                   "as on a large model on a GPU, costs about the same for a few rows as for one. (This ratio sets one "
                   "verify pass against one step on the same cache; the Speculative page's r takes medians over every "
                   "round of its timed runs, each pass timed once, so the two can differ.)")
