"""`python -m engine bytes`: the lean pass with fewer bytes (weights, then the K/V cache), timed; the damage."""

from __future__ import annotations

import sys

from topics.cli_args import check_json_path, load_from, model_args, positive, write_json


def add_parser(sub) -> None:
    g = sub.add_parser("bytes", help="bytes are time: the ≥ 100 M rung's decode and prefill with weights in fp32, "
                                     "bf16, fp16, int8; decode against context; the damage on the bundled models")
    g.add_argument("--size", help="the rung (default 110M on a CPU, fp32; Llama-3-8B on a GPU, bf16: random weights, "
                                  "timing only)")
    g.add_argument("--rounds", type=positive, help="timed rounds, every pass once a round (default 5; 3 on a GPU)")
    g.add_argument("--contexts", type=positive, nargs="+", help="decode contexts (default 128 … 20480; on a GPU "
                                                                "384 … 131072)")
    g.add_argument("--json", help="write the recording here (topics/bytes/records.py)")
    g.add_argument("--within", type=positive, default=None,
                   help="seconds the run has (a lent GPU's call): a storage whose compiles would end past them, less "
                        "the timed rounds' share, is left out and said")
    model_args(g)
    g.set_defaults(func=main)


def main(args) -> int:
    import torch

    from engine.timing import now
    from physics import machine
    from physics.rungs import rung_model
    from topics.bytes import measure

    check_json_path(args.json)
    deadline = measure.deadline(now(), args.within)
    lm = load_from(args)
    command = "python -m engine " + " ".join(sys.argv[1:])
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if lm.device.type == "cuda":  # the GPU's storages at a real shape, in bf16; no damage (a CPU's)
        rec = measure.record_gpu(lm, args.size, args.contexts, rounds=args.rounds, on_point=say, command=command,
                                 deadline=deadline)
        return _report(rec, args.json)
    rlm = rung_model(lm, args.size or "110M", dtype=torch.float32)
    with machine.serving_cores(rlm.spec.parameters):
        rec = measure.record(rlm, f"{args.size or '110M'} rung", command=command, rounds=args.rounds or measure.ROUNDS,
                             contexts=tuple(args.contexts or measure.CONTEXTS), on_point=say, deadline=deadline)
    return _report(rec, args.json)


def _report(rec, json_path: str | None) -> int:
    """The recording written first, then its tables printed: topics.bytes.draw needs pandas, not plotly, so a
    machine without plotly (the lent H200's image, 2026-11-30) prints them too."""
    if json_path:
        write_json(json_path, rec.to_dict())
    from topics.bytes import draw

    print(draw.text_tables(rec))
    return 0
