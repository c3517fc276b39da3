"""One pass, n rows: the record's knees and ratios, its words and picture, its place in a ladder and in gpu-check,
and the recorded GPU ladder read back in the dtype it records. References: the record's own raw times (samples),
recomputed by hand; the roofline's definitions written again here; the recorded file's own fields."""

from __future__ import annotations

import json
import re

import pytest

from drawing.caveats import BUSY, NOISE
from engine.paths import ASSETS
from physics import roofline
from topics.ladder import curve as curves
from topics.ladder import curve_draw
from topics.ladder.notes import curve_note
from topics.ladder.record import Ladder

pytestmark = pytest.mark.xdist_group("ladder")  # one worker: `small_ladder` is measured once, beside test_ladder's

# a CPU-like roof: 100 GFLOP/s, DRAM 25 GB/s (a cache twice as fast): the ridge 4 FLOP/byte, ~8 rows in fp32
MIB = 2**20
ROOF = roofline.DeviceRoof("test cpu", peak_flops=1e11, bandwidth=50e9, measured=True,
                           bandwidths=((16 * MIB, 50e9), (1024 * MIB, 25e9)), elem_bytes=4.0)
WEIGHTS = 400e6  # bytes a pass reads: 100 M parameters in fp32
CONTEXT = 127  # every batched sequence's context: 128 positions of K/V each with the new one
ROWS = (1, 2, 4, 8, 16, 32, 64)
MANY, ONE = curves.MANY_ROW_KERNEL, curves.ONE_ROW_KERNEL


def counts(kind: str, n: int, kv: float) -> tuple[float, float]:
    """(FLOPs, bytes) of a synthetic pass: 2 · 100 M · n FLOPs (a batch's a little more: each sequence's attention
    over its context); WEIGHTS once, and K/V: a prefill's n positions, a batch's (or the decode step's) `kv` bytes
    for each sequence (CONTEXT + 1 positions)."""
    per_position = kv / (CONTEXT + 1)
    if kind == "prefill":
        return 2 * 100e6 * n, WEIGHTS + n * per_position
    return 2 * 100e6 * n * 1.02, WEIGHTS + n * kv


def synthetic(times: dict[str, dict[int, list[float]]], kv: float = 0.0, rounds=()) -> curves.Curve:
    """A curve with the given timed runs: kind -> n -> samples (kind 'decode': the rung's one-token step, on the
    one-row kernel; the others on the many-row kernel)."""
    points = []
    for kind, by_n in times.items():
        for n, samples in by_n.items():
            flops, moved = counts(kind, n, kv)
            v = roofline.verdict(sorted(samples)[len(samples) // 2], flops, moved, ROOF)
            points.append(curves.RowsPass(kind=kind, rows=n, samples_ms=tuple(samples), warmup_ms=None, flops=flops,
                                          bytes_moved=moved, memory_ms=v.memory_ms, compute_ms=v.compute_ms,
                                          kernel=ONE if kind == "decode" else MANY))
    return curves.Curve(rung="112M", parameters=int(100e6), dtype="float32", context=CONTEXT, path="test",
                        compile_ms={}, points=tuple(sorted(points, key=lambda p: p.rows)), left_out=(), wall_s=1.0,
                        rounds=tuple(rounds))


def line(level: float, slope: float, rows=ROWS, spread=(0.98, 1.0, 1.03)) -> dict[int, list[float]]:
    """The roofline's two lines, timed: flat at `level` ms, then `slope` ms a row; three runs each."""
    return {n: [max(level, slope * n) * f for f in spread] for n in rows}


# the physics, timed, the two kinds apart: a prefill flat at 20 ms then 2 ms a row; a batch flat at 24 ms then 2.4 ms
# a sequence (both meet at n = 10); the decode step on its own one-row kernel at 12 ms
PHYSICS = {"prefill": line(20.0, 2.0), "batch": line(24.0, 2.4), "decode": {1: [11.8, 12.0, 12.4]}}


def test_the_knee_is_where_the_flat_level_and_the_slope_meet():
    """By hand: the level is the median of the passes of n ≥ 2 below the predicted knee (8 rows: 2 and 4), the slope
    a straight line through the passes at twice the predicted knee or more (16, 32, 64); they meet at n = 10. Not
    'the first n at ×1.5 the one-row time' (16 here), which puts an ideal roofline's knee ≥ ×1.5 past the ridge."""
    c = synthetic(PHYSICS)
    assert ROOF.ridge == pytest.approx(4.0) and ROOF.ridge_tokens == pytest.approx(8.0)
    # the predicted knee: where 2·100M·n FLOPs over 400 MB meets the ridge (1e11 / 25e9 = 4 FLOP/byte): n = 8
    assert c.predicted_knee("prefill", ROOF) == pytest.approx(8.0)
    for kind, level, slope in (("prefill", 20.0, 2.0), ("batch", 24.0, 2.4)):
        k = c.knee(kind, ROOF)
        assert k.level_rows == (2, 4) and k.slope_rows == (16, 32, 64)
        assert k.level_ms == pytest.approx(level) and k.slope_ms == pytest.approx(slope)
        assert k.measured == pytest.approx(level / slope) == pytest.approx(10.0)
        assert c.measured_knee(kind, ROOF) == pytest.approx(10.0) and k.within(1.5) and not k.within(1.2)
    early = synthetic({"prefill": line(20.0, 10.0), "batch": line(24.0, 2.4)})  # the slope from n = 2 on
    k = early.knee("prefill", ROOF)  # the level: the median of 20 and 40 ms; 10 ms a row: they meet at n = 3
    assert k.level_ms == pytest.approx(30.0) and k.measured == pytest.approx(3.0) and not k.within(1.5)


def test_a_one_row_outlier_is_drawn_and_named_and_never_the_level():
    """The one-row pass runs a graph of its own: slower than the 2-row pass (the H200's 5.41 against 4.90 ms), it is
    named an outlier, ringed on the chart and said; the level and the knee are the other passes'."""
    times = {k: dict(v) for k, v in PHYSICS.items()}
    times["prefill"][1] = [26.0, 26.5, 27.0]
    c = synthetic(times)
    out = c.outlier("prefill")
    assert out.pass_.rows == 1 and out.faster.rows in (2, 4) and out.times == pytest.approx(26.5 / 20.0, rel=0.01)
    assert c.outlier("batch") is None
    k = c.knee("prefill", ROOF)
    assert k.level_ms == pytest.approx(20.0) and k.measured == pytest.approx(10.0)
    said = curve_draw.curve_caption(c, ROOF)
    assert "The one-token prefill (a graph of its own) took 26.5 ms" in said and "never the flat level" in said
    fig = curve_draw.curve_figure(c, ROOF, "this CPU")
    assert any(t.name == "outlier: the one-row prefill (a graph of its own)" and list(t.x) == [1] for t in fig.data)


def test_a_ratio_compares_passes_of_one_kernel_and_says_which():
    """The decode step runs its own one-row kernel (12 ms); the passes over n rows the many-row kernel. A ratio is
    taken within one kind and one kernel, and the sentence names the kernel and the pass it is compared with; the
    decode step is its own point, never the 'one' of a many-row ratio (the CPU recording's ×1.82 and ×2.08)."""
    c = synthetic(PHYSICS)
    star = c.of("decode")[0]
    assert c.kernel(star) == ONE and {c.kernel(p) for p in c.points if p.kind != "decode"} == {MANY}
    assert c.base("batch", 8) == c.at("batch", 1) and c.ratio("batch", 8) == pytest.approx(24.0 / 24.0)
    assert c.compare(c.at("batch", 8), star) is None and c.compare(c.at("prefill", 8), star) is None
    said = curve_draw.curve_caption(c, ROOF)
    assert f"the decode step for 8 sequences took ×{c.ratio('batch', 8):.2f} the same step for 1 sequence " \
           f"(24 ms) on {MANY}" in said
    assert f"runs on {ONE}" in said and "no ratio is taken against it" in said


def test_a_batchs_knee_adds_every_sequences_kv_read_and_is_its_own():
    """Each sequence's attention reads its own K/V in kernels of their own, whose time adds to the products':
    time(n) ≈ max(W / bw, n · F / peak) + n · kv / bw, flat until n · (F / peak + kv / bw) = W / bw. With 40 MB a
    sequence (a tenth of the weights), F = 2e8 · 1.02 and the ridge 4: n = 4 · 4e8 / (2.04e8 + 4 · 4e7) ≈ 4.4,
    sooner than the prefill's 8; with 2 GB a sequence one sequence already outlasts the weights (n < 1)."""
    kv = 40e6
    c = synthetic(PHYSICS, kv=kv)
    by_hand = 4.0 * WEIGHTS / (2e8 * 1.02 + 4.0 * kv)
    assert c.batch_knee(ROOF) == pytest.approx(by_hand, rel=1e-6) and c.predicted_knee("prefill", ROOF) > 7.5
    assert not c.kv_negligible(ROOF) and synthetic(PHYSICS).kv_negligible(ROOF)
    # derived from the decode step and the prefills when no batch was timed: the same figure
    no_batch = synthetic({k: v for k, v in PHYSICS.items() if k != "batch"}, kv=kv)
    assert no_batch.batch_knee(ROOF) == pytest.approx(by_hand, rel=0.01)
    heavy = synthetic(PHYSICS, kv=2e9)
    assert heavy.batch_knee(ROOF) == pytest.approx(4.0 * WEIGHTS / (2e8 * 1.02 + 4.0 * 2e9), rel=1e-6)
    assert heavy.batch_knee(ROOF) < 1
    assert "grows with every sequence, with no flat stretch" in curve_draw.batch_knee_sentence(heavy, ROOF)


def test_the_h200_batch_knee_is_predicted_from_the_published_shape_and_measured_near_it():
    """The shipped H200 recording timed a decode step for 1 to 1,024 sequences at s = 384. Its batch's knee, from
    Llama-3-8B's published figures by hand (the weights once, each sequence's arithmetic at the peak and its K/V at
    the bandwidth, added), is the curve's prediction; the measured knee (level meets slope) lies within ×1.5 of it.
    One intensity with the K/V counted in (batched.saturating_batch, as if the reads hid under the arithmetic) puts
    it past ×3 away: the measurement decides between the two."""
    from physics.batched import saturating_batch
    from physics.kvcalc import from_table

    lad = _h200()
    c, roof = lad.rungs[-1].curve, lad.roof
    spec = from_table("Llama-3-8B")
    assert c.context == 384 and max(p.rows for p in c.of("batch")) >= 512
    embed = spec.vocab * spec.d_model
    weights = (spec.parameters - embed) * 2.0  # bf16, read once; the embedding is looked up a row at a time
    flops = 2 * (spec.parameters - embed)  # one sequence's products (its attention's arithmetic is ~1 % more)
    kv = 2 * spec.layers * spec.kv_heads * spec.head_dim * 2.0 * (c.context + 1)  # its K and V, every layer
    by_hand = roof.ridge * weights / (flops + roof.ridge * kv)
    assert c.batch_knee(roof) == pytest.approx(by_hand, rel=0.03)
    measured = c.knee("batch", roof).measured
    assert 1 / 1.5 < measured / by_hand < 1.5
    one_intensity = saturating_batch(spec, c.context, 2.0, roof.ridge)
    assert measured / one_intensity < 1 / 3


def test_a_pass_knows_its_side_and_how_near_its_roof_it_ran():
    c = synthetic(PHYSICS)
    one, far = c.of("prefill")[0], c.of("prefill")[-1]
    bound = WEIGHTS / ROOF.bandwidth_for(WEIGHTS) * 1e3  # the rate measured at that many bytes
    assert one.bound == "memory" and one.share == pytest.approx(bound / 20.0)
    assert far.bound == "compute" and far.share == pytest.approx((2 * 100e6 * 64 / 1e11 * 1e3) / 128.0)


def test_each_ratio_to_a_bound_is_the_median_of_the_rounds_own():
    """Probed beside the passes: round i's bound is bytes over that round's read rate (FLOPs over its matmul rate);
    the ratio is the median of the per-round ratios, the spread their lowest and highest. A recording without
    rounds says it probed once."""
    rounds = ((25e9, 1e11), (12.5e9, 1e11), (25e9, 0.5e11))  # the second round's read at half speed
    c = synthetic({"decode": {1: [24.0, 40.0, 20.0]}, "prefill": {64: [128.0, 128.0, 256.0]}}, rounds=rounds)
    star, far = c.of("decode")[0], c.at("prefill", 64)
    by_hand = [ms / (max(star.bytes_moved / r, star.flops / p) * 1e3) for ms, (r, p) in zip(star.samples_ms, rounds)]
    h = c.held(star)
    assert (h.median, h.low, h.high, h.rounds) == pytest.approx((sorted(by_hand)[1], min(by_hand), max(by_hand), 3))
    # the slow round's pass (40 ms) and its bound (read at half speed) moved together: ×1.25 as in the third round
    assert by_hand[1] == pytest.approx(by_hand[2]) == pytest.approx(h.median) and h.high == pytest.approx(1.5)
    assert c.held(far).median == pytest.approx(128.0 / (2 * 100e6 * 64 / 1e11 * 1e3))
    assert "over 3 rounds" in curve_draw.curve_claim(c, ROOF, "decode", "this CPU")
    assert synthetic(PHYSICS).held(star) is None
    assert "probed the bounds once, before the passes" in curve_draw.curve_claim(synthetic(PHYSICS), ROOF, "decode",
                                                                                  "this CPU")


def test_a_verdict_whose_bytes_fit_the_cache_names_the_larger_bound_not_the_dram_ridges_side():
    """8 MiB fit the cache (50 GB/s; DRAM 25 GB/s): its ridge is 2 FLOP/byte, DRAM's 4. At 3 FLOP/byte, between the
    two, the memory bound is 8 MiB / 50 GB/s = 0.168 ms and the compute bound 3 · 8 MiB / 1e11 = 0.252 ms: the pass
    is bounded by its arithmetic, though its intensity sits left of DRAM's ridge (its side, a prediction)."""
    moved = 8 * MIB
    flops = 3.0 * moved
    v = roofline.verdict(0.30, flops, moved, ROOF)
    assert v.in_cache and v.memory_ms == pytest.approx(moved / 50e9 * 1e3) and v.compute_ms == pytest.approx(
        flops / 1e11 * 1e3)
    assert v.side == "memory" and v.bound == "compute" and v.label.startswith("compute-bound")


def test_a_pass_over_n_rows_is_charged_n_rows_of_arithmetic_and_its_weights_once():
    """Estimates written again from the model's figures: a pass over n rows does 2 FLOPs per weight per row (plus its
    attention) and reads every weight once, plus the K/V each sequence reads: FLOPs grow with n, weight bytes do not."""
    from physics.kvcalc import from_table

    spec = from_table("Llama-3-8B")
    head = spec.vocab * spec.d_model  # the LM head (untied here): only a sequence's last row reaches it
    matrices = spec.parameters - head  # every weight a row multiplies (the embedding is looked up, not multiplied)
    for kind in ("prefill", "batch"):
        (f1, b1), (f8, b8) = (curves.estimates(spec, kind, n, 128, 2.0) for n in (1, 8))
        assert f1 == pytest.approx(2 * matrices, rel=0.05)
        # eight rows: eight rows through the body; the LM head once for a prefill, once per sequence for a batch
        want = 8 * 2 * (matrices - head) + (1 if kind == "prefill" else 8) * 2 * head
        assert f8 == pytest.approx(want, rel=0.05)
        assert b1 == pytest.approx(matrices * 2.0, rel=0.05)  # bf16: 2 bytes a weight, read once
        kv = 2 * spec.layers * spec.kv_heads * spec.head_dim * 2.0  # K and V of one position, every layer
        rows = 7 * spec.d_model * 2.0  # 7 more tokens' rows of the (untied) embedding, looked up
        extra = rows + (7 * (128 + 1) * kv if kind == "batch" else 7 * kv)  # 7 more sequences' caches, or positions
        assert b8 - b1 == pytest.approx(extra, rel=0.05)


def test_the_whole_curve_survives_its_json():
    """Every field, the kernels and the rounds included, compared whole after the round trip; a recording made before
    a field existed keeps its default and the words say what it lacks (no kernel: read off its graphs' names)."""
    c = synthetic(PHYSICS, kv=40e6, rounds=((25e9, 1e11), (20e9, 0.9e11), (24e9, 1e11)))
    back = curves.Curve.from_dict(json.loads(json.dumps(c.to_dict())), ROOF)
    assert back == c and back.rounds == c.rounds and [p.kernel for p in back.points] == [p.kernel for p in c.points]
    row = c.to_dict()["points"][0]
    assert row["median_ms"] == pytest.approx(sorted(row["samples_ms"])[1])  # said beside the runs, for a reader
    old = c.to_dict()
    del old["rounds"]
    for p in old["points"]:
        del p["kernel"]
    old["compile_ms"] = {"the decode step (one-row kernel)": 1.0, "n = 1 (one token)": 1.0}
    was = curves.Curve.from_dict(json.loads(json.dumps(old)), ROOF)
    assert was.rounds == () and all(p.kernel == "" for p in was.points)
    assert [was.kernel(p) for p in was.points] == [c.kernel(p) for p in c.points]


def test_a_bigger_pass_measured_faster_is_flagged_as_a_busy_server_or_as_noise():
    """Four sequences faster than two, the order physics forbids: a busy server where the repeats spread wide, timing
    noise where they agreed (the H200 recording's one-token prefill beside its two-token one)."""
    times = {k: dict(v) for k, v in PHYSICS.items()}
    times["batch"][4] = [9.0, 9.5, 10.0]
    note = curve_note(synthetic(times))
    assert note and note.startswith(NOISE) and "batch of 4 took 9.5 ms, less than the batch of 2 (24.0 ms)" in note
    times["batch"][4] = [5.0, 9.5, 12.0]  # ×2.4 between its fastest and slowest run
    note = curve_note(synthetic(times))
    assert note and note.startswith(BUSY) and "batch of 4 took 9.5 ms, less than the batch of 2 (24.0 ms)" in note
    assert curve_note(synthetic(PHYSICS)) is None


def test_a_wide_spread_on_any_pass_is_said_on_the_chart():
    """No order flipped, but the 32-row batch's runs spread ×2.5: the note names that pass, wherever it sits."""
    times = {k: dict(v) for k, v in PHYSICS.items()}
    times["batch"][32] = [60.0, 76.8, 150.0]
    note = curve_note(synthetic(times))
    assert note and note.startswith(BUSY) and "the pass over 32 rows (batch) ranged 60.0–150.0 ms" in note


def test_the_caption_says_the_curves_own_figures_and_reads_it_only_where_the_knee_agrees():
    c = synthetic(PHYSICS)
    said = curve_draw.curve_caption(c, ROOF)
    assert f"A prefill of 8 tokens took ×{c.ratio('prefill', 8):.2f} the 1-token prefill (20 ms) on {MANY}" in said
    assert "predicted at ~8.0 rows" in said and "meet at n ≈ 10.0 (×1.25 the prediction)" in said
    last = c.of("prefill")[-1]
    assert f"×{last.median_ms / last.compute_ms:.2f} its compute bound" in said
    assert "The knee lies within ×1.5 of where the ridge puts it" in said
    flat = synthetic({k: {n: [20.0, 20.0, 20.0] for n in v} for k, v in PHYSICS.items()})  # never leaves the floor
    assert "The knee lies" not in curve_draw.curve_caption(flat, ROOF)
    early = synthetic({"prefill": line(20.0, 10.0), "batch": line(24.0, 2.4)})  # knee at 2: ×0.25 the prediction
    assert "outside ×1.5: this run does not show the roofline cleanly" in curve_draw.curve_caption(early, ROOF)


def test_a_lessons_claim_quotes_the_curve_with_the_verdicts_own_words():
    c = synthetic(PHYSICS)
    decode = curve_draw.curve_claim(c, ROOF, "decode", "this CPU")
    one = c.of("decode")[0]  # the rung's own decode step, on its one-row kernel
    v = roofline.verdict(one.median_ms, one.flops, one.bytes_moved, ROOF)
    assert v.kind == "memory-bound" and f"**memory-bound: {roofline.percent(v.share)} of the measured " \
                                        "bandwidth (MBU)**" in decode
    assert f"the decode step for 8 sequences took ×{c.ratio('batch', 8):.2f} the same step for 1 sequence" in decode
    prefill = curve_draw.curve_claim(c, ROOF, "prefill", "this CPU")
    last = c.of("prefill")[-1]
    w = roofline.verdict(last.median_ms, last.flops, last.bytes_moved, ROOF)
    assert w.kind == "compute-bound" and f"**compute-bound: {roofline.percent(w.share)} of the measured " \
                                         "matmul peak (MFU)**" in prefill


def test_a_decode_claim_from_a_curve_without_batches_says_its_ratio_is_a_prefills():
    """A recording that timed only prefills over n rows: lesson 3 quotes that ratio as a prefill's, never as the
    step for 8 sequences it did not time."""
    import dataclasses

    c = synthetic(PHYSICS)
    only = dataclasses.replace(c, points=tuple(p for p in c.points if p.kind != "batch"))
    said = curve_draw.curve_claim(only, ROOF, "decode", "an H200")
    assert "sequences at once took" not in said
    assert f"the step for 8 sequences was not timed here; a prefill of 8 tokens took ×{c.ratio('prefill', 8):.2f}" \
        in said
    lad = _h200()  # a recording with batches quotes the batch's own ratio
    c8 = lad.rungs[-1].curve
    gpu = curve_draw.curve_claim(c8, lad.roof, "decode", "an H200", lad.device)
    assert "not timed here" not in gpu and f"×{c8.ratio('batch', 8):.2f}" in gpu


def test_the_picture_draws_both_kinds_both_bounds_and_each_kinds_knees():
    c = synthetic(PHYSICS, kv=40e6)
    fig = curve_draw.curve_figure(c, ROOF, "this CPU")
    names = [t.name for t in fig.data]
    assert "prefill of n tokens, measured" in names and "decode step for n sequences, measured" in names
    assert f"the decode step ({ONE})" in names
    flat = next(t for t in fig.data if t.name.startswith("memory bound"))
    assert list(flat.y) == pytest.approx([counts("prefill", n, 40e6)[1] / ROOF.bandwidth_for(
        counts("prefill", n, 40e6)[1]) * 1e3 for n in ROWS])  # bytes ÷ bandwidth
    slope = next(t for t in fig.data if t.name.startswith("compute bound"))
    assert list(slope.y) == pytest.approx([2 * 100e6 * n / 1e11 * 1e3 for n in ROWS])
    lines = sorted(shape.x0 for shape in fig.layout.shapes)
    assert lines == pytest.approx(sorted([c.predicted_knee("prefill", ROOF), c.batch_knee(ROOF)]))
    texts = [a.text.replace("<br>", " ") for a in fig.layout.annotations]  # as read, its line breaks aside
    assert f"predicted knee (prefill) ≈ {c.predicted_knee('prefill', ROOF):.1f} rows" in texts
    assert f"predicted knee (batch, K/V added) ≈ {c.batch_knee(ROOF):.1f} rows" in texts
    assert f"measured knee ≈ {c.knee('prefill', ROOF).measured:.1f}" in texts
    neg = curve_draw.curve_figure(synthetic(PHYSICS), ROOF, "this CPU")  # negligible K/V: one line, said so
    assert len(neg.layout.shapes) == 1 and any("both kinds: K/V bytes negligible" in a.text
                                               for a in neg.layout.annotations)


def test_the_rows_timed_reach_past_the_knee_on_each_device():
    import torch

    from physics.kvcalc import from_table

    spec = from_table("Llama-3-8B")  # its published figures (config only)
    h200 = roofline.DeviceRoof("h200", 7.4e14, 4.1e12, True, elem_bytes=2.0)
    rows = curves.row_counts(spec, h200, torch.device("cuda"), 384)
    assert rows[0] == 1 and all(b == 2 * a for a, b in zip(rows, rows[1:]))
    assert rows[-1] >= 4 * h200.ridge_tokens  # far enough past ~180 rows for the slope to show
    passes = curves.every_pass(spec, h200, torch.device("cuda"), 384)
    assert ("prefill", 384) in passes and ("batch", 1) in passes
    # the batched decode, which gpu-check times too, reaches twice its own knee (K/V counted: ~424 sequences at
    # s = 384), where its K/V fits: measure_curve leaves out, and says, a batch whose cache would not
    from physics.batched import saturating_batch

    batch_knee = saturating_batch(spec, 384, 2.0, h200.ridge)
    assert max(n for k, n in passes if k == "batch") >= 2 * batch_knee


# ---------------------------------------------------------------- the recorded GPU ladder


def test_the_recorded_gpu_ladder_is_read_back_in_bfloat16():
    """The H200 recording says bfloat16: read back with 2 bytes an element, its ridge is ~180 FLOP/byte and ~180
    rows, a 128-token prefill does ~128 FLOP/byte and a decode step ~1 (the file's own FLOPs and bytes)."""
    raw = json.loads((ASSETS / "ladder_gpu.json").read_text(encoding="utf-8"))
    lad = Ladder.from_dict(raw)
    assert raw["dtype"] == "bfloat16" and lad.roof.elem_bytes == 2.0 and lad.roof.dtype == "bf16"
    ridge = raw["roof"]["peak_flops"] / raw["roof"]["bandwidths"][-1][1]
    assert lad.roof.ridge == pytest.approx(ridge) and 150 < ridge < 210
    assert lad.roof.ridge_tokens == pytest.approx(ridge)  # 2 FLOPs per weight per row over 2 bytes
    top = lad.rungs[-1]
    s = raw["tokens"]
    assert top.prefill.intensity == pytest.approx(s, rel=0.1) and top.decode.intensity == pytest.approx(1, rel=0.1)


def test_a_recording_is_named_as_one_with_its_device_and_date():
    """Wherever a recording stands in for this server: its words, and the subtitle of every picture drawn from it."""
    from topics.ladder import draw
    from topics.ladder.page_ladder import recorded_words
    from topics.ladder.store import recorded_ladders

    for lad in recorded_ladders():
        said = recorded_words(lad)
        assert said.startswith("a recording made on ") and lad.device in said and lad.measured_at[:10] in said
        for fig in (draw.per_token_figure(lad), draw.roofline_figure(lad), draw.split_figure(lad)):
            assert f"a recording: {draw.short_device(lad.device)}, {lad.measured_at[:10]}" in \
                fig.layout.title.subtitle.text
    live = Ladder.from_dict(json.loads((ASSETS / "ladder_cpu.json").read_text(encoding="utf-8")))  # as if measured
    assert "a recording" not in draw.per_token_figure(live).layout.title.subtitle.text


# ---------------------------------------------------------------- in a ladder, and in gpu-check's dry run


def quick_probe(mp) -> None:
    """The roofline probe shortened (its length and buffer sizes change no structure a test reads)."""
    from topics.ladder import measure

    mp.setattr(measure, "PROBE_S", 0.05)
    mp.setitem(roofline.COPY_MIB, "cpu", (16, 64))
    mp.setattr(measure, "CURVE_MIN", 0)  # the curve at the bundled model's own rung (a real one takes ≥ 100 M)


@pytest.fixture(scope="module")
def small_ladder(bundled_lm):
    """The bundled model's ladder with the curve at its own rung, eager (no compile time)."""
    from topics.ladder import measure

    with pytest.MonkeyPatch.context() as mp:
        quick_probe(mp)
        return measure.measure_ladder(bundled_lm, ["own"], tokens=16, repeats=2, compile=False,
                                      curve_passes=[("decode", 1)] + [(k, n) for n in (1, 4, 16)
                                                                      for k in ("prefill", "batch")])


def test_a_ladder_times_its_curve_rungs_passes_and_its_lean_decode_is_the_curves_one_row(small_ladder):
    (r,) = small_ladder.rungs
    c = r.curve
    assert c is not None and {p.kind for p in c.points} == {"prefill", "batch", "decode"}
    (one,) = c.of("decode")  # the rung's decode step, on its one-row kernel: the ladder's lean decode
    assert r.lean.median_ms == pytest.approx(one.median_ms) and r.lean.past == small_ladder.tokens
    full = next(p for p in c.of("prefill") if p.rows == small_ladder.tokens)
    assert r.lean_prefill.median_ms == pytest.approx(full.median_ms)
    back = Ladder.from_dict(json.loads(json.dumps(small_ladder.to_dict())))
    assert back.rungs[0].curve.points == c.points


def test_the_cli_prints_the_curve_and_the_figures_the_lean_pass_is_held_to(small_ladder):
    from topics.ladder.cli import curve_table

    c = small_ladder.rungs[0].curve
    table = curve_table(c, small_ladder.roof)
    for n in {p.rows for p in c.points}:
        assert re.search(rf"^\s+{n} ", table, re.MULTILINE), n
    (one,) = c.of("decode")
    assert f"x{one.median_ms / one.memory_ms:.2f} its DRAM memory bound" in table


@pytest.mark.slow  # a whole dry gpu-check on the bundled model: ~1.5 s
def test_gpu_check_runs_dry_on_a_cpu_and_writes_its_ladder_first(bundled_lm, tmp_path, monkeypatch):
    from benchmarks import gpu_check

    quick_probe(monkeypatch)
    path = tmp_path / "gpu.json"
    check = gpu_check.gpu_check(sizes=["own"], device="cpu", tokens=16, compile=False, json_path=str(path),
                                log=lambda text: None, curve_passes=[("batch", 1), ("prefill", 2), ("prefill", 16),
                                                                     ("batch", 2), ("batch", 16)])
    doc, rows = check.to_dict(), check.targets
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["rungs"][0]["curve"] == json.loads(json.dumps(doc["rungs"][0]["curve"]))
    targets = {r.target for r in rows}
    assert any("lean decode ≤ ×1.5 its memory bound" in t for t in targets)
    assert any("the prefill's measured knee" in t and "within ×1.5 of its predicted knee, either way" in t
               for t in targets)
    assert any("the batched decode's (its K/V reads added) measured knee" in t for t in targets)  # the batch on the GPU too
    curve = check.ladder.rungs[0].curve
    assert {p.kind for p in curve.points} >= {"prefill", "batch"}
    assert len(curve.rounds) == len(curve.points[0].samples_ms) and curve.held(curve.points[0]) is not None
    assert doc["gpu_check"]["targets"] == [{"target": r.target, "measured": r.measured, "holds": r.holds} for r in rows]
    assert all(r.holds is None for r in rows if r.target.startswith("≥ 7 B"))  # no 8 B rung: not measured
    assert set(doc["gpu_check"]) == set(json.loads((ASSETS / "ladder_gpu.json").read_text())["gpu_check"])  # its keys


def _h200():
    return Ladder.from_dict(json.loads((ASSETS / "ladder_gpu.json").read_text(encoding="utf-8")))


def _targets(lad, big, points=None, lean=None):
    """gpu_check.targets on the recording with its big rung's curve passes (or lean decode) planted."""
    import dataclasses

    from benchmarks import gpu_check

    grown = big
    if points is not None:
        grown = dataclasses.replace(grown, curve=dataclasses.replace(big.curve, points=tuple(points)))
    if lean is not None:
        grown = dataclasses.replace(grown, lean=lean)
    return gpu_check.targets(dataclasses.replace(lad, rungs=(*lad.rungs[:-1], grown)), 100.0, None, None, None, 150.0)


def _row(rows, words):
    return next(t for t in rows if words in t.target)


def _timed(point, ms):
    import dataclasses

    return dataclasses.replace(point, samples_ms=tuple(ms for _ in point.samples_ms))


def test_gpu_check_on_the_shipped_h200_recording_says_each_figure_and_which_hold():
    """The 2026-11-29 recording: its quick matmul probes (4096², best of 3) measured less than the big prefills
    ran at, so every compute-side pass is placed on the run's best probe, each ratio its time over that bound; the
    knees as measured; the lean decode over ×1.5 its memory bound on that machine: the target says NO."""
    lad = _h200()
    c = lad.rungs[-1].curve
    rows = _targets(lad, lad.rungs[-1])
    far = _row(rows, "prefill pass of n ≥ 4×")
    big = [p for p in c.of("prefill") if p.rows >= 1024]
    assert all(c.probes_short(p) and c.held(p) is None for p in big)
    assert far.holds is True and far.measured.startswith("met by n = 1024, 2048, 4096 (nearest its bound: n = 4096")
    assert re.findall(r"n = (\d+): ×([\d.]+)", far.measured.split("each: ")[1]) == [
        (str(p.rows), f"{p.median_ms / p.compute_ms:.2f}") for p in big]
    assert all(1.0 < p.median_ms / p.compute_ms < 1.3 for p in big)
    knee = _row(rows, "the prefill's measured knee")
    assert knee.holds is True and knee.measured == "measured n ≈ 226, predicted ~181 (×1.25)"
    batch = _row(rows, "the batched decode's (its K/V reads added) measured knee")
    assert batch.holds is True and batch.measured == "measured n ≈ 110, predicted ~107 (×1.03)"
    lean = _row(rows, "lean decode ≤ ×1.5")
    assert lean.holds is False and lean.measured.startswith("×1.82")


def test_gpu_checks_targets_catch_the_passes_planted_in_the_h200_recording():
    """Each target must fail on what it is there to catch: an early knee (the slope from n ≈ 20, against ~190
    predicted: a one-sided check would pass it); a slow last far pass beside a nearer one that holds (the target
    asks for one such pass: the nearest its bound decides, and is named); a lean decode over its bound."""
    lad = _h200()
    big = lad.rungs[-1]
    c, roof = big.curve, lad.roof
    k = c.knee("prefill", roof)
    # an early knee: the passes past the prediction on a slope that meets the level at n = 20
    early = [_timed(p, k.level_ms + k.slope_ms * (p.rows - 20)) if p.kind == "prefill" and p.rows in k.slope_rows
             else p for p in c.points]
    planted = _row(_targets(lad, big, early), "the prefill's measured knee")
    assert planted.holds is False and planted.measured.startswith("measured n ≈ 20,")
    late = [_timed(p, k.level_ms + k.slope_ms * (p.rows - 400)) if p.kind == "prefill" and p.rows in k.slope_rows
            else p for p in c.points]  # meets the level at n = 400: ×2.1 the prediction
    assert _row(_targets(lad, big, late), "the prefill's measured knee").holds is False
    # a slow last far pass beside a holding nearer one (planted against the roof's bound: the rounds' own probes
    # set apart, since a planted time beside them would be read against a probe it was not timed with)
    import dataclasses

    plain = dataclasses.replace(big, curve=dataclasses.replace(c, rounds=()))
    far = [p for p in c.of("prefill") if p.rows >= 4 * c.predicted_knee("prefill", roof)]
    slow = [_timed(p, 1.45 * p.compute_ms) if p is far[-1] else _timed(p, 1.28 * p.compute_ms) if p in far else p
            for p in c.points]
    row = _row(_targets(lad, plain, slow), "prefill pass of n ≥ 4×")
    assert row.holds is True and row.measured.startswith(f"met by n = {far[0].rows}, {far[1].rows} (nearest")
    assert f"n = {far[-1].rows}: ×1.45" in row.measured
    none = [_timed(p, 1.45 * p.compute_ms) if p in far else p for p in c.points]
    assert _row(_targets(lad, plain, none), "prefill pass of n ≥ 4×").holds is False
    # a lean decode over its bound
    import dataclasses

    over = dataclasses.replace(big.lean, median_ms=1.6 * big.lean.memory_ms, ratio=1.6)
    assert _row(_targets(lad, big, lean=over), "lean decode ≤ ×1.5").holds is False


# ---------------------------------------------------------------- the shipped recordings' own figures, pinned


def test_the_cpu_recordings_knees_ratios_and_captions_are_pinned():
    lad = Ladder.from_dict(json.loads((ASSETS / "ladder_cpu.json").read_text(encoding="utf-8")))
    r = next(r for r in lad.rungs if r.curve)
    c, roof = r.curve, lad.roof
    assert round(c.ratio("prefill", 8), 2) == 1.20 and round(c.ratio("batch", 8), 2) == 1.31  # one kernel each
    # against the 2-row passes: n = 1 was compiled apart ("n = 1 (one token)", the graph the one-token prefill, an
    # outlier slower than 4 tokens, and the one-sequence step both ran on), so neither kind is read against it
    assert c.base("prefill", 8).rows == 2 and c.outlier("prefill").pass_.rows == 1
    assert c.one_apart and c.base("batch", 8).rows == 2
    star = c.of("decode")[0]
    assert c.compare(c.at("prefill", 8), star) is None and c.compare(c.at("batch", 8), star) is None  # ×1.82, ×2.08
    assert round(star.median_ms / star.memory_ms, 2) == 1.30
    k, b = c.knee("prefill", roof), c.knee("batch", roof)
    assert (round(k.predicted, 1), round(k.measured, 1), k.level_rows, k.slope_rows) == (7.0, 7.3, (2, 4),
                                                                                        (16, 32, 64, 128))
    # each sequence's 3.17 MB of K/V read beside its products: ~6.3, a tenth sooner than the prefill's ~7.0
    assert (round(b.predicted, 2), round(b.measured, 1)) == (6.35, 5.4) and not c.kv_negligible(roof)
    assert c.outlier("prefill").pass_.rows == 1 and c.outlier("batch") is None
    said = curve_draw.curve_caption(c, roof, lad.device)
    for words in ("A prefill of 8 tokens took ×1.20 the 2-token prefill (30.8 ms) on the many-row kernel, for ×4 the "
                  "arithmetic",
                  "the decode step for 8 sequences took ×1.31 the same step for 2 sequences (32.3 ms) on the "
                  "many-row kernel, for ×4 the arithmetic",
                  "runs on the one-row kernel: 20.3 ms, ×1.30 its memory bound", "meet at n ≈ 7.3 (×1.04 the "
                  "prediction)", "predicted at ~6.3 sequences, sooner than the prefill's knee", "meet at n ≈ 5.4 (×0.84",
                  "At 128 rows the prefill took 294 ms, ×1.05 its compute bound"):
        assert words in said, words
    assert "×1.82" not in said and "×2.08" not in said


def test_the_h200_recordings_knees_gap_cache_and_shares_are_pinned():
    """Read back (the 2026-11-29 recording): the lean per-token gap ×230 (the rule ×169) and what the cache saves
    ×1.67 (the rule ×2.28); MBU and MFU of the roof measured with the datasheet's shares beside; one measured
    ridge (168.6) wherever the ridge is quoted; the prefill's knee 226 measured against ~181 predicted; the batch's
    own ~107, measured 110."""
    from topics.ladder import draw

    lad = _h200()
    r = lad.rungs[-1]
    c, roof = r.curve, lad.roof
    assert round(r.lean_gap) == 230 and round(r.lean_cache_saves, 2) == 1.67
    said = draw.per_token_caption(lad)
    assert "×230 (×1.36 the rule's ×169: its decode step ran ×1.82 its bound, its prefill ×1.43 its own)" in said
    assert "the cache saves ×1.67 there" in said and "×2.28" in said
    caption = curve_draw.curve_caption(c, roof, lad.device)
    assert "memory-bound: 55% of the measured bandwidth (MBU); 46% of the NVIDIA H200 datasheet's 4.8 TB/s" \
        in caption
    assert "87% of the measured matmul peak (MFU); 59% of the NVIDIA H200 datasheet's 989 TFLOP/s" in caption
    assert "meet at n ≈ 226 (×1.25 the prediction)" in caption and "~107 sequences" in caption
    assert "meet at n ≈ 110 (×1.03 the prediction)" in caption
    # the ladder's lean decode and the curve's star are one pass: the curve quotes the ladder's ratio first
    assert r.lean.median_ms == c.of("decode")[0].median_ms
    assert f"×{r.lean.ratio:.2f} its bound" in draw.lean_roof_words(lad)
    assert f"6.8 ms, ×{r.lean.ratio:.2f} its memory bound, ×1.72 (×1.63–1.76 over 5 rounds) against" in caption
    assert "(a graph of its own) took 6.68 ms, ×1.06 the pass over 8 rows" in caption
    assert curve_note(c) is None  # the one-row graph is named as an outlier, not called the server's noise
    ridges = {m for text in (caption, said, curve_draw.curve_claim(c, roof, "prefill", "H200", lad.device))
              for m in re.findall(r"ridge[^.;]*? ~?([\d.]+) (?:FLOP/byte|tokens)", text)}
    assert ridges <= {"168.6", "169", "295"}, ridges  # the measured ridge, and an H100's datasheet one, named so
    assert "(datasheet)" in said


# ---------------------------------------------------------------- every sentence the curve writes, read


def _audit_curves():
    """Three recordings where the words could go wrong: (a) the one-row prefill an outlier, (b) the decode step's
    kernel far from the many-row one, (c) each sequence's K/V weighing a tenth of the weights. In each the passes
    below the knee run ×2–3 their memory bound: on the memory side, never memory-bound."""
    bound = WEIGHTS / ROOF.bandwidth_for(WEIGHTS) * 1e3  # 16 ms
    a = {"prefill": line(36.0, 3.6), "batch": line(40.0, 4.0), "decode": {1: [34.0] * 3}}
    a["prefill"][1] = [46.0] * 3
    b = {"prefill": line(36.0, 3.6), "batch": line(40.0, 4.0), "decode": {1: [33.0] * 3}}
    kv = 40e6

    def batch_ms(n):
        moved = counts("batch", n, kv)[1]
        return max(2.3 * moved / ROOF.bandwidth_for(moved) * 1e3, 2e8 * 1.02 * n / 1e11 * 1e3 * 1.1)

    c = {"prefill": line(36.0, 3.6), "batch": {n: [batch_ms(n)] * 3 for n in ROWS + (128,)},
         "decode": {1: [2.3 * counts("decode", 1, kv)[1] / 25e9 * 1e3] * 3}}
    assert 2 < 36.0 / bound < 3
    return {"outlier": synthetic(a), "kernels": synthetic(b), "kv": synthetic(c, kv=kv)}


def _sentences(curve) -> list[str]:
    from topics.ladder.cli import curve_table
    from topics.ladder.page_ladder import GROW_HELP

    texts = [curve_draw.curve_caption(curve, ROOF), curve_draw.curve_claim(curve, ROOF, "prefill", "this CPU"),
             curve_draw.curve_claim(curve, ROOF, "decode", "this CPU"), GROW_HELP, curve_table(curve, ROOF),
             curve_draw.docs_table(curve, ROOF)]
    return [s for t in texts for s in re.split(r"\n|(?<=[.|])\s+", t) if s.strip()]


@pytest.mark.parametrize("which", ["outlier", "kernels", "kv"])
def test_every_sentence_the_curve_writes_compares_one_kernel_gives_a_batch_its_own_knee_and_follows_the_verdict(
        which):
    """The caption (the page), lessons 2 and 3's claims, the help, the CLI's table and the docs' generated table,
    read sentence by sentence: no ratio across kernels, no batch given the prefill's knee, no 'memory-bound' where
    the verdict says 'memory side'."""
    c = _audit_curves()[which]
    sentences = _sentences(c)
    star = c.of("decode")[0]
    cross = {f"{p.median_ms / star.median_ms:.2f}" for p in c.points if c.kernel(p) != c.kernel(star)}
    same = {f"{c.ratio(k, 8):.2f}" for k in ("prefill", "batch")}
    for s in sentences:
        for r in re.findall(r"[×x]([\d.]+\d)", s):
            assert r not in cross - same, (r, s)
    pre = c.predicted_knee("prefill", ROOF)
    if not c.kv_negligible(ROOF):
        said = [s for s in sentences if ("sequence" in s or "batch" in s) and "knee" in s]
        assert said and all(f"~{pre:.1f}" not in s and f"~{pre:.0f} " not in s for s in said), said
        assert any(f"~{curve_draw._n(c.batch_knee(ROOF))} sequences" in s for s in said)
    kinds = {roofline.verdict(p.median_ms, p.flops, p.bytes_moved, ROOF).kind for p in c.points}
    assert "memory-bound" not in kinds
    for s in sentences:
        for m in re.finditer(r"memory-bound", s):
            assert s[max(0, m.start() - 4):m.start()] == "not ", s




@pytest.mark.parametrize("name", ["ladder_cpu.json", "ladder_gpu.json"])
def test_the_docs_print_each_recordings_curve_table_as_generated(name):
    """docs/measurements.md carries `python -m topics.ladder.docs assets/<file>` verbatim: the docs say what the
    captions say, and one command regenerates them."""
    from pathlib import Path

    from topics.ladder.docs import table

    doc = (Path(__file__).resolve().parent.parent / "docs" / "measurements.md").read_text(encoding="utf-8")
    assert table(str(ASSETS / name)) in doc
