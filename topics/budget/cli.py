"""`python -m engine budget`: one policy (or all) side by side with the full cache, in numbers.

    python -m engine budget --policy heavy --budget 64 [--prompt TEXT] [--json OUT]
    python -m engine budget --policy all --budget 64 --sinks        # docs/measurements.md's table, and the sink
    python -m engine budget --policy all --sweep assets/budget_sweep_default.json   # the page's recorded charts
    python -m engine budget --policy all --record-stories assets/budget_stories_default.json   # the page's spread

Prints the bytes held against the full cache's (in the model's own dtype, measured, and counted at bf16), the
teacher-forced top-1 agreement and mean KL on the held-out text, the first step where free-running greedy parts
from the full cache (with both texts), and ms per decode step (for a quantized cache, the part of it spent
dequantizing). With `--policy all`, then every policy over --stories held-out stories (topics/budget/stories.py) in
fp32 and in bf16: pooled agreement and KL with 95 % intervals, the stories whose free runs parted, the ranking with
"≈" where neighbours' intervals overlap (tied), and fp8's share of decoded numbers past its frozen scale's range.
Bad input is one line on stderr and exit status 2 (commands/main.py finds this command by name).
"""

from __future__ import annotations

import argparse
import sys

from physics.units import human_bytes
from topics.cli_args import check_json_path, load_from, model_args, write_json

ALL = "all"


def add_parser(subparsers) -> argparse.ArgumentParser:
    from topics.budget.measure import BUDGET, CONTEXT, NEW_TOKENS
    from topics.budget.policies import POLICIES
    from topics.budget.stories import STORIES

    p = subparsers.add_parser("budget", help="the KV cache on a budget: quantize or evict, measured against the full")
    p.add_argument("--policy", required=True, help=f"{' | '.join(POLICIES)} | {ALL} (every policy, one table)")
    p.add_argument("--budget", type=int, default=BUDGET, help="positions kept (in full precision, for fp8/int8/int4); "
                                                              f"default {BUDGET}")
    p.add_argument("--prompt", help="free-running greedy starts here (default: the first half of the held-out "
                                    "context, as text)")
    p.add_argument("--context", type=int, default=CONTEXT, help=f"tokens of the held-out text (default {CONTEXT}): "
                                                                "the first half prefilled, the rest teacher-forced")
    p.add_argument("--new-tokens", dest="new_tokens", type=int, default=NEW_TOKENS,
                   help=f"free-running greedy steps (default {NEW_TOKENS})")
    p.add_argument("--sinks", action="store_true", help="also measure the attention each layer pays position 0")
    p.add_argument("--json", help="write every number (and both texts) here")
    p.add_argument("--stories", type=int, default=STORIES,
                   help=f"with --policy all: held-out stories to measure every policy over, fp32 and bf16 "
                        f"(default {STORIES}; 0: none)")
    p.add_argument("--record-stories", dest="record_stories", metavar="OUT",
                   help="write that spread here (assets/budget_stories_default.json is the page's)")
    p.add_argument("--sweep", metavar="OUT", help="also measure every policy at budgets 8, 16, 32, 64 and 128 "
                                                  "(the page's divergence charts) and record them here")
    model_args(p)
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from engine.errors import StepError
    from topics.budget.measure import compare_policies, ranking, ranking_words, record_sweep, sink_mass
    from topics.budget.policies import CAPPED, POLICIES, check, check_words

    check_json_path(args.json)  # every refusal that needs no model comes before loading one
    if args.sweep:
        check_json_path(args.sweep)
    if args.record_stories:
        check_json_path(args.record_stories)
    if args.stories is None or not 0 <= args.stories <= 40:
        raise StepError(f"--stories must be 0 to 40, the held-out text's stories (got {args.stories}).")
    if args.new_tokens is None or args.new_tokens < 1:
        raise StepError(f"--new-tokens must be at least 1 (got {args.new_tokens}).")
    policies = tuple(POLICIES) if str(args.policy).strip().lower() == ALL else (args.policy,)
    for policy in policies:
        check_words(policy, None if policy == "full" else args.budget)
    lm = load_from(args)
    if lm.device.type == "cpu":  # time what the app serves with: one thread for a small model (physics/machine.py)
        from physics import machine

        machine.use_serving_threads(int(lm.spec.parameters))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "longer than the maximum sequence length": the held-out text is cut after
    for policy in policies:  # and what depends on the model, before any measuring
        check(lm, policy, None if policy == "full" else args.budget)
    policies = tuple(p.strip().lower() for p in policies)
    shown = policies if "full" in policies else ("full", *policies)
    print(f"{lm.spec.name}: {args.context} tokens of the held-out text ({args.context // 2} prefilled, the rest "
          f"teacher-forced one a step); budget {args.budget} positions; greedy {args.new_tokens} tokens",
          file=sys.stderr)
    rows = compare_policies(lm, shown, args.budget, args.context, args.prompt, args.new_tokens,
                            on_policy=lambda p: print(f"  measuring {p}…", file=sys.stderr))
    summaries = [r.summary() for r in rows]
    print(table(summaries))
    print(notes(summaries))
    full = next(r for r in rows if r.policy == "full")
    print(f"\n{'full':<11}: {full.greedy.text!r}")
    for r in rows:
        if r.policy != "full":
            at = "never parts" if r.parting_step is None else f"parts at step {r.parting_step}"
            print(f"{r.policy:<11}: {r.greedy.text!r}  ({at})")
    evicting = ranking(rows, CAPPED)
    if len(evicting) > 1:
        print(f"\neviction policies holding {args.budget} positions, on this one text (no interval: every story "
              "below, with --stories), by agreement (=: the same agreement, the lower KL first): "
              + ranking_words(rows, CAPPED))
    spread = None
    if len(policies) > 1 and args.stories:
        from topics.budget.stories import FREE_TOKENS, measure_stories

        command = "python -m engine budget --policy all" + (f" --record-stories {args.record_stories}"
                                                            if args.record_stories else "")
        spread = measure_stories(lm, tuple(p for p in shown if p != "full"), args.budget, args.stories,
                                 args.context, min(FREE_TOKENS, args.new_tokens), command=command,
                                 log=lambda line: print(line, file=sys.stderr))
        print("\n" + stories_table(spread, CAPPED))
    sinks = sink_mass(lm, args.context) if args.sinks else []
    if sinks:
        print("\nattention on position 0, per layer (query rows from position "
              f"{args.context - sinks[0].rows}): measured vs a uniform reader, the heads' mean and the strongest head")
        for s in sinks:
            h = s.strongest_head
            print(f"  layer {s.layer}: {s.mass:.4f} vs {s.uniform:.4f}  (x{s.ratio:.2f}; head {h}: "
                  f"x{s.head_ratios[h]:.2f})")
    if args.json:
        write_json(args.json, {"model": lm.spec.name, "dtype": lm.dtype_name, "device": str(lm.device),
                                "context": args.context, "budget": args.budget, "new_tokens": args.new_tokens,
                                "prompt": rows[0].greedy.prompt, "rows": [r.to_dict() for r in rows],
                                "ranking": evicting, "sinks": [s.to_dict() for s in sinks],
                                "stories": None if spread is None else spread.to_dict()})
    if args.record_stories and spread is not None:
        write_json(args.record_stories, spread.to_dict())
    if args.sweep:
        command = f"python -m engine budget --policy all --sweep {args.sweep}"
        recorded = record_sweep(lm, context=args.context, command=command,
                                on_point=lambda p, b: print(f"  sweep: {p} at {b}…", file=sys.stderr))
        write_json(args.sweep, recorded.to_dict())
    return 0


def table(rows) -> str:
    """One line a policy (Summary records): bytes against the full cache's (own dtype, and counted at bf16),
    agreement, KL, parting step, ms per decode step and the part of it spent dequantizing."""
    from topics.budget.records import SHORT_DTYPE

    dtype = rows[0].dtype if rows else ""
    own = SHORT_DTYPE.get(dtype, dtype)
    head = (f"{'policy':<11} {'budget':>6} {'bytes held':>11} {'of ' + own:>8} {'at bf16':>8} {'agree':>7} "
            f"{'mean KL':>8} {'parts at':>8}  {'ms/step (median, IQR)':<22} {'dequant ms':>10}")
    lines = [head]
    for r in rows:
        parts = "never" if r.parting_step is None else str(r.parting_step)
        budget = "-" if r.budget is None else str(r.budget)
        dq = "-" if r.dequant_ms is None else f"{r.dequant_ms:.2f}"
        lines.append(f"{r.policy:<11} {budget:>6} {human_bytes(r.bytes_held):>11} {r.bytes_ratio:>8.1%} "
                     f"{r.bytes_ratio_bf16:>8.1%} {r.agreement:>7.1%} {r.kl_mean:>8.4f} {parts:>8}  "
                     f"{f'{r.ms_per_step:.2f} ({r.ms_p25:.2f}–{r.ms_p75:.2f})':<22} {dq:>10}")
    return "\n".join(lines)


def notes(rows) -> str:
    """What the columns are, said under the table."""
    dtype = rows[0].dtype if rows else "the model's dtype"
    out = [f"\nbytes: measured from the tensors against the full cache in {dtype} (the model's own dtype); 'at bf16' "
           "counts the same tensors at 2 bytes a full-precision number against a bf16 full cache (counted, not run)."]
    quantized = [r for r in rows if r.dequant_ms is not None]
    if quantized:
        worst = max(quantized, key=lambda r: r.moved_ratio_estimate)
        out.append("quantized: every step dequantizes every older row into a full-precision copy ('dequant ms', "
                   "measured inside the step), so a step moves more bytes than the full cache's (estimate: up to "
                   f"x{worst.moved_ratio_estimate:.2f}, {worst.policy}); a fused kernel would read fewer instead.")
    return "\n".join(out)


def stories_table(spread, capped) -> str:
    """Every policy over the stories, fp32 and bf16 side by side: pooled agreement and KL with their 95 % intervals,
    the stories whose free runs parted (and the median step), then each dtype's ranking with its ties, and fp8's
    saturation."""
    from topics.budget.records import SHORT_DTYPE

    dtypes = spread.dtypes
    lines = [f"every story: {spread.stories} held-out stories of up to {spread.context} tokens (the first half "
             f"prefilled, the rest teacher-forced; free runs of {spread.free_tokens} tokens), budget {spread.budget}; "
             f"95 % intervals: bootstrap over the stories ({spread.resamples} resamples, seed {spread.seed})"]
    head = f"{'policy':<11}"
    for d in dtypes:
        short = SHORT_DTYPE.get(d, d)
        head += f" | {short + ' agree [95 %]':<23} {'mean KL [95 %]':<26} {'parted':>10}"
    lines.append(head)
    policies = list(dict.fromkeys(r.policy for r in spread.rows if r.dtype in dtypes))
    for p in policies:
        line = f"{p:<11}"
        for d in dtypes:
            r = spread.row(p, d)
            a, k = r.agreement_ci, r.kl_ci
            med = "" if r.parting_median is None else f" at {r.parting_median:g}"
            line += (f" | {r.agreement:6.1%} [{a.low:6.1%}–{a.high:6.1%}] {r.kl_mean:7.4f} [{k.low:.4f}–{k.high:.4f}]"
                     f" {f'{r.parted}/{len(r.stories)}{med}':>10}")
        lines.append(line)
    both = next((r for r in spread.rows if " vs " in r.dtype), None)
    if both is not None:
        lines.append(f"bf16's full cache against fp32's (the weights and the cache in bf16, nothing dropped): agreement "
                     f"{both.agreement:.1%} [{both.agreement_ci.low:.1%}–{both.agreement_ci.high:.1%}], mean KL "
                     f"{both.kl_mean:.5f}")
    for d in dtypes:
        lines.append(f"eviction policies holding {spread.budget} positions, {SHORT_DTYPE.get(d, d)}, by pooled "
                     f"agreement: {spread.ranking_sentence(d, capped)}")
    for d in dtypes:
        r = spread.row("fp8", d)
        if r is not None and r.saturation is not None:
            s = r.saturation
            lines.append(f"fp8 saturation, {SHORT_DTYPE.get(d, d)}: {s.past_range:,} of {s.decoded:,} decoded K and V "
                         f"numbers ({s.share:.3%}) past the range of the scale frozen on the prompt (±448 x scale); "
                         f"the worst {s.worst:.2f}x the range")
    return "\n".join(lines)
