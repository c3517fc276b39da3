"""`python -m engine speculate`: speculative decoding against plain decoding of the same prompt, measured."""

from __future__ import annotations

from topics.cli_args import check_json_path, load_from, model_args, new_tokens_arg, write_json


def add_parser(sub) -> None:
    """`python -m engine speculate`: its options (commands/main.py finds it by name)."""
    s = sub.add_parser("speculate", help="speculative decoding vs plain decoding: same tokens? faster?")
    s.add_argument("--prompt", required=True)
    new_tokens_arg(s, 40, "new tokens at most")
    s.add_argument("--stop", action="append", help="stop string (repeatable): both runs stop as the Stepper does")
    drafter = s.add_mutually_exclusive_group()
    drafter.add_argument("--draft", help="draft model sharing the target's tokenizer (default: tinystories-draft)")
    drafter.add_argument("--lookup", type=int, metavar="NGRAM", help="draft by prompt lookup, n-grams up to NGRAM")
    s.add_argument("--k", type=int, default=4, help="proposals per round")
    s.add_argument("--json", help="write the numbers and every round here")
    model_args(s)
    s.set_defaults(func=main)


def main(args) -> int:
    from engine.generate.drafters import DraftModel, PromptLookup
    from engine.load.load import DRAFT_MODEL, load_model
    from topics.speculative.measure import measure

    check_json_path(args.json)
    lm = load_from(args)
    if args.lookup is not None:
        drafter = PromptLookup(args.lookup)
    else:
        drafter = DraftModel(load_model(args.draft or DRAFT_MODEL, device=args.device, dtype=args.dtype))
    m = measure(lm, args.prompt, args.new_tokens, drafter, k=args.k, stop_strings=args.stop or ())
    alpha = "n/a (nothing proposed)" if m.acceptance_rate is None else \
        f"{m.acceptance_rate:.1%} of proposals ({m.accepted} of {m.proposed}); α = {m.alpha:.1%} of " \
        f"the {m.checked} the target checked"
    print(f"target {m.target} · drafter {m.drafter} · k = {m.k} · {len(m.generated_ids)} tokens · "
          f"{m.device}")
    print(m.text)
    print()
    print(f"same tokens as plain greedy decoding: {m.identical}")
    print(f"acceptance rate:              {alpha}")
    print(f"tokens per verify pass:       {m.tokens_per_target_pass or 0:.2f} (formula E = "
          f"{m.expected_tokens_per_pass:.2f}; plain decoding 1; the prefill left out)")
    print(f"target passes:                {m.target_passes} = 1 prefill + {m.target_passes - 1} verify (plain "
          f"decoding {m.plain_target_passes} = 1 prefill + {m.plain_target_passes - 1} decode; saved "
          f"{m.target_passes_saved})")
    print(f"time per token (decode):      plain {m.plain_ms_per_token:.2f} ms, speculative "
          f"{m.speculative_ms_per_token:.2f} ms (medians of {m.repeats} alternated runs, warm-up excluded)")
    print(f"measured speed-up:            x{m.speedup:.2f}")
    print(f"cost ratio c:                 {m.cost_ratio_c:.3f} (draft ms per proposed token / one-row target step "
          f"ms: Leviathan et al.'s c)")
    print(f"verify pass r:                {m.verify_cost_r:.2f} one-row steps ({m.verify_rows} rows in one pass, median of "
          f"{m.verify_rounds} rounds; the paper assumes 1)")
    print(f"paper's formula:              x{m.predicted_speedup:.2f} (E / (k·c + 1), Leviathan et al. 2023; E from α)")
    print(f"  with the verify pass's cost: x{m.predicted_with_verify:.2f} (E / (k·c + r))")
    print(f"  and the time outside passes: x{m.predicted_with_overhead:.2f} ({m.overhead_ms_per_round:.2f} ms per "
          f"round, {m.plain_overhead_ms_per_step:.2f} ms per plain step; measured x{m.speedup:.2f})")
    print(f"verdict: {m.verdict}")
    if args.json:
        write_json(args.json, m.to_dict())
    return 0
