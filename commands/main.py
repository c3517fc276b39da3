"""Command line: `python -m engine {run,compare,serve,kv-size,speculate,ladder,budget,bytes,bench,gpu-check}`
(training: `python -m tools.train`).

The core's commands live here; a topic's live in its folder (topics/*/cli.py, benchmarks/cli.py), each an
`add_parser(sub)` and a `main(args)`, imported below by name: this file sits above all of them. Every refusal is one line on stderr and exit status 2: a bad --json path
is refused before the run starts, so a long run is never lost at the end (topics/cli_args.py).
"""

from __future__ import annotations

import argparse
import json
import sys

import benchmarks.cli
import topics.budget.cli
import topics.bytes.cli
import topics.ladder.cli
import topics.speculative.cli
from engine.errors import DecodeLabError
from physics.units import human_bytes
from topics.cli_args import (
    BadPath,
    check_json_path,
    load_from,
    model_args,
    new_tokens_arg,
    positive,
    sampling_args,
    sampling_from,
    write_json,
)

# The commands that belong to a topic or to the benchmarks live with them, each its own add_parser(sub)
COMMANDS_ELSEWHERE = (benchmarks.cli, topics.ladder.cli, topics.speculative.cli, topics.budget.cli, topics.bytes.cli)


def step_table(traces) -> str:
    """Per-step table: phase, q_len, kv_len, chosen token, KV bytes, ms (warm-up marked)."""
    lines = [f"{'step':>4}  {'phase':<7} {'q_len':>5} {'kv_len':>6}  {'token':<16} {'kv_bytes':>10} {'ms':>9}"]
    for t in traces:
        ms = f"{t.latency_ms:9.2f}" + (f" (median of {t.timing.repeats})" if t.timing.repeats > 1 else "")
        lines.append(f"{t.step:>4}  {t.phase:<7} {t.q_len:>5} {t.kv_len:>6}  {t.token!r:<16} {t.kv_bytes:>10,} {ms}")
    return "\n".join(lines)


def _run(args) -> int:
    from engine.generate.stepper import Stepper

    check_json_path(args.json)
    lm = load_from(args)
    stepper = Stepper(lm, args.prompt, use_cache=not args.no_cache, sampling=sampling_from(args),
                      max_new_tokens=args.new_tokens, stop_strings=args.stop or ())
    stepper.run()
    print(stepper.text)
    print()
    print(step_table(stepper.records))
    print(f"stop reason: {stepper.stop_reason}")
    if args.json:
        write_json(args.json, stepper.report(attention=args.attention))
    return 0


def _compare(args) -> int:
    from engine.generate.compare import compare

    check_json_path(args.json)
    lm = load_from(args)
    rep = compare(lm, args.prompt, args.new_tokens, sampling=sampling_from(args))
    print(f"cache:    {rep.text['cache']!r}")
    print(f"no cache: {rep.text['nocache']!r}")
    print(f"identical tokens: {rep.identical}   largest logit difference: {rep.max_logit_diff:.3g}")
    sp = rep.speedup
    if sp.median_ratio:
        print(f"decode speed-up with the cache: median step x{sp.median_ratio:.2f}, total x{sp.total_ratio:.2f}")
    if args.json:
        write_json(args.json, rep.to_dict())
    return 0


def _kv_size(args) -> int:
    from physics import kvcalc

    try:
        kvcalc.check_inputs(args.tokens, args.batch)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        arch = kvcalc.from_table(args.model)
    except KeyError:
        arch = kvcalc.from_source(args.model)  # a DecodeLabError here is reported by main()
    elem = kvcalc.KV_DTYPES[args.dtype]
    total = arch.kv_bytes(args.tokens, args.batch, elem)
    mha = arch.as_mha()  # what GQA, MQA or MLA saves against: every query head with its own K and V
    note = kvcalc.context_note(arch, args.tokens)  # GPT-2 reads at most 1,024 positions: say so beside the bytes
    if args.json:
        print(json.dumps({"bytes": int(total), "bytes_per_token": arch.kv_bytes_per_token(elem),
                          "bytes_per_layer": [int(b) for b in arch.kv_bytes_per_layer(args.tokens, args.batch, elem)],
                          "layers": arch.layers, "kv_heads": arch.kv_heads, "head_dim": arch.head_dim,
                          "k_head_dim": arch.k_dim, "v_head_dim": arch.v_dim,
                          "windows": list(arch.windows), "attention": arch.attention, "mla_dim": arch.mla_dim,
                          "as_mha": {"bytes": int(mha.kv_bytes(args.tokens, args.batch, elem)),
                                     "bytes_per_token": mha.kv_bytes_per_token(elem)},
                          "max_positions": arch.max_positions, "note": note,
                          "tokens": args.tokens, "batch": args.batch, "dtype": args.dtype}))
    else:
        print(f"{arch.name} ({arch.attention}): KV cache for {args.tokens:,} tokens x batch {args.batch} "
              f"in {args.dtype}: {human_bytes(total)} (estimate from its config)")
        print(kvcalc.formula(arch, args.tokens, args.batch, elem))
        if arch.attention != "MHA":
            as_mha = mha.kv_bytes(args.tokens, args.batch, elem)
            print(f"the same model as MHA ({arch.heads} heads x (K {arch.k_dim} + V {arch.v_dim})): "
                  f"{human_bytes(as_mha)}, x{as_mha / total:.1f} what {arch.attention} keeps")
        if note:
            print(f"note: {note}")
    return 0


def _serve(args) -> int:
    from engine.generate.serving import DEFAULTS, ServingRun
    from topics.serving.scenarios import scenario

    check_json_path(args.json)
    if args.scenario:
        sc = scenario(args.scenario)
        specs, sizing = sc["requests"], dict(sc["sizing"])
    else:
        specs, sizing = read_requests(args.requests), dict(DEFAULTS)
    for name in ("page_size", "num_blocks", "max_batch_tokens"):
        if getattr(args, name) is not None:
            sizing[name] = getattr(args, name)
    if args.no_prefix_sharing:
        sizing["prefix_sharing"] = False
    if args.no_chunking:
        sizing["chunking"] = False
    if args.preemption:
        sizing["preemption"] = args.preemption
    if args.slots is not None:
        sizing["max_seqs"] = args.slots
    if args.batching:
        sizing["batching"] = args.batching
    lm = load_from(args)
    if lm.device.type == "cpu":  # time what the app serves with: one thread for a small model (physics/machine.py)
        from physics import machine

        machine.use_serving_threads(int(lm.spec.parameters))
    if args.compare_batching:  # the same requests with continuous and with static batching, measured side by side
        from topics.serving.measure import batching_comparison, log_orders, log_queue
        from topics.serving.orders import order_spread

        q = batching_comparison(lm, specs, sizing, rounds=args.rounds)
        log_queue(q)
        o = order_spread(lm, specs, sizing, orders=args.orders)
        log_orders(o, given="the shipped order" if args.scenario else "the order given")
        if args.json:
            write_json(args.json, {**q.to_dict(), "orders": o.to_dict()})
        return 0
    run = ServingRun(lm, specs, **sizing)
    slots = f", {run.max_seqs} batch slots" if run.max_seqs else ""
    print(f"{lm.spec.name} on {lm.device}: {len(specs)} requests, page {run.page_size}, {run.num_blocks} blocks, "
          f"{run.max_batch_tokens} tokens per pass, prefix sharing {'on' if run.prefix_sharing else 'off'}, "
          f"chunked prefill {'on' if run.chunking else 'off'}, preemption {run.preemption}{slots}, "
          f"{run.batching} batching")
    print(f"{'step':>4}  {'pass: request phase q_len':<58} {'used':>4} {'free':>4} {'shared':>6} {'ms':>8}")
    for st in run.run():
        rows = " ".join(f"{r.id}:{r.phase[0]}{r.q_len}" for r in st.rows) or "(waiting for arrivals)"
        extra = (f"  preempted {','.join(st.preempted)}" if st.preempted else "") + \
            (f"  shared {dict(st.prefix_hits)}" if st.prefix_hits else "") + \
            (f"  cached {st.blocks_cached}" if st.blocks_cached else "") + \
            (f"  evicted {st.blocks_evicted}" if st.blocks_evicted else "")
        ms = f"{st.forward_ms:8.2f}" if st.forward_ms is not None else f"{'-':>8}"
        print(f"{st.step:>4}  {rows[:58]:<58} {st.blocks_used:>4} {st.blocks_free:>4} {st.blocks_shared:>6} {ms}{extra}")
    rep = run.report()
    print()
    for r in rep["requests"]:
        tpot = "-" if r["tpot_ms"] is None else f"{r['tpot_ms']:.2f} ms"
        print(f"{r['id']}: arrives {r['arrive']}, first token step {r['first_token_step']} (TTFT {r['ttft_steps']} steps, "
              f"{r['ttft_ms']:.1f} ms), TPOT {tpot}, {len(r['generated_ids'])} tokens ({r['stop_reason']}), "
              f"preempted {r['preemptions']}x, prefix hits {r['prefix_hit_tokens']}: {r['text'][:60]!r}")
    print(f"positions skipped by prefix sharing: {rep['prefix_hit_tokens']}; preemptions: {rep['preemptions']}; "
          f"{rep['generated_tokens']} tokens in {rep['wall_ms']:.0f} ms = {rep['tokens_per_s']:.0f} tokens/s (measured)")
    if args.json:
        write_json(args.json, rep)
    return 0


def read_requests(path: str | None) -> list:
    """A JSON file: a list of {"prompt": str, "max_new_tokens": int, "arrive": step}. Every problem is one message."""
    from engine.errors import StepError
    from engine.generate.serving import RequestSpec

    if not path:
        raise StepError("Give the requests: --requests FILE (a JSON list), or --scenario NAME.")
    try:
        with open(path, encoding="utf-8") as f:
            items = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StepError(f"--requests {path}: cannot be read as JSON ({type(e).__name__}).") from None
    if not isinstance(items, list):
        raise StepError(f"--requests {path}: expected a JSON list of requests, got {type(items).__name__}.")
    specs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise StepError(f"--requests {path}: request {i} needs a \"prompt\" (text).")
        extra = set(item) - {"prompt", "max_new_tokens", "arrive"}
        if extra:
            raise StepError(f"--requests {path}: request {i} has unknown fields {sorted(extra)}.")
        specs.append(RequestSpec(item["prompt"], item.get("max_new_tokens", 32), item.get("arrive", 0)))
    return specs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Decode Lab engine")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="generate step by step and print a per-step table")
    r.add_argument("--prompt", required=True)
    new_tokens_arg(r, 20, "new tokens at most")
    r.add_argument("--no-cache", action="store_true", help="recompute the whole sequence at every decode step")
    r.add_argument("--stop", action="append", help="stop string (repeatable)")
    r.add_argument("--json", help="write the whole trace here")
    r.add_argument("--attention", action="store_true", help="include attention weights in the JSON")
    model_args(r)
    sampling_args(r)
    r.set_defaults(func=_run)

    c = sub.add_parser("compare", help="cache on vs off: same tokens? how much faster?")
    c.add_argument("--prompt", required=True)
    new_tokens_arg(c, 20, "new tokens per run")
    c.add_argument("--json")
    model_args(c)
    sampling_args(c)
    c.set_defaults(func=_compare)

    k = sub.add_parser("kv-size", help="KV-cache bytes of a model (table name, hub id or folder: config only)")
    k.add_argument("--model", required=True, help="a name from assets/model_configs.csv, or a config source")
    k.add_argument("--tokens", type=int, required=True)
    k.add_argument("--batch", type=int, default=1)
    k.add_argument("--dtype", default="fp16", choices=["fp32", "fp16", "bf16", "fp8", "int4"])
    k.add_argument("--json", action="store_true", help="print JSON instead of text")
    k.set_defaults(func=_kv_size)

    for module in COMMANDS_ELSEWHERE:  # bench and gpu-check, ladder, speculate, budget
        module.add_parser(sub)

    v = sub.add_parser("serve", help="many requests on one model: continuous batching over a paged KV cache")
    what = v.add_mutually_exclusive_group(required=True)
    what.add_argument("--requests", help='JSON list of {"prompt": str, "max_new_tokens": int, "arrive": step}')
    what.add_argument("--scenario", help="one of the Serving page's scenarios: arrivals, shared_prefix, "
                                         "long_prompt, preemption, prefix_cache, queue")
    v.add_argument("--page-size", dest="page_size", type=int, help="positions per block (default 16)")
    v.add_argument("--blocks", dest="num_blocks", type=int, help="blocks in the pool (default 128)")
    v.add_argument("--max-batch-tokens", dest="max_batch_tokens", type=int, help="tokens per pass (default 256)")
    v.add_argument("--no-prefix-sharing", dest="no_prefix_sharing", action="store_true")
    v.add_argument("--no-chunking", dest="no_chunking", action="store_true", help="prefill whole prompts only")
    v.add_argument("--preemption", choices=["newest", "most_blocks"],
                   help="which running request is preempted when blocks run out (default newest, as vLLM)")
    v.add_argument("--slots", type=int, help="batch slots: requests running at once (default: as many as fit)")
    v.add_argument("--batching", choices=["continuous", "static"],
                   help="how a freed batch slot is refilled: the next pass (continuous, the default) or when the whole "
                        "batch has finished (static)")
    v.add_argument("--compare-batching", dest="compare_batching", action="store_true",
                   help="serve the requests with continuous and with static batching, alternated rounds after a "
                        "warm-up, and print each way's tokens/s (every request makes all its tokens)")
    v.add_argument("--rounds", type=positive, default=5, help="timed rounds of --compare-batching (default 5)")
    v.add_argument("--orders", type=positive, default=200,
                   help="random orders of the same requests --compare-batching schedules both ways (default 200)")
    v.add_argument("--json", help="write the run (requests, every step, totals) here")
    model_args(v)
    v.set_defaults(func=_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (DecodeLabError, BadPath) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
