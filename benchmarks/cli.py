"""`python -m engine bench`: the benchmarks, ratios measured side by side in one run (benchmarks/bench.py)."""

from __future__ import annotations

from engine.cli_args import check_json_path, load_from, model_args, positive, write_json


def add_parser(sub) -> None:
    """`python -m engine bench`: its options (engine/cli.py finds it by name)."""
    b = sub.add_parser("bench", help="engine vs generate overhead; cache vs no-cache")
    b.add_argument("--json")
    b.add_argument("--lengths", type=positive, nargs="+", default=[64, 256, 512])
    b.add_argument("--rounds", type=positive, default=7)
    b.add_argument("--no-app", dest="no_app", action="store_true", help="skip the AppTest click measurement")
    b.add_argument("--ladder-sizes", dest="ladder_sizes", nargs="*", default=["own", "110M"],
                   help="the size ladder's rungs in the bench (default: own 110M; none given: no ladder)")
    model_args(b)
    b.set_defaults(func=main)


def main(args) -> int:
    from benchmarks.bench import run_bench

    check_json_path(args.json)
    lm = load_from(args)
    res = run_bench(lm, lengths=tuple(args.lengths), rounds=args.rounds, app=not args.no_app,
                    ladder_sizes=tuple(args.ladder_sizes))
    if args.json:
        write_json(args.json, res)
    return 0
