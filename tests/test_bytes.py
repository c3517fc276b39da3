"""Bytes are time (topics/bytes/): the storages give fp32's logits within their rounding, the bytes are counted
from the tensors, the line's slope and crossing are computed right, every sentence follows its number, and the
shipped recording's damage is what the bundled models give."""

from __future__ import annotations

import dataclasses
import json
import statistics
from contextlib import contextmanager

import pytest
import torch

from engine.forward.lean import LeanLlama
from engine.load.load import load_model
from topics.bytes import draw, figures, measure, storage
from topics.bytes import store as bytes_store
from topics.bytes.records import Damage, Line, Pass, Rates, Record, WindowDamage, fit

MODEL = "tinystories-llama"


@pytest.fixture(scope="module")
def lm():
    return load_model(MODEL, device="cpu", dtype="float32", warmup=False)


def ids_of(lm, n: int = 24) -> torch.Tensor:
    return torch.tensor([lm.tokenizer(measure.stories(1)[0], verbose=False)["input_ids"][:n]])


# ---------------------------------------------------------------- the storages, run


def test_each_storage_gives_fp32s_logits_within_its_rounding_and_the_same_top_token(lm):
    ids = ids_of(lm)
    n = ids.shape[1]
    with torch.no_grad():
        want = LeanLlama(lm.model, 1, n + 2)(ids, torch.arange(n)).float()
        for name, tol in (("fp32", 1e-5), ("bf16", 0.1), ("fp16", 0.02), ("int8", 0.15), ("int4", 0.5),
                          ("bf16 model", 0.1)):
            lean = storage.lean_pass(lm.model, name, n + 2)
            got = lean(ids, torch.arange(n)).float()
            scale = want.abs().max()
            assert (got - want).abs().max() / scale < tol, name
            assert got.argmax(-1).item() == want.argmax(-1).item(), name
            step = lean(ids[:, -1:], torch.tensor([n])).float()  # a decode step on the storage's own cache
            assert torch.isfinite(step).all(), name


def test_the_readable_models_parameters_are_never_changed(lm):
    before = {k: (p.data_ptr(), p.dtype, p.detach().clone()) for k, p in lm.model.named_parameters()}
    for name in storage.STORAGES:
        storage.lean_pass(lm.model, name, 8)
        storage.weight_damage(lm.model, name)
    for k, p in lm.model.named_parameters():
        ptr, dtype, value = before[k]
        assert (p.data_ptr(), p.dtype) == (ptr, dtype) and torch.equal(p.detach(), value), k


def test_bytes_read_are_counted_from_the_tensors_the_pass_holds(lm):
    """Weight-only: the matrices and the output head narrow (int8 with a 4-byte scale a row, int4 half a byte a
    weight with a 2-byte scale and zero a group), the norms and the table's one row fp32; the bf16 model: every
    tensor 2 bytes a number."""
    model, c = lm.model, lm.model.config
    every = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: the table is the output head
    row, head = c.hidden_size * 4, c.vocab_size * c.hidden_size
    assert c.tie_word_embeddings
    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n) + head
    norms = sum(p.numel() for p in model.parameters() if p.dim() == 1)
    outs = sum(p.shape[0] for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n) + c.vocab_size
    assert storage.read_bytes(storage.lean_pass(model, "fp32", 8)) == every + row
    assert storage.read_bytes(storage.lean_pass(model, "bf16 model", 8)) == (every + row) // 2
    for name, size in (("bf16", 2), ("fp16", 2)):
        assert storage.read_bytes(storage.lean_pass(model, name, 8)) == matrices * size + norms * 4 + row
    assert storage.read_bytes(storage.lean_pass(model, "int8", 8)) == matrices + outs * 4 + norms * 4 + row
    groups = matrices // storage.GROUP  # every bundled row a multiple of 128: a bf16 scale and zero a group
    assert storage.read_bytes(storage.lean_pass(model, "int4", 8)) == matrices // 2 + groups * 4 + norms * 4 + row
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    for name, elem in (("fp32", 4), ("bf16", 4), ("int8", 4), ("int4", 4), ("bf16 model", 2)):  # weight-only: fp32
        lean = storage.lean_pass(model, name, 8)
        assert storage.kv_bytes_per_token(lean) == 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * elem


def test_int8_rows_round_trip_within_half_a_step_of_their_scale():
    """Rounded to the nearest step of its row's scale (an fp32 scale a row)."""
    w = torch.randn(64, 32)
    q = storage.NarrowWeight(w, torch.int8)
    step = w.abs().amax(1, keepdim=True) / 127
    assert ((q.dequantized() - w).abs() <= step * 0.5 * (1 + 1e-5) + 1e-6).all()
    assert q.q.dtype == torch.int8 and q.q.abs().max() == 127 and q.scale.dtype == torch.float32


def test_int8_products_never_take_the_form_inductor_swaps_for_torchs_slow_int8_kernel():
    """`F.linear(x, q.to(x.dtype)) * scales` is a form inductor rewrites to `_weight_int8pack_mm` wherever the
    activations are bf16 (its woq pattern: CPU, CUDA, XPU); on the H200 that kernel decoded slower than the bf16
    model and prefilled 384 tokens in 5.9 s. Compiled here over bf16 activations, one row and several, the int8
    products are never rewritten (inductor's own counter), and give the dequantized matrix's product."""
    from torch._dynamo.utils import counters

    w = torch.randn(96, 256)
    q = storage.narrow(w.bfloat16(), "int8")
    kept = storage.rounded(w.bfloat16(), "int8")
    for rows in (1, 3):
        x = torch.randn(1, rows, 256, dtype=torch.bfloat16)
        counters.clear()
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(q, fullgraph=True)(x).float()
        assert counters["inductor"]["woq_matcher_count"] == 0, rows
        want = x.float() @ kept.T
        assert (got - want).abs().max() / want.abs().max() < 2e-2, rows
    torch._dynamo.reset()


def test_int4_holds_each_group_within_half_a_step_and_reads_half_a_byte_a_weight():
    """Groups of 128 along a row, each in 16 steps from its least value (a bf16 scale and zero point); torch's int4
    kernel (bf16 inputs) gives the product of the dequantized matrix; the pass reads the packed bytes and scales."""
    w = torch.randn(32, 256)
    q, kept = storage.narrow(w, "int4"), storage.rounded(w, "int4")
    step = (w.view(32, 2, 128).amax(-1) - w.view(32, 2, 128).amin(-1)) / 15
    assert ((kept - w).view(32, 2, 128).abs() <= step[..., None] * 0.51 + 2e-2 * w.abs().max()).all()
    assert storage.nbytes(q) == 32 * 256 // 2 + 2 * 32 * 2 * 2  # 4 bits a weight; a scale and zero a group, bf16
    x = torch.randn(3, 256)
    want = x.bfloat16().float() @ kept.T
    assert ((q(x) - want).abs().max() / want.abs().max()) < 2e-2


def test_a_measurement_runs_every_storage_the_contexts_and_the_window_eagerly(lm):
    rates, passes, kv, _ = measure.storages(lm, tokens=8, rounds=2, contexts=(16, 32, 64), compile=False,
                                            probe=lambda: rates_()[0])
    rec = synthetic(passes=passes, rounds=rates, kv=kv)
    assert rec.storages() == list(storage.STORAGES)
    assert [p.context for p in rec.context_passes()] == [16, 32, 64]
    e, full = rec.evicted()
    assert (e.context, full.context) == (16, 64) and e.kv_bytes == kv * 16
    assert all(len(p.samples_ms) == 2 for p in passes) and len(rates) == 2
    assert Record.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


def test_the_timed_rounds_hold_the_models_turn_and_its_compiles_and_warm_ups_never_do(lm, monkeypatch):
    """Lesson 12's button held the model's lock for its whole job: for 19 minutes every other page's step waited
    30 s and gave up ("The server is busy"). Each round, the timed work, is now in the model's turn, so a student's
    step waits one round; everything else (the storages' conversions, compiles, warm-ups) runs outside it."""
    timed, held = [], []

    @contextmanager
    def hold():
        held.append(True)
        try:
            yield
        finally:
            held.pop()

    warming = []
    real = measure.run_once
    monkeypatch.setattr(measure, "run_once", lambda *a: (warming or timed.append(bool(held)), real(*a))[1])
    warm = measure._warm

    def warm_up(*a):
        warms.append(bool(held))
        warming.append(True)
        try:
            return warm(*a)
        finally:
            warming.pop()

    warms, probes = [], []
    monkeypatch.setattr(measure, "_warm", warm_up)
    _, passes, _, _ = measure.storages(lm, tokens=8, rounds=2, contexts=(16, 32), compile=False, hold=hold,
                                       probe=lambda: (probes.append(bool(held)), rates_()[0])[1])
    assert len(timed) == 2 * len(passes) and all(timed)  # every timed pass, each round, in the model's turn
    assert warms and not any(warms)  # the conversions' warm-ups (a compile's, where compiled) outside it
    assert probes == [True, True]


def test_a_student_takes_a_step_while_lesson_12s_measurement_runs(lm, monkeypatch):
    """The click after pressing the button: the job started, a student's step (the model's turn, as every page
    takes it) gets the model between two rounds, not after the job."""
    import threading

    between, go_on = threading.Event(), threading.Event()

    def record(rlm, label, hold, **_):
        with hold():
            pass
        between.set()  # between two rounds: the student's turn
        assert go_on.wait(30)
        with hold():
            return "recorded"

    monkeypatch.setattr(measure, "record", record)
    monkeypatch.setattr("physics.rungs.rung_model", lambda lm, size, dtype: lm)
    monkeypatch.setattr(bytes_store, "_JOB", None)
    job = bytes_store.start(lm)
    assert between.wait(30)
    with lm.turn():  # would wait 30 s and raise Busy were the job holding the lock
        go_on.set()
    assert job.done.wait(30) and job.error is None and job.result == "recorded"


def test_a_storage_this_torch_cannot_run_is_left_out_and_said_the_reference_never(lm, monkeypatch):
    """A GPU whose torch lacks a kernel (int4's, say) still records the rest: that storage is left out of the
    passes and its reason kept in the record's notes, which the page and the CLI print; the reference cannot be."""
    real = storage.lean_pass

    def refusing(model, name, max_len):
        if name == refused:
            raise NotImplementedError(f"no kernel for {name} here\nsecond line")
        return real(model, name, max_len)

    monkeypatch.setattr(storage, "lean_pass", refusing)
    monkeypatch.setattr(measure, "_probe", lambda device, dtypes: lambda: rates_()[0])
    refused = "int4"
    rec = measure.record(lm, "own", rounds=1, contexts=(16, 32, 64), compile=False, storages_=("fp32", "bf16", "int4"),
                         tokens=8, with_damage=False)
    assert rec.storages() == ["fp32", "bf16"] and rec.ratio("int4", "decode") is None
    assert rec.notes == ("int4: not measured here: NotImplementedError: no kernel for int4 here",)
    assert rec.notes[0] in draw.text_tables(rec)
    refused = "fp32"
    with pytest.raises(NotImplementedError):
        measure.record(lm, "own", rounds=1, contexts=(), compile=False, storages_=("fp32", "bf16"), tokens=8,
                       with_damage=False)


def test_every_context_is_run_twice_more_after_the_last_graph_is_made_before_any_is_timed(lm, monkeypatch):
    """The first context compiles a graph of its own, the second one that every context then runs; on a GPU each
    context's first two calls on it are a warm-up and a CUDA graph's recording (13 and 30 ms against 5 on the
    H200). So between the second context's first call and the first timed round, each context runs twice or more."""
    calls = []
    real = measure.run_once
    monkeypatch.setattr(measure, "run_once", lambda fn, *args: calls.append(args[2:3]) or real(fn, *args))

    def probe():
        calls.append("round")
        return rates_()[0]

    measure.storages(lm, ("fp32",), tokens=8, rounds=1, contexts=(16, 32, 64), compile=False, probe=probe)
    before = calls[:calls.index("round")]
    first_calls = sorted(before.index(c) for c in set(before) if c)  # each context's first call, in order
    after = before[first_calls[1] + 1:]  # after the second context's first call: the graph every context runs
    assert {c: after.count((c,)) >= 2 for c in (16, 32, 64)} == {16: True, 32: True, 64: True}


def test_the_gpus_storages_run_on_a_bf16_model_against_it_in_bf16_arithmetic():
    """What a GPU times (st.for_device): the bf16 model the reference, int8 weight-only over it, every ratio against
    the bf16 model and every pass's arithmetic bf16; run here eagerly on a CPU, as gpu-check runs it on a GPU."""
    assert storage.for_device(torch.device("cuda")) == storage.GPU_STORAGES == ("bf16 model", "int8", "int4")
    bf16 = load_model(MODEL, device="cpu", dtype="bfloat16", warmup=False)
    ids = ids_of(bf16)
    n = ids.shape[1]
    with torch.no_grad():
        want = LeanLlama(bf16.model, 1, n + 2)(ids, torch.arange(n)).float()
        for name, tol in (("int8", 0.15), ("int4", 0.5)):
            got = storage.lean_pass(bf16.model, name, n + 2)(ids, torch.arange(n)).float()
            assert got.argmax(-1).item() == want.argmax(-1).item(), name
            assert (got - want).abs().max() / want.abs().max() < tol, name
    rates, passes, kv, _ = measure.storages(bf16, storage.GPU_STORAGES, tokens=8, rounds=2, contexts=(16, 32, 64),
                                            compile=False, probe=lambda: rates_()[0])
    rec = Record(**{**synthetic(passes=passes, rounds=rates, kv=kv).__dict__, "reference": "bf16 model"})
    assert rec.storages() == ["bf16 model", "int8", "int4"] and {p.arith for p in passes} == {"bf16"}
    assert {p.storage for p in rec.context_passes()} == {"bf16 model"} and kv == storage.kv_bytes_per_token(
        storage.lean_pass(bf16.model, "bf16 model", 8))
    assert rec.ratio("bf16 model", "decode") == 1.0 and rec.predicted_ratio("int8", "prefill") == pytest.approx(1.0)
    said = draw.storage_sentence(rec)
    assert "int8: the decode step is" in said and "int4: the decode step is" in said and "bf16 model's time" in said
    assert "keep bf16 model's arithmetic (bf16)" in draw.why_prefill(rec)
    assert "(bf16, counted from the cache)" in draw.context_sentence(rec)


def test_the_caches_plain_read_sums_every_byte_of_a_bf16_cache_as_4_byte_words(lm):
    """The context's slope is predicted from a plain read of the cache's own bytes; a bf16 cache (a GPU's) is read as
    the fp32 words the roof's read sums, not widened number by number: every K and V tensor of every layer, the
    same memory (not a copy), each byte counted once."""
    bf16 = load_model(MODEL, device="cpu", dtype="bfloat16", warmup=False)
    lean = storage.lean_pass(bf16.model, "bf16 model", 40)
    caches = [*lean.k_cache, *lean.v_cache]
    words = measure.cache_words(lean)
    assert len(words) == len(caches) == 2 * bf16.model.config.num_hidden_layers
    for w, c in zip(words, caches):
        assert w.dtype == torch.float32 and c.dtype == torch.bfloat16
        assert w.data_ptr() == c.data_ptr() and w.numel() * 4 == c.numel() * 2
    fp32 = storage.lean_pass(lm.model, "fp32", 40)
    assert all(w is c for w, c in zip(measure.cache_words(fp32), [*fp32.k_cache, *fp32.v_cache]))


def test_the_caches_plain_read_is_the_faster_of_the_roofs_two_ways_each_counting_the_bytes_it_read(monkeypatch):
    """The context's slope divides by the cache's plain read, taken as the roof's is: a sum of each tensor whole, and
    a matrix-vector product over each seen as rows of STREAM_COLUMNS (on the Xeon VM the second read a cache's bytes
    at 15 GB/s, the sum at 11.5, the attention in the step at 14.9). Each way's rate is the bytes it read over its
    time, the faster kept: a tail shorter than a row is read only by the sum."""
    from physics import roofline

    cols = roofline.STREAM_COLUMNS
    tensors = [torch.ones(3 * cols + 100), torch.ones(50)]
    calls = []

    def fake_best_rate(fn, work, device, **how):
        results = fn()
        calls.append((work, [tuple(r.shape) for r in results]))
        return work / (2.0 if len(calls) == 1 else 1.0)  # the sum takes 2 s, the product 1 s

    monkeypatch.setattr(roofline, "best_rate", fake_best_rate)
    rate = roofline.plain_read(tensors, torch.device("cpu"))
    assert calls[0] == (4 * (3 * cols + 150), [(), ()])  # the sum: every byte of both
    assert calls[1] == (4 * 3 * cols, [(3,)])  # the product: three whole rows of the first, nothing of the second
    assert rate == max(4 * (3 * cols + 150) / 2.0, 4 * 3 * cols / 1.0)


def test_gpu_checks_bytes_part_runs_dry_on_a_cpu_and_holds_each_target_to_its_figure(lm, monkeypatch):
    """`gpu-check --bytes`, dry on this CPU with the bundled model's own shape: the GPU's storages timed against the
    bf16 model, no damage; then its targets on planted recordings: each holds or fails by its own figure."""
    from benchmarks import gpu_check

    monkeypatch.setattr(measure, "_probe", lambda device, dtypes: lambda: rates_()[0])
    rec = gpu_check.bytes_check(lm, "own", contexts=(16, 32, 64), tokens=8, rounds=2, compile=False,
                                log=lambda text: None)
    assert rec.reference == "bf16 model" and rec.storages() == ["bf16 model", "int8", "int4"] and rec.damage == ()
    assert Record.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    rows = {t.target: t for t in gpu_check.bytes_targets(rec)}
    assert len(rows) == 5 and all(t.holds is not None for t in rows.values())  # each measured: holds or not

    def planted(decode: float, prefill: float, per_position: float):
        ctx = {c: 20 + c * per_position for c in (128, 4096, 8192, 16384)}
        base = synthetic({"bf16 model": 20.0, "int8": decode, "int4": decode * 0.7},
                         {"bf16 model": 500.0, "int8": prefill, "int4": prefill}, ctx)
        passes = tuple(dataclasses.replace(p, storage="bf16 model") if p.kind == "context" else p
                       for p in base.passes)
        return [t.holds for t in gpu_check.bytes_targets(Record(**{**base.__dict__, "passes": passes,
                                                                    "reference": "bf16 model"}))]
    on_slope = 1e3 * 24576 / 20e9  # ms a position: the K/V's bytes over the read rate of rates_()
    assert planted(12.0, 480.0, on_slope) == [True, True, True, True, True]  # int4 at ×0.42
    assert planted(14.0, 440.0, 2 * on_slope) == [False, False, False, False, False]  # int4 at ×0.49


def test_a_bytes_run_out_of_time_keeps_the_reference_and_says_what_it_left_out(lm, monkeypatch):
    """gpu-check's bytes part with its time already spent once the reference is measured (a lent GPU's call
    running out, as on 2026-11-29): int8, int4 and the context's steps are left out, each said in the record's
    notes, and the record is whole: the reference's decode and prefill, timed, and every target 'not measured'."""
    from benchmarks import gpu_check
    from engine.timing import now

    monkeypatch.setattr(measure, "_probe", lambda device, dtypes: lambda: rates_()[0])
    rec = gpu_check.bytes_check(lm, "own", contexts=(16, 32), tokens=8, rounds=2, compile=False,
                                log=lambda text: None, deadline=now())
    assert rec.storages() == ["bf16 model"] and {p.kind for p in rec.passes} == {"decode", "prefill"}
    assert all(len(p.samples_ms) == 2 for p in rec.passes)
    left = [n for n in rec.notes if "would end past the time limit" in n]
    assert [n.split(":")[0] for n in left] == ["int8", "int4", "the decode step against context"]
    assert Record.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    rows = gpu_check.bytes_targets(rec)
    assert len(rows) == 5 and all(t.holds is None and t.measured == "not measured" for t in rows)


# ---------------------------------------------------------------- the line, on synthetic numbers


def test_the_fit_finds_the_slope_intercept_and_crossing_of_a_known_line():
    xs = [128, 2048, 4096, 8192, 16384]
    slope, icpt = fit(xs, [10 + 0.002 * x for x in xs])
    assert slope == pytest.approx(0.002) and icpt == pytest.approx(10)
    line = Line(slope, icpt, predicted_slope_ms=0.001, predicted_crossing=4000)
    assert line.crossing == pytest.approx(5000) and line.crossing_off == pytest.approx(1.25)
    assert line.slope_off == pytest.approx(2.0)


def rates_(read=20e9, fp32=50e9, bf16=100e9, fp16=1e9, rounds=3):
    return tuple(Rates(read, {"fp32": fp32, "bf16": bf16, "fp16": fp16}) for _ in range(rounds))


def synthetic(decode=None, prefill=None, contexts=None, passes=None, rounds=None, kv=24576, damage=()) -> Record:
    """A recording made by hand: per storage a decode and prefill time (ms), fp32's bytes halved for bf16/fp16."""
    w = {"fp32": 400_000_000, "bf16": 200_000_000, "fp16": 200_000_000, "int8": 100_000_000, "int4": 50_000_000,
         "bf16 model": 200_000_000}
    if passes is None:
        passes = [Pass(s, "decode", 1, 130, w[s], kv * 130, 2e8, (t,) * 3, t) for s, t in decode.items()]
        passes += [Pass(s, "prefill", 128, 0, w[s], 0, 2.6e10, (t,) * 3, t) for s, t in prefill.items()]
        passes += [Pass("fp32", "context", 1, c, w["fp32"], kv * c, 2e8, (t,) * 3, t) for c, t in contexts.items()]
    return Record(device="cpu: test", rung="110M rung", parameters=111_000_000, threads=1, load=(1.0, 1.2),
                  measured_at="2026-01-01T00:00:00+00:00", command="test", wall_s=1.0, compile_s=1.0,
                  rounds=rounds or rates_(), passes=tuple(passes), kv_per_token=kv, damage=damage)


def test_the_record_reads_its_line_from_the_context_passes():
    ctx = {c: 20 + c * 1e3 * 24576 / 20e9 for c in (128, 4096, 8192, 16384)}
    rec = synthetic({"fp32": 20}, {"fp32": 500}, ctx)
    line = rec.line()
    assert line.slope_off == pytest.approx(1.0) and line.predicted_crossing == pytest.approx(4e8 / 24576)
    assert "within ±15 % of" in draw.context_sentence(rec)
    twice = synthetic({"fp32": 20}, {"fp32": 500}, {c: 20 + 2 * (t - 20) for c, t in ctx.items()})
    assert "within" not in draw.context_sentence(twice) and "×2.00" in draw.context_sentence(twice)


def test_a_crossing_past_the_contexts_measured_is_called_the_fitted_lines_not_a_measurement():
    """The shipped recording's K/V time reaches the weights' at 22,979 positions, past its longest context (20,480):
    a point read off the fitted line, which its legend had called measured."""
    ctx = {c: 20 + c * 1e3 * 24576 / 20e9 for c in (128, 4096, 8192, 16384)}  # crossing at 16,276: inside
    inside = synthetic({"fp32": 20}, {"fp32": 500}, ctx)
    past = synthetic({"fp32": 20}, {"fp32": 500}, {c: 20 + (t - 20) / 2 for c, t in ctx.items()})  # at 32,552
    assert "past the longest context measured, 16,384" in draw.context_sentence(past)
    assert "past the longest" not in draw.context_sentence(inside)
    names = [t.name for t in figures.context_figure(past).data]
    assert "K/V time = the step at no context (fitted, past the data)" in names
    assert "K/V time = the step at no context (fitted)" in [t.name for t in figures.context_figure(inside).data]
    assert not any("(measured)" in (n or "") and "weights'" in (n or "") for n in names)
    line = inside.line()  # each crossing marked on its own line: the predicted one on the predicted slope
    marks = {t.name: t for t in figures.context_figure(inside).data if t.name and t.name.startswith("K/V ")}
    predicted = marks["K/V bytes = weights' (estimate)"]
    assert predicted.y[0] == pytest.approx(line.intercept_ms + line.predicted_slope_ms * predicted.x[0])
    fitted = marks["K/V time = the step at no context (fitted)"]
    assert fitted.y[0] == pytest.approx(line.intercept_ms + line.slope_ms * fitted.x[0])


def test_the_fitted_crossing_is_named_for_the_time_it_doubles_not_the_weights_read():
    """"The K/V's time reaches the weights' at 22,979 positions", legend "K/V time = weights'": the time it reached
    was the fitted line's start, the whole step at no context (34.8 ms), not the weights' read (their bound, 20.4
    ms). The words name the start and print it; the crossing is where the line doubles it."""
    ctx = {c: 30 + c * 1e3 * 24576 / 20e9 for c in (128, 4096, 8192, 16384)}  # a step of 30 ms at no context
    rec = synthetic({"fp32": 20}, {"fp32": 500}, ctx)
    line = rec.line()
    said = draw.context_sentence(rec)
    assert f"reaches the step's at no context ({line.intercept_ms:.1f} ms" in said
    assert line.intercept_ms + line.slope_ms * line.crossing == pytest.approx(2 * line.intercept_ms)
    assert f"at {line.crossing:,.0f} positions, where the line doubles its start" in said
    assert "reaches the weights' at" not in said


def test_the_windows_damage_is_quoted_with_its_spread_over_the_recorded_stories_not_one_storys_alone():
    """"What it costs in tokens ...: top-1 agreement 93.0%, KL 0.038 nats": one story of 128 positions, quoted bare
    beside a recording of the same policy, budget and model over 8 stories (86.7-97.6 %). The shipped recording's
    sentence gives the stories' median and range, read here from the stories' own file; a window with no such
    recording says its figure is one story's."""
    import dataclasses
    import statistics

    from engine.paths import ASSETS
    from topics.bytes import store

    rec = store.recorded()
    doc = json.loads((ASSETS / "budget_stories_default.json").read_text(encoding="utf-8"))
    row = next(r for r in doc["rows"] if r["policy"] == "window" and r["dtype"] == "float32")
    each = [s["agreeing"] / s["steps"] for s in row["stories"]]
    assert (rec.window.budget, rec.window.context) == (doc["budget"], doc["context"])
    said = draw.evicted_sentence(rec)
    assert (f"top-1 agreement {statistics.median(each):.1%}, the median of {len(each)} held-out stories "
            f"({min(each):.1%}–{max(each):.1%})") in said
    alone = dataclasses.replace(rec, window=dataclasses.replace(rec.window, stories=()))
    assert f"KL {rec.window.kl_mean:.3f} nats, on one held-out story" in draw.evicted_sentence(alone)


def test_the_slope_is_predicted_from_the_caches_own_read_with_the_roofs_and_the_arithmetics_beside_it():
    """A cache that reads at 15 GB/s where the roof's buffer reads at 20, and a step that takes twice the cache's
    bytes' time: the sentence divides by the cache's read, says the roof's, the rate the step reached, and the
    attention's arithmetic (2 FLOPs a byte at a 50 GFLOP/s peak) as a share of the bytes' time and as a sum."""
    kv, cache, roof, peak, per_flop = 24576, 15e9, 20e9, 50e9, 2 * 24576
    rounds = tuple(Rates(roof, {"fp32": peak}, cache) for _ in range(3))
    ctx = (128, 4096, 8192, 16384)
    passes = [Pass("fp32", "context", 1, c, 400_000_000, kv * c, 2e8 + per_flop * c, (t,) * 3, t,
                   "streamed; attention: a kernel") for c in ctx for t in [20 + 2 * c * 1e3 * kv / cache]]
    rec = synthetic(passes=passes, rounds=rounds, kv=kv)
    line = rec.line()
    assert line.slope_off == pytest.approx(2.0) and line.roof_off == pytest.approx(2 * roof / cache)
    assert line.read_at == pytest.approx(cache / 2)
    said = draw.context_sentence(rec)
    why = draw.context_why(rec)
    bytes_us, flops_us = 1e6 * kv / cache, 1e6 * per_flop / peak
    assert f"×2.00 the predicted {bytes_us:#.3g} µs (those bytes over a plain read of the cache itself, 15.0 GB/s" in said
    assert "the attention read the cache at 7.5 GB/s (its bytes over the fitted slope) (a kernel)" in said
    assert f"Against the roof's read of another buffer (20.0 GB/s) the slope is ×{2 * roof / cache:.2f}" in why
    assert "2.0 FLOPs a cache byte" in why and f"{flops_us:#.3g} µs a position" in why
    assert f"{flops_us / bytes_us:.0%} of the bytes' time" in why
    assert f"their sum ({bytes_us + flops_us:#.3g} µs). The fit is ×{2 * bytes_us / (bytes_us + flops_us):.2f}" in why
    old = synthetic(passes=passes, rounds=tuple(Rates(roof, {"fp32": peak}) for _ in range(3)), kv=kv)
    assert "a plain read of the cache itself" not in draw.context_sentence(old)  # a recording without the probe
    assert "roof's read of another buffer" not in draw.context_why(old)
    assert old.line().predicted_slope_ms == pytest.approx(1e3 * kv / roof)
    assert Record.from_dict(json.loads(json.dumps(rec.to_dict()))).line() == line


def test_steps_that_do_not_rise_with_context_get_no_slope_and_the_chart_shows_the_spread():
    """The H200's first run: the shortest context's timed rounds were a CUDA graph's warm-up and recording (13, 30,
    5 ms), so the fit fell with context. No slope is compared then, no crossing said; the widest spread is named,
    and the chart's bars reach each context's slowest and fastest round."""
    kv = 131072
    passes = [Pass("bf16 model", "context", 1, c, 15_000_000_000, kv * c, 1e10, samples, 5.0,
                   "F.linear; attention: sdpa", "bf16")
              for c, samples in ((384, (13.1, 30.3, 5.1)), (65536, (6.8, 7.0, 6.8)), (131072, (8.6, 8.9, 8.5)))]
    rec = synthetic(passes=passes, rounds=rates_(), kv=kv)
    assert rec.line().slope_ms < 0
    said = draw.context_sentence(rec)
    assert "do not rise with context" in said and "13.1 ms at 384" in said and "5.1–30.3 ms at 384" in said
    assert "Fitted" not in said and "reaches the weights'" not in said and draw.context_why(rec) == ""
    bars = figures.context_figure(rec).data[0].error_y
    assert list(bars.array)[0] == pytest.approx(30.3 - 13.1) and list(bars.arrayminus)[0] == pytest.approx(13.1 - 5.1)


# ---------------------------------------------------------------- the words follow the numbers


CTX = {128: 20.0, 8192: 30.0, 16384: 40.0}


def test_a_bf16_decode_that_did_not_speed_up_is_never_called_faster():
    rec = synthetic({"fp32": 20.0, "bf16": 19.5}, {"fp32": 500.0, "bf16": 250.0}, CTX)
    said = draw.storage_sentence(rec)
    assert "bf16: the decode step is about the same (×0.97" in said
    assert "decode step is faster" not in said
    assert "the prefill faster (×0.50" in said
    assert draw.prediction_held(rec) == "none of them: decode about the same, prefill faster"


def test_a_halved_decode_is_called_faster_and_a_risen_prefill_slower_with_the_reason():
    rec = synthetic({"fp32": 20.0, "bf16": 10.0, "fp16": 11.0, "bf16 model": 12.0},
                    {"fp32": 500.0, "bf16": 500.0, "fp16": 520.0, "bf16 model": 3000.0}, CTX, rounds=rates_(bf16=1e9))
    said = draw.storage_sentence(rec)
    assert "bf16: the decode step is faster (×0.50" in said and "the prefill about the same (×1.00" in said
    assert draw.prediction_held(rec) == "decode faster, prefill about the same"
    assert "bf16 model: the decode step is faster (×0.60" in said and "the prefill slower (×6.00" in said
    why = draw.why_prefill(rec)
    assert "fp32's compute bound: bf16 ×1.00 (about the same), fp16 ×1.04 (about the same) fp32's time" in why
    assert "The bf16 model multiplies in bf16: the bf16 matmul probed in each round ran at ×0.02 fp32's" in why
    assert "its prefill has a compute bound ×50.00 fp32's and took ×6.00 (slower)" in why
    assert "it beat that bound (×0.12)" in why and why.count("beat that bound") == 1  # weight-only: not said
    assert "int8" not in draw.int8_sentence(rec)  # no int8 pass: nothing said
    assert rec.predicted_ratio("bf16", "decode") == pytest.approx(0.5, abs=0.01)  # bytes (weights and K/V)
    assert rec.predicted_ratio("bf16", "prefill") == pytest.approx(1.0)  # weight-only: fp32's arithmetic
    assert rec.predicted_ratio("bf16 model", "prefill") == pytest.approx(50.0)  # the FLOP rate
    frame = draw.storage_frame(rec)
    assert list(frame["decode × fp32"]) == [1.0, 0.5, 0.55, 0.6]


def test_a_step_split_into_its_products_and_the_rest_says_which_shrank_with_the_bytes():
    """fp32's step 22 ms with 20 in the kernels, bf16's 12 with 10: the products halved with the bytes, the 2 ms
    outside them did not, and that is why the whole step is ×0.55. Without the kernels timed apart, the old words."""
    rec = synthetic({"fp32": 22.0, "bf16": 12.0, "int8": 12.0, "bf16 model": 16.0}, {"fp32": 500.0}, CTX)

    def timed_apart(inside: dict, whole: dict) -> Record:
        return dataclasses.replace(rec, passes=tuple(
            dataclasses.replace(p, kernels_ms=inside[p.storage], profiled_ms=whole[p.storage])
            if p.kind == "decode" else p for p in rec.passes))

    split = timed_apart({"fp32": 20.0, "bf16": 10.0, "int8": 9.5, "bf16 model": 11.0},
                        {"fp32": 22.5, "bf16": 12.0, "int8": 12.0, "bf16 model": 16.0})
    assert "Not all of a step" not in draw.decode_sentence(split)  # said apart, its own paragraph
    assert "the kernel that reads them" not in draw.decode_sentence(split)  # the split says which part it was
    said = draw.products_sentence(split)
    assert "fp32's step spent 20.0 ms of the 22.5 ms a profiled call took" in said
    assert "unprofiled, the step took 22.0 ms" in said  # the two figures a reader compares, both named
    assert "Not split" not in said  # every storage's step was
    int4 = dataclasses.replace(split, passes=split.passes + (Pass("int4", "decode", 1, 130, 50_000_000, 24576 * 130,
                                                                  2e8, (8.0,) * 3, 8.0),))
    assert "Not split: int4 (its product is an op outside inductor's kernels" in draw.products_sentence(int4)
    assert "bf16 ×0.50 (its weights ×0.50), int8 ×0.47 (its weights ×0.25), bf16 model ×0.55 (its weights ×0.50)" in said
    assert "fp32 2.5 ms, bf16 2.0 ms, int8 2.5 ms, bf16 model 5.0 ms." in said
    # the bf16 model's 5.0 ms (another attention, over a bf16 cache) is said, and not held to the others
    assert "For the weight-only storages (one graph, one attention) that part is about the same" in said
    assert "(bf16's whole step ×0.55 fp32's, its products ×0.50)." in said
    assert list(draw.storage_frame(split)["decode in kernels ms"]) == ["20.0", "10.0", "9.5", "11.0"]
    shrank = timed_apart({"fp32": 18.0, "bf16": 10.0, "int8": 9.5, "bf16 model": 11.0},
                         {"fp32": 22.0, "bf16": 12.0, "int8": 12.0, "bf16 model": 16.0})
    assert "fp32 4.0 ms, bf16 2.0 ms" in draw.products_sentence(shrank)
    assert "about the same" not in draw.products_sentence(shrank)  # twice the time outside: not called the same
    assert draw.products_sentence(rec) == "" and "the kernel that reads them" in draw.decode_sentence(rec)
    assert list(draw.storage_frame(rec)["decode in kernels ms"]) == ["–"] * 4  # not timed apart: said, never NaN
    assert Record.from_dict(json.loads(json.dumps(split.to_dict()))) == split  # the split survives its JSON


def test_a_compiled_steps_time_in_inductors_kernels_is_timed_apart_from_the_rest(lm):
    """The lean pass compiled with its kernels profiled: the time in them is part of the step, not all of it (the
    Python that calls them and the attention's op are outside), and the same pass uncompiled has none to show."""
    lean = storage.lean_pass(lm.model, "fp32", 10)
    fn = measure.compiled_pass(lean, kernels_profiled=True)
    one, at = torch.tensor([[5]]), torch.tensor([8])
    for _ in range(2):
        measure.run_once(fn, one, at)
    inside, whole = measure.in_kernels_ms(fn, (one, at))  # both from the same calls: comparable on a busy machine
    assert 0 < inside < whole
    assert measure.in_kernels_ms(lean, (one, at), runs=1)[0] == 0


def test_int8_that_is_not_faster_than_bf16_says_so_with_its_read_rates():
    rec = synthetic({"fp32": 20.0, "bf16": 10.0, "int8": 9.8}, {"fp32": 500.0}, CTX)
    said = draw.int8_sentence(rec)
    assert "int8 weight-only decodes at ×0.49 fp32's time against bf16's ×0.50" in said
    assert "the kernel, not the memory, sets its time here" in said and "faster than bf16" not in said
    fast = synthetic({"fp32": 20.0, "bf16": 10.0, "int8": 5.0}, {"fp32": 500.0}, CTX)
    assert "faster than bf16's ×0.50" in draw.int8_sentence(fast)
    assert "did not follow its bytes" not in draw.int8_sentence(fast)  # half the bytes, half the time


def test_int8_faster_than_bf16_but_far_from_its_bytes_says_its_time_did_not_follow_them():
    """The shipped EPYC recording's int8 decoded at ×0.89 bf16's time for half its bytes: 'faster than bf16' alone
    read as 'half the bytes, half the time', which its own chart contradicts."""
    rec = synthetic({"fp32": 20.0, "bf16": 10.0, "int8": 8.0}, {"fp32": 500.0}, CTX)
    said = draw.int8_sentence(rec)
    assert "faster than bf16's ×0.50: ×0.80 bf16's time for half its bytes" in said
    assert "Its time did not follow its bytes" in said


def test_int8_faster_by_medians_whose_rounds_overlap_bf16s_says_so_with_both_ranges():
    """The shipped recording's int8 (13.5–15.0 ms) and bf16 (12.5–16.8) overlap; its chart's bars show it, so the
    word 'faster' carries the ranges beside it. Apart, nothing is added."""
    def decode(storage, samples):
        return Pass(storage, "decode", 1, 130, {"fp32": 400_000_000, "bf16": 200_000_000, "int8": 100_000_000}[storage],
                    24576 * 130, 2e8, samples, 0.0)
    base = synthetic({"fp32": 20.0}, {"fp32": 500.0}, CTX)
    overlap = dataclasses.replace(base, passes=base.passes + (decode("bf16", (9.5, 10.0, 11.0)),
                                                             decode("int8", (7.0, 8.0, 10.5))))
    said = draw.int8_sentence(overlap)
    assert "faster than bf16's ×0.50" in said and "by medians: their rounds overlap (int8 7.0–10.5 ms, bf16 9.5–11.0)" in said
    apart = dataclasses.replace(base, passes=base.passes + (decode("bf16", (9.5, 10.0, 11.0)),
                                                           decode("int8", (7.0, 8.0, 9.0))))
    assert "overlap" not in draw.int8_sentence(apart)


def test_computed_figures_are_called_estimates_and_int4s_rounded_inputs_are_said():
    """Bounds are computed (FLOPs and bytes over probed rates): the table's bound columns, the chart's open markers
    and the predicted crossing say 'estimate'. A prefill whose products ran in torch's int4 kernel (bf16 inputs) is
    not said to keep fp32's arithmetic without that kernel named."""
    rec = synthetic({"fp32": 20.0, "bf16": 10.0, "int4": 8.0}, {"fp32": 500.0, "bf16": 500.0, "int4": 460.0}, CTX)
    cols = list(draw.storage_frame(synthetic({"fp32": 20.0}, {"fp32": 500.0}, CTX)).columns)
    assert "decode bound ms (estimate)" in cols and "prefill bound ms (estimate)" in cols
    assert draw.short_header("decode bound ms (estimate)") == "memory ms (est.)"  # beside 'decode ms'
    assert len({draw.short_header(c) for c in cols}) == len(cols)  # no two columns headed alike
    assert list(draw.storage_frame(rec).columns).index("decode bound ms (estimate)") == list(
        draw.storage_frame(rec).columns).index("decode ms") + 1  # so a short 'bound' header reads as decode's
    assert "its bound (estimate)" in [t.name for t in figures.storage_figure(rec).data]
    int4 = Pass("int4", "prefill", 128, 0, 50_000_000, 0, 2.6e10, (460.0,) * 3, 460.0,
                kernel="torch's int4 kernel (_weight_int4pack_mm_for_cpu), bf16 inputs", compute="fp32")
    said = draw.why_prefill(dataclasses.replace(rec, passes=tuple(
        p for p in rec.passes if (p.storage, p.kind) != ("int4", "prefill")) + (int4,)))
    assert "(int4: products in torch's int4 kernel, which rounds its inputs to bf16" in said
    assert "rounds its inputs" not in draw.why_prefill(synthetic({"fp32": 20.0, "bf16": 10.0},
                                                                 {"fp32": 500.0, "bf16": 500.0}, CTX))


def test_a_step_another_recording_timed_apart_on_the_same_machine_kind_is_said_with_both_figures():
    """The EPYC's curve recording (2026-11-28) timed the fp32 decode step at 20.3 ms and the 128-token prefill at
    293.9 ms; the bytes recording (11-29) at 35.4 and 381.5 ms, its prefill bound 331 ms, on the same Scale page.
    Each pass is said, with both times and rates, where the two differ beyond FASTER on the same device and rung;
    nothing where they agree, on another device, or on another rung."""
    from topics.ladder.store import CurveSteps

    rec = synthetic({"fp32": 20.0, "bf16": 10.0}, {"fp32": 500.0}, CTX)
    rate = rec.get("fp32", "decode").bytes / 10.0 / 1e6  # the curve's step: half the time, twice the rate

    def curve(decode_ms=10.0, prefill_ms=500.0, device=rec.device, parameters=rec.parameters, rows=128):
        return CurveSteps(device, "2025-12-31T00:00:00", parameters, decode_ms, rate * 10.0 * 1e6,
                          ((1, 30.0, 2e8), (rows, prefill_ms, 2.6e10)))

    said = draw.other_recording(rec, curve())  # the decode step apart, the prefill the same
    assert "the decode step 10.0 ms" in said and "against 20.0 ms" in said and "×2.00" in said
    assert f"({rate:.1f} GB/s read)" in said and "(2025-12-31)" in said and "(2026-01-01)" in said
    assert "prefill" not in said
    both = draw.other_recording(rec, curve(prefill_ms=400.0))  # 500 / 400: ×1.25, past 1 / FASTER
    assert "the 128-token prefill 400.0 ms (65.0 GFLOP/s) against 500.0 ms (52.0 GFLOP/s), ×1.25" in both
    only = draw.other_recording(rec, curve(decode_ms=19.0, prefill_ms=400.0))
    assert "prefill" in only and "decode step" not in only
    assert draw.other_recording(rec, curve(decode_ms=19.0)) == ""  # both agree
    assert draw.other_recording(rec, curve(decode_ms=19.0, prefill_ms=400.0, rows=64)) == ""  # no 128-row prefill
    assert draw.other_recording(rec, curve(device="cpu: another")) == ""
    assert draw.other_recording(rec, curve(parameters=rec.parameters * 2)) == ""
    assert draw.other_recording(rec, None) == ""


def test_storages_of_the_same_bytes_are_drawn_side_by_side_and_the_axis_says_so():
    """bf16, fp16 and the bf16 model read the same bytes: on one x their points hid one another (a projector
    showed one blob). Each is drawn apart, in the record's order, and each label on the side away from the rest."""
    rec = synthetic({"fp32": 20.0, "bf16": 10.0, "fp16": 10.2, "bf16 model": 11.0, "int8": 6.0}, {"fp32": 500.0}, CTX)
    fig = figures.storage_figure(rec)
    measured = {t.name.removeprefix("decode ").removesuffix(" measured"): t for t in fig.data
                if t.name and t.name.startswith("decode ") and t.name.endswith(" measured")}
    xs = {s: t.x[0] for s, t in measured.items()}
    assert xs["bf16"] < xs["fp16"] < xs["bf16 model"] and xs["bf16 model"] - xs["bf16"] > 0.05 * xs["fp32"]
    assert xs["fp32"] == 400 and xs["int8"] == 100  # alone at their bytes: where they lie
    assert [measured[s].textposition for s in ("bf16", "fp16", "bf16 model")] == [
        "middle left", "top center", "middle right"]
    assert "side by side" in fig.layout.xaxis.title.text
    alone = synthetic({"fp32": 20.0, "bf16": 10.0}, {"fp32": 500.0}, CTX)
    assert "side by side" not in figures.storage_figure(alone).layout.xaxis.title.text


def test_the_evicted_step_is_judged_by_its_own_ratio_and_quotes_the_budgets_damage():
    ctx = {128: 20.0, 8192: 30.0, 16384: 40.0}
    base = synthetic({"fp32": 20.0}, {"fp32": 500.0}, ctx)
    e = Pass("fp32", "evicted", 1, 4096, 400_000_000, 24576 * 4096, 2e8, (25.0,) * 3, 25.0)
    rec = Record(**{**base.__dict__, "passes": base.passes + (e,),
                    "window": WindowDamage("window", 64, 256, "m", 0.93, 0.038, 0.25,
                                           "assets/budget_sweep_default.json")})
    said = draw.evicted_sentence(rec)
    assert "takes ×0.62 the full cache's time (faster)" in said and "top-1 agreement 93.0%" in said
    slow = Record(**{**rec.__dict__, "passes": base.passes + (Pass(**{**e.__dict__, "samples_ms": (40.0,) * 3}),)})
    assert "(about the same)" in draw.evicted_sentence(slow)


def test_figures_and_tables_draw_from_a_record():
    rec = synthetic({"fp32": 20.0, "bf16": 10.0}, {"fp32": 500.0, "bf16": 250.0}, CTX,
                    damage=(Damage("m", "fp32", (1.0, 1.0), (0.0, 0.0), 10), Damage("m", "bf16", (0.9, 1.0),
                                                                                    (0.01, 0.02), 10)))
    assert len(figures.storage_figure(rec).data) >= 4 and len(figures.context_figure(rec).data) >= 3
    assert "bf16 agrees with fp32 on 95.0% of next tokens in each bundled model" in draw.damage_sentence(rec)
    assert "lowest story 90.0%" in draw.damage_sentence(rec)
    assert "storage" in draw.text_tables(rec)


# ---------------------------------------------------------------- the shipped recording


def test_every_times_its_bound_the_page_says_is_the_tables_two_columns_divided():
    """The sentences said bf16 ran at ×1.4 its memory bound beside a table whose bf16 row read 16.0 ms against a bound
    of 10.3 ms (×1.55): one was a median of per-round ratios, the other a ratio of medians. Each figure a sentence
    gives is now the table's time over the table's bound, to the digits it prints."""
    import re

    from topics.bytes.draw import decode_sentence, int8_sentence, storage_rows

    rec = shipped()
    # what the table's two columns (each rounded to 0.1 ms) allow the ratio to be
    table = {r["storage"]: ((r["decode ms"] - 0.05) / (r["decode bound ms (estimate)"] + 0.05),
                            (r["decode ms"] + 0.05) / (r["decode bound ms (estimate)"] - 0.05)) for r in storage_rows(rec)}
    said = decode_sentence(rec)
    for s, (lo, hi) in table.items():
        got = float(re.search(rf"\b{re.escape(s)} ×([\d.]+) \(", said).group(1))
        assert lo - 0.005 <= got <= hi + 0.005, (s, got, lo, hi)
    for figure in re.findall(r"ran at ×([\d.]+) its memory bound where bf16 ran at ×([\d.]+)", int8_sentence(rec)):
        lo, hi = table["bf16"]
        assert lo - 0.05 <= float(figure[1]) <= hi + 0.05, (figure, lo, hi)


def shipped() -> Record:
    rec = bytes_store.recorded()
    assert rec is not None, "assets/bytes_cpu.json: record it with `python -m engine bytes --json assets/bytes_cpu.json`"
    return rec


def test_engine_bytes_writes_and_prints_its_recording_where_plotly_is_not_installed(tmp_path):
    """A GPU image without plotly (the lent H200's, 2026-11-30) ran the whole measurement, then lost its tables
    to an ImportError: the report needs pandas alone."""
    import subprocess
    import sys

    out = tmp_path / "rec.json"
    code = ("import sys; sys.modules['plotly'] = None\n"  # import plotly now raises ImportError
            "from topics.bytes import store, cli\n"
            f"raise SystemExit(cli._report(store.recorded(), {str(out)!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=str(bytes_store.RECORDING.parent.parent))
    assert run.returncode == 0, run.stderr[-800:]
    rec = shipped()
    assert Record.from_dict(json.loads(out.read_text())).to_dict() == rec.to_dict()
    assert all(s in run.stdout for s in rec.storages()) and draw.storage_sentence(rec) in run.stdout


def test_the_shipped_recording_reads_back_with_every_storage_the_line_and_the_damage():
    rec = shipped()
    assert rec.storages() == list(storage.STORAGES) and rec.line() is not None and rec.evicted() is not None
    assert len(rec.rounds) >= 3 and rec.load and rec.command.startswith("python -m engine bytes")
    models = {d.model for d in rec.damage}
    assert len(models) == 3 and all(len(d.agree) >= 8 for d in rec.damage)
    for d in rec.damage:
        if d.storage == "fp32":
            assert d.agree == (1.0,) * len(d.agree) and max(d.kl) == 0.0
    # named as the ladder names the rung of the same parameters ("the 110M rung" in lesson 12 was lesson 3's 112M)
    from topics.ladder.store import recorded_ladders

    same = [r for lad in recorded_ladders() if "cuda" not in lad.device for r in lad.rungs
            if r.parameters == rec.parameters]
    assert same and rec.named == f"{same[0].label} rung" and rec.named in draw.where(rec)


def test_bf16_damage_on_the_bundled_llama_is_the_recorded_figure(lm):
    recorded = next(d for d in shipped().damage if d.model == MODEL and d.storage == "bf16")
    got = measure.damage_of(lm.model, lm.tokenizer, MODEL, ("bf16",), n=len(recorded.agree))[0]
    assert min(recorded.agree) <= got.agreement <= max(recorded.agree)
    assert got.agreement == pytest.approx(recorded.agreement, abs=0.01)
    assert got.kl_mean == pytest.approx(recorded.kl_mean, rel=0.2)
    fp32 = measure.damage_of(lm.model, lm.tokenizer, MODEL, ("fp32",), n=2)[0]
    assert fp32.agree == (1.0, 1.0) and max(fp32.kl) == 0.0


# ---------------------------------------------------------------- measured here (perf)


@pytest.mark.perf
def test_on_this_cpu_the_context_costs_time_and_the_window_buys_it_back(lm):
    """Eager on the bundled model: a step over 16,384 random K/V positions (twice the weights' bytes) takes longer
    than over 64 by at least half the time its extra bytes take at the read rate probed in the same round (a plain
    sum of a buffer no cache holds), and the step evicted to a quarter of them less than the full one (medians of
    per-round ratios). Measured 2026-11-30, six runs: the extra time ×0.86–1.93 its bytes' time. (A ratio of the two
    steps' times, against a quarter of the bytes' ratio, sat on its threshold: eager's fixed cost per op moves it.)"""
    rates, passes, _, _ = measure.storages(lm, ("fp32",), tokens=8, rounds=5, contexts=(64, 1024, 16384),
                                           compile=False)
    rec = synthetic(passes=passes, rounds=rates_(rounds=5))
    pts = rec.context_passes()
    short, long = pts[0], pts[-1]
    assert long.bytes / short.bytes > 2.5
    extra = long.bytes - short.bytes  # the K/V of 16,320 more positions, counted from the cache's tensors
    per_round = [(b - a) / (extra / r.read * 1e3) for a, b, r in zip(short.samples_ms, long.samples_ms, rates)]
    assert statistics.median(per_round) > 0.5, per_round
    assert rec.evicted_ratio() < 0.9


# ---------------------------------------------------------------- the lesson, rendered


def test_lesson_12_waits_for_a_prediction_then_says_what_the_recording_measured():
    from lessons.page import TITLES
    from tests.test_app import fresh_app
    from ui.apptest import page

    at = fresh_app()
    at.switch_page(page("lessons")).run()
    title = next(t for t in TITLES if t.startswith("12."))
    at.selectbox(key="lesson_pick").set_value(title).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.get("plotly_chart")  # predict first
    at.radio(key="lesson12_guess").set_value("decode faster, prefill about the same").run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(m.value for m in at.markdown).replace("\\", "")
    rec = shipped()
    assert draw.storage_sentence(rec) in said and draw.context_sentence(rec) in said
    assert f"What bf16 did, measured: {draw.prediction_held(rec)}" in said
    assert len(at.get("plotly_chart")) == 2


def test_lesson_12_says_how_far_this_servers_measurement_got_and_shows_its_result_once_done(monkeypatch):
    """The click after pressing Measure: while the job runs the lesson says how far it got (a fragment that asks
    again each second); once it is done the note is gone and the lesson reads this server's measurement."""
    from lessons.page import TITLES
    from tests.test_app import fresh_app
    from ui.apptest import page

    job = bytes_store.Job()
    job.progress = "bf16: round 2 of 5"
    monkeypatch.setattr(bytes_store, "_JOB", job)
    at = fresh_app()
    at.switch_page(page("lessons")).run()
    at.selectbox(key="lesson_pick").set_value(next(t for t in TITLES if t.startswith("12."))).run()
    at.radio(key="lesson12_guess").set_value("decode faster, prefill about the same").run()
    assert [i.value.replace("\\", "") for i in at.info if "Measuring on this server" in i.value] == [
        "Measuring on this server: bf16: round 2 of 5"]
    job.result = shipped()
    job.done.set()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [i.value for i in at.info if "Measuring" in i.value]
    assert any(c.value.startswith("measured on this server") for c in at.caption), [c.value for c in at.caption]


@pytest.mark.slow
def test_the_scale_page_shows_bytes_are_time_below_the_curve_from_the_recording():
    import json as json_

    from ui.apptest import app_test, page

    at = app_test().run()
    at.switch_page(page("scale")).run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    titles = [json_.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Time per pass against the weights' bytes" in titles
    assert "The context's bytes: one decode step's time" in titles
    said = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert draw.storage_sentence(shipped()) in said
    from topics.ladder.store import curve_step

    captions = " ".join(c.value for c in at.caption).replace("\\", "")
    apart = draw.other_recording(shipped(), curve_step("cpu"))  # the two shipped EPYC recordings: ×1.74 apart
    assert apart and apart in captions
    table = next(t for t in (json_.loads(d.proto.columns) for d in at.dataframe) if "decode × fp32" in t)
    assert table["decode × fp32"]["type_config"]["format"] == "×%.2f"  # ×0.45, as the sentences print it, not 0.45
    assert table["decode ms"]["type_config"]["format"] == "%.1f"  # 16.0, not 16


def test_the_bytes_command_refuses_an_unwritable_json_path_and_a_zero_context_before_loading(tmp_path, capsys,
                                                                                             monkeypatch):
    import engine.load.load
    from tests.test_cli import _cli

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(engine.load.load, "load_model", refuse)
    code, out, err = _cli(["bytes", "--json", str(tmp_path / "no-such-folder" / "x.json")], capsys)
    assert code == 2 and err.startswith("error: --json") and not out
    code, out, err = _cli(["bytes", "--contexts", "0"], capsys)
    assert code == 2 and "invalid positive value" in err


@pytest.mark.slow
def test_the_weight_only_benchmark_times_each_form_and_counts_each_storages_bytes(capsys):
    """`python -m benchmarks.weight_only` on this CPU, small: every form timed, its bytes counted from the tensors
    (bf16 half of fp32's, int8 a quarter plus a scale a row, int4 an eighth plus a scale and zero a group)."""
    from benchmarks import weight_only

    assert weight_only.main(["--device", "cpu", "--matrices", "2", "--shape", "256", "512", "--rounds", "2"]) == 0
    rows = {line.split()[0] if not line.startswith("int8 gpt") else "int8 gpt-fast": line
            for line in capsys.readouterr().out.splitlines() if "MB" in line}
    assert set(rows) == {"fp32", "bf16", "int8", "int8 gpt-fast", "int4"}
    mb = {name: float(line.split("MB")[0].split()[-1]) for name, line in rows.items()}
    w = 2 * 256 * 512 / 1e6  # millions of weights
    assert mb["fp32"] == pytest.approx(4 * w, abs=0.01) and mb["bf16"] == pytest.approx(2 * w, abs=0.01)
    assert mb["int8"] == mb["int8 gpt-fast"] == pytest.approx(w + 2 * 256 * 4 / 1e6, abs=0.01)
    assert mb["int4"] == pytest.approx(w / 2 + 2 * 256 * 4 * 2 * 2 / 1e6, abs=0.01)
