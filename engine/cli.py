"""Command line: `python -m engine {run,compare,speculate,serve,bench,ladder,gpu-check,kv-size}` (training: `python -m tools.train`).

Every refusal is one line on stderr and exit status 2: a bad --json path is refused
before the run starts, so a long run is never lost at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.errors import DecodeLabError
from engine.units import human_bytes


def _load(args):
    from engine.load.load import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def _sampling(args):
    from engine.forward.sampling import Sampling

    # --top-k 0 means "top-k off", exactly as in the app: it does not switch greedy to sampling
    greedy = args.temperature is None and not args.top_k and args.top_p is None
    return Sampling(greedy=greedy, temperature=1.0 if args.temperature is None else args.temperature,
                    top_k=args.top_k or 0, top_p=1.0 if args.top_p is None else args.top_p,
                    repetition_penalty=args.repetition_penalty, seed=args.seed)


def step_table(traces) -> str:
    """Per-step table: phase, q_len, kv_len, chosen token, KV bytes, ms (warm-up marked)."""
    lines = [f"{'step':>4}  {'phase':<7} {'q_len':>5} {'kv_len':>6}  {'token':<16} {'kv_bytes':>10} {'ms':>9}"]
    for t in traces:
        ms = f"{t.latency_ms:9.2f}" + (f" (median of {t.timing.repeats})" if t.timing.repeats > 1 else "")
        lines.append(f"{t.step:>4}  {t.phase:<7} {t.q_len:>5} {t.kv_len:>6}  {t.token!r:<16} {t.kv_bytes:>10,} {ms}")
    return "\n".join(lines)


def _run(args) -> int:
    from engine.generate.stepper import Stepper

    _check_json_path(args.json)
    lm = _load(args)
    stepper = Stepper(lm, args.prompt, use_cache=not args.no_cache, sampling=_sampling(args),
                      max_new_tokens=args.new_tokens, stop_strings=args.stop or ())
    stepper.run()
    print(stepper.text)
    print()
    print(step_table(stepper.traces))
    print(f"stop reason: {stepper.stop_reason}")
    if args.json:
        _write_json(args.json, stepper.report(attention=args.attention))
    return 0


def _compare(args) -> int:
    from engine.generate.compare import compare

    _check_json_path(args.json)
    lm = _load(args)
    rep = compare(lm, args.prompt, args.new_tokens, sampling=_sampling(args))
    rep.pop("steppers")
    print(f"cache:    {rep['text']['cache']!r}")
    print(f"no cache: {rep['text']['nocache']!r}")
    print(f"identical tokens: {rep['identical']}   largest logit difference: {rep['max_logit_diff']:.3g}")
    sp = rep["speedup"]
    if sp["median_ratio"]:
        print(f"decode speed-up with the cache: median step x{sp['median_ratio']:.2f}, total x{sp['total_ratio']:.2f}")
    if args.json:
        _write_json(args.json, rep)
    return 0


def _bench(args) -> int:
    from engine.measure.bench import run_bench

    _check_json_path(args.json)
    lm = _load(args)
    res = run_bench(lm, lengths=tuple(args.lengths), rounds=args.rounds, app=not args.no_app,
                    ladder_sizes=tuple(args.ladder_sizes))
    if args.json:
        _write_json(args.json, res)
    return 0


def _ladder(args) -> int:
    """Grow the model: prefill and decode timed at several sizes, each placed on this device's roofline."""
    from tqdm import tqdm

    from engine.load.rungs import plan
    from engine.measure.ladder import default_tokens, measure_ladder, timing_dtype

    _check_json_path(args.json)
    lm = _load(args)
    tokens = args.tokens or default_tokens(lm.device)
    dtype = lm.dtype if args.dtype else timing_dtype(lm)  # a GPU's ladder in bf16 unless --dtype says otherwise
    planned = plan(lm, args.sizes, tokens, dtype)  # a rung that would not fit is refused before the bar starts
    with tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {elapsed}") as bar:
        def progress(fraction: float, text: str) -> None:
            bar.set_description_str(text[:70])
            bar.update(max(0, round(fraction * 100) - bar.n))

        lad = measure_ladder(lm, args.sizes, tokens=tokens, repeats=args.repeats, on_progress=progress,
                             planned=planned, dtype=dtype)
    r = lad.roof
    print(f"{lad.model} ({lad.family}) on {lad.device}, {lad.dtype}; s = {lad.tokens} tokens ({lad.prompt}); "
          f"medians of {lad.repeats} after a warm-up run (excluded), min-max beside them")
    rates = ", ".join(f"{b / 2**20:,.0f} MiB {v / 1e9:,.1f}" for b, v in r.bandwidths) or f"{r.bandwidth / 1e9:,.1f}"
    print(f"roofline measured here: matmul {r.peak_flops / 1e9:,.1f} GFLOP/s; memory bandwidth GB/s by bytes moved "
          f"(the better of a copy and a matrix-vector read): {rates} (ridge {r.ridge:.1f} FLOP/byte in cache, "
          f"{r.dram_ridge:.1f} from DRAM); each step's memory bound uses the bandwidth at its own bytes; bounds are "
          f"estimates, labels from roofline.verdict")
    print(f"rungs other than the model itself: {lad.weights_note}")
    print()
    print(lad.text_table())
    from engine.measure.noise import ladder_note

    if ladder_note(lad):
        print(ladder_note(lad))
    if lad.left_out:
        print(f"left out (would not fit this device's memory): {', '.join(lad.left_out)}")
    if lad.compile_s:
        print(f"compiling the lean path (and the recipe): {lad.compile_s:.1f} s of the wall time, never in a step's time")
    print(f"ladder wall time {lad.wall_s:.1f} s; resident memory {human_bytes(lad.rss_before_bytes)} before, "
          f"{human_bytes(lad.rss_after_bytes)} after")
    if args.json:
        _write_json(args.json, lad.to_dict())
    return 0


def _gpu_check(args) -> int:
    """Every GPU figure of issue 34 beside its target (engine/measure/gpu_check.py); exit 1 if one does not hold."""
    from engine.measure.gpu_check import gpu_check, require_cuda, table

    _check_json_path(args.json)
    require_cuda()
    doc, rows = gpu_check(sizes=args.sizes, sweep_shape=args.sweep_shape, race_shape=args.race_shape,
                          tests=not args.no_tests, races=not args.no_races, log=lambda text: print(text, flush=True))
    print()
    print(table(rows))
    if args.json:
        _write_json(args.json, doc)
    return 0 if all(r["holds"] is not False for r in rows) else 1


def _kv_size(args) -> int:
    from engine.measure import kvcalc

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
    if args.json:
        print(json.dumps({"bytes": int(total), "bytes_per_token": arch.kv_bytes_per_token(elem),
                          "bytes_per_layer": [int(b) for b in arch.kv_bytes_per_layer(args.tokens, args.batch, elem)],
                          "layers": arch.layers, "kv_heads": arch.kv_heads, "head_dim": arch.head_dim,
                          "windows": list(arch.windows), "attention": arch.attention, "mla_dim": arch.mla_dim,
                          "tokens": args.tokens, "batch": args.batch, "dtype": args.dtype}))
    else:
        print(f"{arch.name} ({arch.attention}): KV cache for {args.tokens:,} tokens x batch {args.batch} "
              f"in {args.dtype}: {human_bytes(total)} (estimate from its config)")
        print(kvcalc.formula(arch, args.tokens, args.batch, elem))
    return 0


def _speculate(args) -> int:
    from engine.load.load import DRAFT_MODEL, load_model
    from engine.generate.drafters import DraftModel, PromptLookup
    from engine.measure.speculative import measure

    _check_json_path(args.json)
    lm = _load(args)
    if args.lookup is not None:
        drafter = PromptLookup(args.lookup)
    else:
        drafter = DraftModel(load_model(args.draft or DRAFT_MODEL, device=args.device, dtype=args.dtype))
    m = measure(lm, args.prompt, args.new_tokens, drafter, k=args.k, stop_strings=args.stop or ())
    alpha = "n/a (nothing proposed)" if m["acceptance_rate"] is None else \
        f"{m['acceptance_rate']:.1%} of proposals ({m['accepted']} of {m['proposed']}); α = {m['alpha']:.1%} of " \
        f"the {m['checked']} the target checked"
    print(f"target {m['target']} · drafter {m['drafter']} · k = {m['k']} · {len(m['generated_ids'])} tokens · "
          f"{m['device']}")
    print(m["text"])
    print()
    print(f"same tokens as plain greedy decoding: {m['identical']}")
    print(f"acceptance rate:              {alpha}")
    print(f"tokens per target pass:       {m['tokens_per_target_pass'] or 0:.2f} (formula E = "
          f"{m['expected_tokens_per_pass']:.2f}; plain decoding 1)")
    print(f"target passes:                {m['target_passes']} (plain decoding {m['plain_target_passes']}; "
          f"saved {m['target_passes_saved']})")
    print(f"time per token (decode):      plain {m['plain_ms_per_token']:.2f} ms, speculative "
          f"{m['speculative_ms_per_token']:.2f} ms (medians of {m['repeats']} alternated runs, warm-up excluded)")
    print(f"measured speed-up:            x{m['speedup']:.2f}")
    print(f"cost ratio c:                 {m['cost_ratio_c']:.3f} (draft ms per proposed token / verify ms)")
    print(f"formula's prediction:         x{m['predicted_speedup']:.2f} (E / (k·c + 1), Leviathan et al. 2023; "
          f"E from α)")
    print(f"verdict: {m['verdict']}")
    if args.json:
        _write_json(args.json, m)
    return 0


def _serve(args) -> int:
    from engine.generate.serving import DEFAULTS, ServingRun
    from engine.generate.serving.scenarios import scenario

    _check_json_path(args.json)
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
    lm = _load(args)
    run = ServingRun(lm, specs, **sizing)
    print(f"{lm.spec.name} on {lm.device}: {len(specs)} requests, page {run.page_size}, {run.num_blocks} blocks, "
          f"{run.max_batch_tokens} tokens per pass, prefix sharing {'on' if run.prefix_sharing else 'off'}, "
          f"chunked prefill {'on' if run.chunking else 'off'}")
    print(f"{'step':>4}  {'pass: request phase q_len':<58} {'used':>4} {'free':>4} {'shared':>6} {'ms':>8}")
    for st in run.run():
        rows = " ".join(f"{r.id}:{r.phase[0]}{r.q_len}" for r in st.rows) or "(waiting for arrivals)"
        extra = (f"  preempted {','.join(st.preempted)}" if st.preempted else "") + \
            (f"  shared {dict(st.prefix_hits)}" if st.prefix_hits else "")
        ms = f"{st.forward_ms:8.2f}" if st.forward_ms is not None else f"{'-':>8}"
        print(f"{st.step:>4}  {rows[:58]:<58} {st.blocks_used:>4} {st.blocks_free:>4} {st.blocks_shared:>6} {ms}{extra}")
    rep = run.report()
    print()
    for r in rep["requests"]:
        tpot = "-" if r["tpot_ms"] is None else f"{r['tpot_ms']:.2f} ms"
        print(f"{r['id']}: arrives {r['arrive']}, first token step {r['first_token_step']} (TTFT {r['ttft_steps']} steps, "
              f"{r['ttft_ms']:.1f} ms), TPOT {tpot}, {len(r['generated_ids'])} tokens ({r['stop_reason']}), "
              f"preempted {r['preemptions']}x, prefix hits {r['prefix_hit_tokens']}: {r['text'][:60]!r}")
    print(f"prompt tokens skipped by prefix sharing: {rep['prefix_hit_tokens']}; preemptions: {rep['preemptions']}; "
          f"{rep['generated_tokens']} tokens in {rep['wall_ms']:.0f} ms = {rep['tokens_per_s']:.0f} tokens/s (measured)")
    if args.json:
        _write_json(args.json, rep)
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


class BadPath(Exception):
    """A --json path that cannot be written."""


def _check_json_path(path: str | None) -> None:
    """Refuse a --json path that cannot be written, before any work is done.

    Tried, not guessed: the file is opened for appending (and removed again if this made it), so a
    read-only disk, /proc, or a folder only root may write (os.access says yes to root) are all caught.
    """
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise BadPath(f"--json {path}: that is a folder, not a file")
    if not p.parent.is_dir():
        raise BadPath(f"--json {path}: the folder {p.parent} does not exist")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise BadPath(f"--json {path}: cannot be written ({e.strerror or type(e).__name__})") from None
    if not existed:
        p.unlink(missing_ok=True)


def _write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print(f"wrote {path}")


def _positive(text: str) -> int:
    """argparse type: a whole number >= 1 (argparse turns the ValueError into a one-line usage error)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _new_tokens_arg(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """--new-tokens N (--steps N is the old spelling of the same number)."""
    p.add_argument("--new-tokens", "--steps", dest="new_tokens", type=int, default=default, help=what)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="bundled name, 'default', Hugging Face id or local folder")
    p.add_argument("--device", default=None, help="cpu, cuda or mps (default: best available)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: fp32 for the bundled models "
                                                 "and on a CPU; bf16 for others on a GPU; a GPU's ladder times bf16)")


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, help="sample with this temperature (default: greedy)")
    p.add_argument("--top-k", dest="top_k", type=int)
    p.add_argument("--top-p", dest="top_p", type=float)
    p.add_argument("--repetition-penalty", dest="repetition_penalty", type=float, default=1.0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Decode Lab engine")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="generate step by step and print a per-step table")
    r.add_argument("--prompt", required=True)
    _new_tokens_arg(r, 20, "new tokens at most")
    r.add_argument("--no-cache", action="store_true", help="recompute the whole sequence at every decode step")
    r.add_argument("--stop", action="append", help="stop string (repeatable)")
    r.add_argument("--json", help="write the whole trace here")
    r.add_argument("--attention", action="store_true", help="include attention weights in the JSON")
    _model_args(r)
    _sampling_args(r)
    r.set_defaults(func=_run)

    c = sub.add_parser("compare", help="cache on vs off: same tokens? how much faster?")
    c.add_argument("--prompt", required=True)
    _new_tokens_arg(c, 20, "new tokens per run")
    c.add_argument("--json")
    _model_args(c)
    _sampling_args(c)
    c.set_defaults(func=_compare)

    b = sub.add_parser("bench", help="engine vs generate overhead; cache vs no-cache")
    b.add_argument("--json")
    b.add_argument("--lengths", type=_positive, nargs="+", default=[64, 256, 512])
    b.add_argument("--rounds", type=_positive, default=7)
    b.add_argument("--no-app", dest="no_app", action="store_true", help="skip the AppTest click measurement")
    b.add_argument("--ladder-sizes", dest="ladder_sizes", nargs="*", default=["own", "110M"],
                   help="the size ladder's rungs in the bench (default: own 110M; none given: no ladder)")
    _model_args(b)
    b.set_defaults(func=_bench)

    g = sub.add_parser("ladder", help="grow the model: prefill and decode timed at several sizes on this device's "
                                      "roofline (random weights, timing only)")
    g.add_argument("--sizes", nargs="+", help="parameter counts or published shapes, e.g. own 25M 110M 1.1B "
                                              "SmolLM2-135M Llama-3-8B ('own': the model itself; default: own 25M "
                                              "50M 110M 220M on a CPU; on a GPU own SmolLM2-135M TinyLlama-1.1B "
                                              "Llama-3-8B as memory allows)")
    g.add_argument("--tokens", type=_positive, default=None,
                   help="s: the prefill's length and the decode step's context (default 128 on a CPU, 384 on a GPU)")
    g.add_argument("--repeats", type=_positive, default=5, help="timed runs per pass after a warm-up run")
    g.add_argument("--json", help="write the ladder here (the keys of engine/measure/ladder_record.py)")
    _model_args(g)
    g.set_defaults(func=_ladder)

    gc = sub.add_parser("gpu-check", help="on a CUDA GPU: the gpu tests, the ladder, the prefill sweep and the races, "
                                          "each target beside its measured figure (about 5 minutes)")
    gc.add_argument("--json", help="write the ladder with every figure here (ship it as assets/ladder_gpu.json)")
    gc.add_argument("--sizes", nargs="+", help="the ladder's rungs (default: own TinyLlama-1.1B Llama-3-8B)")
    gc.add_argument("--sweep-shape", dest="sweep_shape", help="the rung the prefill sweep runs at (default Llama-3-8B)")
    gc.add_argument("--race-shape", dest="race_shape", default="TinyLlama-1.1B", help="the rung the lean race runs at")
    gc.add_argument("--no-tests", dest="no_tests", action="store_true", help="skip the gpu tests")
    gc.add_argument("--no-races", dest="no_races", action="store_true", help="skip both races")
    gc.set_defaults(func=_gpu_check)

    k = sub.add_parser("kv-size", help="KV-cache bytes of a model (table name, hub id or folder: config only)")
    k.add_argument("--model", required=True, help="a name from assets/model_configs.csv, or a config source")
    k.add_argument("--tokens", type=int, required=True)
    k.add_argument("--batch", type=int, default=1)
    k.add_argument("--dtype", default="fp16", choices=["fp32", "fp16", "bf16", "fp8", "int4"])
    k.add_argument("--json", action="store_true", help="print JSON instead of text")
    k.set_defaults(func=_kv_size)

    s = sub.add_parser("speculate", help="speculative decoding vs plain decoding: same tokens? faster?")
    s.add_argument("--prompt", required=True)
    _new_tokens_arg(s, 40, "new tokens at most")
    s.add_argument("--stop", action="append", help="stop string (repeatable): both runs stop as the Stepper does")
    drafter = s.add_mutually_exclusive_group()
    drafter.add_argument("--draft", help="draft model sharing the target's tokenizer (default: tinystories-draft)")
    drafter.add_argument("--lookup", type=int, metavar="NGRAM", help="draft by prompt lookup, n-grams up to NGRAM")
    s.add_argument("--k", type=int, default=4, help="proposals per round")
    s.add_argument("--json", help="write the numbers and every round here")
    _model_args(s)
    s.set_defaults(func=_speculate)

    v = sub.add_parser("serve", help="many requests on one model: continuous batching over a paged KV cache")
    what = v.add_mutually_exclusive_group(required=True)
    what.add_argument("--requests", help='JSON list of {"prompt": str, "max_new_tokens": int, "arrive": step}')
    what.add_argument("--scenario", help="one of the Serving page's scenarios: arrivals, shared_prefix, "
                                         "long_prompt, preemption")
    v.add_argument("--page-size", dest="page_size", type=int, help="positions per block (default 16)")
    v.add_argument("--blocks", dest="num_blocks", type=int, help="blocks in the pool (default 128)")
    v.add_argument("--max-batch-tokens", dest="max_batch_tokens", type=int, help="tokens per pass (default 256)")
    v.add_argument("--no-prefix-sharing", dest="no_prefix_sharing", action="store_true")
    v.add_argument("--no-chunking", dest="no_chunking", action="store_true", help="prefill whole prompts only")
    v.add_argument("--json", help="write the run (requests, every step, totals) here")
    _model_args(v)
    v.set_defaults(func=_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (DecodeLabError, BadPath) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
