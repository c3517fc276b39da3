"""`python -m engine bytes`: the lean pass with fewer bytes (weights, then the K/V cache), timed; the damage."""

from __future__ import annotations

import sys

from topics.cli_args import check_json_path, load_from, model_args, positive, write_json


def add_parser(sub) -> None:
    g = sub.add_parser("bytes", help="bytes are time: the ≥ 100 M rung's decode and prefill with weights in fp32, "
                                     "bf16, fp16, int8; decode against context; the damage on the bundled models")
    g.add_argument("--size", default="110M", help="the rung (default 110M: random weights, timing only)")
    g.add_argument("--rounds", type=positive, default=5, help="timed rounds (every pass once a round)")
    g.add_argument("--contexts", type=positive, nargs="+", help="decode contexts (default 128 … 20480)")
    g.add_argument("--json", help="write the recording here (topics/bytes/records.py)")
    model_args(g)
    g.set_defaults(func=main)


def main(args) -> int:
    import torch

    from physics import machine
    from physics.rungs import rung_model
    from topics.bytes import draw, measure

    check_json_path(args.json)
    lm = load_from(args)
    rlm = rung_model(lm, args.size, dtype=torch.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(machine.serving_threads(int(rlm.spec.parameters)))
    try:
        rec = measure.record(rlm, f"{args.size} rung", command="python -m engine " + " ".join(sys.argv[1:]),
                             rounds=args.rounds, contexts=tuple(args.contexts or measure.CONTEXTS),
                             on_point=lambda text: print(text, file=sys.stderr, flush=True))
    finally:
        torch.set_num_threads(before)
    print(draw.text_tables(rec))
    if args.json:
        write_json(args.json, rec.to_dict())
    return 0
