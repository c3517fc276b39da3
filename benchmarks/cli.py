"""`python -m engine bench` and `gpu-check`: ratios measured side by side in one run (benchmarks/bench.py), and every
GPU figure beside its target in one command (benchmarks/gpu_check.py)."""

from __future__ import annotations

from topics.cli_args import check_json_path, load_from, model_args, positive, write_json


def add_parser(sub) -> None:
    """`python -m engine bench` and `gpu-check`: their options (commands/main.py finds them by name)."""
    b = sub.add_parser("bench", help="engine vs generate overhead; cache vs no-cache")
    b.add_argument("--json")
    b.add_argument("--lengths", type=positive, nargs="+", default=[64, 256, 512])
    b.add_argument("--rounds", type=positive, default=7)
    b.add_argument("--no-app", dest="no_app", action="store_true", help="skip the AppTest click measurement")
    b.add_argument("--ladder-sizes", dest="ladder_sizes", nargs="*", default=["own", "110M"],
                   help="the size ladder's rungs in the bench (default: own 110M; none given: no ladder)")
    b.add_argument("--peers", action="store_true",
                   help="only the lean pass beside CTranslate2 on the same weights (benchmarks/peers.py)")
    b.add_argument("--peer-size", dest="peer_size", default="112M", help="the rung --peers runs (default 112M)")
    model_args(b)
    b.set_defaults(func=main)

    gc = sub.add_parser("gpu-check", help="on a CUDA GPU: the ladder at a real 8 B shape, its lean pass over n rows and "
                                          "transformers' recipe, each target beside its measured figure (≤ 5 min)")
    gc.add_argument("--json", help="write the ladder with every figure here (ship it as assets/ladder_gpu.json)")
    gc.add_argument("--sizes", nargs="+", help="the ladder's rungs (default: own Llama-3-8B)")
    gc.add_argument("--tokens", type=positive, default=None, help="s: the prefill's length and the decode's context")
    gc.add_argument("--race-shape", dest="race_shape", default="TinyLlama-1.1B", help="the rung the lean race runs at")
    gc.add_argument("--tests", action="store_true", help="also run the gpu tests (tests/test_gpu.py)")
    gc.add_argument("--races", action="store_true", help="also run both races")
    gc.add_argument("--bytes", action="store_true", help="also bytes are time at Llama-3-8B's shape (bf16, int8)")
    gc.add_argument("--within", type=positive, default=None,
                    help="seconds the run has (a lent GPU's call): the bytes part leaves out, and says, a storage whose "
                         "compiles would end past them")
    gc.set_defaults(func=gpu_check_main)


def main(args) -> int:
    from benchmarks.bench import run_bench

    check_json_path(args.json)
    if args.peers:
        from benchmarks.peers import race_peers

        race = race_peers(size=args.peer_size, rounds=args.rounds, log=lambda text: print(text, flush=True))
        print(race.table())
        if args.json:
            write_json(args.json, race.to_dict())  # the JSON edge
        return 0
    lm = load_from(args)
    res = run_bench(lm, lengths=tuple(args.lengths), rounds=args.rounds, app=not args.no_app,
                    ladder_sizes=tuple(args.ladder_sizes))
    if args.json:
        write_json(args.json, res.to_dict())  # the JSON edge
    return 0


def gpu_check_main(args) -> int:
    """Every GPU figure beside its target (benchmarks/gpu_check.py); exit 1 if one does not hold."""
    from benchmarks.gpu_check import gpu_check, require_cuda, table

    check_json_path(args.json)
    require_cuda()
    check = gpu_check(sizes=args.sizes, race_shape=args.race_shape, tests=args.tests, races=args.races,
                      log=lambda text: print(text, flush=True), json_path=args.json, tokens=args.tokens,
                      bytes_=args.bytes, within=args.within)
    print()
    print(table(check.targets))
    if args.json:
        write_json(args.json, check.to_dict())  # the JSON edge
    return 0 if all(r.holds is not False for r in check.targets) else 1
