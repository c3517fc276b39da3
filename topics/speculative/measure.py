"""Does speculative decoding pay on this machine? Plain vs speculative decoding of the same prompt, measured.

Measured, not derived: the acceptance rate α, the cost ratio c of a draft step to a one-row target step (the
paper's c), what the verify pass over k + 1 rows costs in one-row steps (r), the time outside the passes, the
speed-up. The formula's prediction (Leviathan et al. 2023, E/(k·c+1)) is computed from the measured α and c and
labelled so, then corrected step by step for what it assumes away (`corrected_speedup`: r, then the overheads);
`verdict` reads the numbers back in plain English and says which one explains the outcome.
"""

from __future__ import annotations

import statistics
import time

from engine.errors import StepError
from engine.forward.sampling import Sampling
from engine.generate.drafters import DraftModel, PromptLookup
from engine.generate.speculative import Speculator
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel


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


def measure(target: LoadedModel, prompt: str, new_tokens: int, drafter: DraftModel | PromptLookup, k: int = 4,
            repeats: int = 3, sampling: Sampling | None = None, stop_strings: tuple[str, ...] = ()) -> dict:
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
        t0 = time.perf_counter()
        run.run()
        return run, (time.perf_counter() - t0) * 1e3

    def plain():
        return timed_decode(Stepper(target, prompt, sampling=sampling, max_new_tokens=new_tokens,
                                    stop_strings=stop_strings, record=False, repeats=1))

    def speculative():
        return timed_decode(Speculator(target, prompt, drafter, k=k, sampling=sampling, max_new_tokens=new_tokens,
                                       stop_strings=stop_strings, record=False, repeats=1))

    plain(), speculative()  # warm-up: first-call costs of both paths, excluded
    timed = {plain: [], speculative: []}  # (run, decode wall ms) in the order they ran
    for r in range(max(1, repeats)):
        for which in ((plain, speculative) if r % 2 == 0 else (speculative, plain)):
            timed[which].append(which())

    def per_token(run, ms):
        return ms / max(1, len(run.generated_ids) - 1)  # the first token came from the prefill

    plain_ms = [per_token(*x) for x in timed[plain]]
    speculative_ms = [per_token(*x) for x in timed[speculative]]
    # time outside the forward passes: sampling, bookkeeping, judging, cropping (wall - passes, per pass)
    plain_overhead = statistics.median((ms - sum(t.forward_ms for t in run.records[1:])) / max(1, len(run.records) - 1)
                                       for run, ms in timed[plain])
    speculative_overhead = statistics.median((ms - sum(sum(r.draft_ms) + r.verify_ms for r in run.records[1:]))
                                      / max(1, len(run.records) - 1) for run, ms in timed[speculative])
    plain_runs, speculative_runs = [run for run, _ in timed[plain]], [run for run, _ in timed[speculative]]
    base, last = plain_runs[-1], speculative_runs[-1]
    rounds = [r for run in speculative_runs for r in run.records[1:]]
    proposed = sum(r.proposed for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    checked = sum(r.checked for r in rounds)
    # the formula's α is the chance that a proposal the target looks at is kept; proposals after a rejection are
    # never looked at, so accepted / proposed would understate it
    alpha = accepted / checked if checked else 0.0
    verify_ms = statistics.median(r.verify_ms for r in rounds) if rounds else 0.0
    decode_ms = statistics.median(t.forward_ms for run in plain_runs for t in run.records if t.phase == "decode") \
        if any(len(run.records) > 1 for run in plain_runs) else 0.0
    draft_per_token = sum(sum(r.draft_ms) for r in rounds) / proposed if proposed else 0.0
    step_ms = decode_ms or verify_ms  # one ONE-ROW target step: the paper's unit (the verify pass where none ran)
    c = draft_per_token / step_ms if step_ms else 0.0  # Leviathan et al.'s c: a draft step over a one-row step
    verify_steps = verify_ms / step_ms if step_ms else 1.0  # the verify pass over k + 1 rows, in one-row steps
    made = sum(len(r.new_ids) for r in rounds)
    out = {
        "target": target.spec.name, "drafter": drafter.name, "k": k, "prompt": prompt,
        "new_tokens": new_tokens, "stop_strings": list(stop_strings), "stop_reason": last.stop_reason,
        "device": str(target.device), "sampling": sampling.describe(),
        "text": last.text, "generated_ids": last.generated_ids, "plain_ids": base.generated_ids,
        "identical": last.generated_ids == base.generated_ids,
        "acceptance_rate": accepted / proposed if proposed else None, "alpha": alpha if checked else None,
        "proposed": proposed, "checked": checked, "accepted": accepted,
        "proposals_per_round": proposed / len(rounds) if rounds else 0.0,
        "tokens_per_target_pass": made / len(rounds) if rounds else None,
        "expected_tokens_per_pass": expected_tokens_per_pass(alpha, k),
        "target_passes": last.target_passes, "plain_target_passes": len(base.records),
        "target_passes_saved": len(base.records) - last.target_passes,
        "plain_ms_per_token": statistics.median(plain_ms), "speculative_ms_per_token": statistics.median(speculative_ms),
        "plain_ms_per_token_runs": plain_ms, "speculative_ms_per_token_runs": speculative_ms,
        "speedup": statistics.median(plain_ms) / statistics.median(speculative_ms),
        "draft_ms_per_proposed_token": draft_per_token, "verify_ms": verify_ms, "plain_decode_ms": decode_ms,
        "verify_vs_decode": verify_ms / decode_ms if decode_ms else None,
        "overhead_ms_per_round": speculative_overhead, "plain_overhead_ms_per_step": plain_overhead,
        "spread": max(max(x) / min(x) for x in (plain_ms, speculative_ms)),
        "cost_ratio_c": c, "predicted_speedup": predicted_speedup(alpha, k, c),
        "verify_cost_r": verify_steps, "predicted_with_verify": corrected_speedup(alpha, k, c, verify_steps),
        "predicted_with_overhead": corrected_speedup(alpha, k, c, verify_steps,
                                                     speculative_overhead / step_ms if step_ms else 0.0,
                                                     plain_overhead / step_ms if step_ms else 0.0),
        "repeats": max(1, repeats), "warmup": "one run of each before timing, excluded",
        "rounds": [r.to_dict() for r in last.records],
    }
    out["verdict"] = verdict(out)
    return out


def formula_words(m: dict) -> str:
    """The paper's prediction, then each correction the measurement makes to it, then what was measured."""
    said = f"The paper's formula E/(k·c+1) predicts x{m['predicted_speedup']:.2f}"
    if m.get("predicted_with_verify") is not None:
        said += (f"; counting the verify pass's real cost, E/(k·c+r) with r = {m['verify_cost_r']:.2f}, "
                 f"x{m['predicted_with_verify']:.2f}; adding the time each round and each plain step spend outside "
                 f"their passes ({m['overhead_ms_per_round']:.2f} and {m['plain_overhead_ms_per_step']:.2f} ms), "
                 f"x{m['predicted_with_overhead']:.2f}")
    return said + f". Measured: x{m['speedup']:.2f}."


def verdict(m: dict) -> str:
    """A plain-English reading of `measure`'s numbers: did it pay, and which number says why."""
    speedup, k = m["speedup"], m["k"]
    plain, speculative = m.get("plain_ms_per_token_runs") or [], m.get("speculative_ms_per_token_runs") or []
    overlap = len(plain) > 1 and len(speculative) > 1 and min(plain) <= max(speculative) and min(speculative) <= max(plain)
    if overlap and (speedup >= 1.05 or speedup <= 0.95):
        parts = [f"No clear difference here: the medians give x{speedup:.2f}, but the runs overlap (plain "
                 f"{min(plain):.2f}–{max(plain):.2f} ms per token, speculative {min(speculative):.2f}–{max(speculative):.2f} ms)."]
    elif speedup >= 1.05:
        parts = [f"Speculative decoding paid here: x{speedup:.2f} faster per token than plain decoding."]
    elif speedup > 0.95:
        parts = [f"About break-even here: x{speedup:.2f} per token against plain decoding."]
    else:
        parts = [f"Speculative decoding did not pay here: each token took x{1 / speedup:.2f} as long as with plain "
                 "decoding."]
    if not m["proposed"]:
        parts.append("The drafter proposed nothing (no earlier n-gram matched), so every round was a plain decode "
                     "step plus bookkeeping.")
        return " ".join(parts)
    a, tpp, e = m["alpha"], m["tokens_per_target_pass"], m["expected_tokens_per_pass"]
    parts.append(f"The target kept {m['acceptance_rate']:.0%} of all proposals and {a:.0%} of those it checked "
                 f"(α), so one verify pass made {tpp:.2f} tokens (the formula expects {e:.2f} from α = {a:.2f} "
                 f"and k = {k}).")
    if m["proposals_per_round"] < k - 0.5:
        parts.append(f"The drafter proposed {m['proposals_per_round']:.1f} tokens per round on average, not k = {k}: "
                     "the formula assumes k every round.")
    c, r = m["cost_ratio_c"], m.get("verify_cost_r", m["verify_vs_decode"])
    parts.append(f"Drafting cost c = {c:.3f} of a one-row target step per proposed token (Leviathan et al.'s c), so "
                 f"k proposals cost {k * c:.2f} steps per round.")
    if r is not None and r > ROWS_FREE:
        parts.append(f"A verify pass over {k + 1} rows took x{r:.2f} as long as a one-row decode pass: the formula "
                     "assumes extra rows are free, which holds when a pass is bound by reading the weights (a large "
                     "model on a GPU), not here.")
    elif r is not None:
        parts.append(f"A verify pass over {k + 1} rows cost about what a one-row decode pass costs (x{r:.2f}): the "
                     "fixed cost of a pass dominates, as the formula assumes.")
    parts.append(formula_words(m))
    extra, plain_extra = m["overhead_ms_per_round"], m["plain_overhead_ms_per_step"]
    if extra > 1.5 * plain_extra and extra > 0.1 * m["verify_ms"]:
        parts.append(f"The formula counts forward passes only; each round also spent {extra:.2f} ms outside them "
                     f"(judging, cropping both caches, bookkeeping) against {plain_extra:.2f} ms per plain step.")
    if m["spread"] > 1.3:
        parts.append(f"The timed runs varied by up to x{m['spread']:.2f} from one another (other work on the "
                     "machine does this), so read these times as rough.")
    return " ".join(parts)


ROWS_FREE = 1.15  # a pass over k+1 rows "costs about what one row costs" up to this many times the one-row time


def one_row_ms(lm: LoadedModel, ids) -> float:
    """A plain decode step's forward time, measured now: every id but the last in the cache, the last fed as one
    row (median of the timed repeats every recorded step gets; warm-up excluded). ids: [batch=1, pos], or a list."""
    import torch

    from engine.forward.cache import new_cache
    from engine.forward.run import run_pass
    from engine.generate.loop import TIMED_REPEATS

    ids = ids if isinstance(ids, torch.Tensor) else torch.tensor([list(ids)])
    cache = new_cache(lm.config)
    run_pass(lm, ids[:, :-1], cache)
    return run_pass(lm, ids[:, -1:], cache, repeats=TIMED_REPEATS).timing.forward_ms


def rows_cost_sentence(rows: int, rows_ms: float, one_ms: float) -> str:
    """What the measured times say about the bet speculative decoding makes: are extra rows nearly free here?"""
    ratio = rows_ms / one_ms if one_ms > 0 else float("inf")
    digits = 2 if max(rows_ms, one_ms) < 10 else 1  # enough figures that the two times give the ratio beside them
    said = (f"Measured here: the verify pass on the stage fed {rows} rows in {rows_ms:.{digits}f} ms; one plain decode step "
            f"on the same cache feeds 1 row in {one_ms:.{digits}f} ms (×{ratio:.2f}).")
    if ratio <= ROWS_FREE:
        return said + (" The extra rows cost about nothing: the fixed cost of a pass dominates, so checking several "
                       "guesses in one pass is nearly free, as speculative decoding assumes.")
    return said + (f" So here {rows} rows do not cost 'little more' than one: this small model's passes are not "
                   "held up by reading the weights (see lesson 3), every row adds real work, and a round pays only "
                   "if enough of its guesses are kept. On a large model on a GPU the ratio is close to 1.")
