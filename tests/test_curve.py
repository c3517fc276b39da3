"""One pass, n rows: the record's knees and ratios, its words and picture, its place in a ladder and in gpu-check,
and the recorded GPU ladder read back in the dtype it records. References: the record's own raw times (samples),
recomputed by hand; the roofline's definitions written again here; the recorded file's own fields."""

from __future__ import annotations

import json
import re

import pytest

from engine.measure import roofline
from engine.measure.caveats import BUSY, NOISE, curve_note
from engine.paths import ASSETS
from topics.ladder import curve as curves
from topics.ladder import curve_draw
from topics.ladder.record import Ladder

pytestmark = pytest.mark.xdist_group("ladder")  # one worker: `small_ladder` is measured once, beside test_ladder's

# a CPU-like roof: 100 GFLOP/s, DRAM 25 GB/s (a cache twice as fast): the ridge 4 FLOP/byte, ~8 rows in fp32
MIB = 2**20
ROOF = roofline.DeviceRoof("test cpu", peak_flops=1e11, bandwidth=50e9, measured=True,
                           bandwidths=((16 * MIB, 50e9), (1024 * MIB, 25e9)), elem_bytes=4.0)
WEIGHTS = 400e6  # bytes a pass reads: 100 M parameters in fp32


def synthetic(times: dict[str, dict[int, list[float]]]) -> curves.Curve:
    """A curve whose passes read WEIGHTS bytes and do 2 · 100 M · n FLOPs, with the given timed runs."""
    points = []
    for kind, by_n in times.items():
        for n, samples in by_n.items():
            flops, moved = 2 * 100e6 * n, WEIGHTS
            v = roofline.verdict(sorted(samples)[len(samples) // 2], flops, moved, ROOF)
            points.append(curves.RowsPass(kind=kind, rows=n, samples_ms=tuple(samples), warmup_ms=None, flops=flops,
                                          bytes_moved=moved, memory_ms=v.memory_ms, compute_ms=v.compute_ms))
    return curves.Curve(rung="112M", parameters=int(100e6), dtype="float32", context=128, path="test", compile_ms={},
                        points=tuple(sorted(points, key=lambda p: p.rows)), left_out=(), wall_s=1.0)


# the physics, timed: flat at 20 ms while the weights set the time, then 2 ms a row once the arithmetic does
PHYSICS = {kind: {n: [max(20.0, 2.0 * n) * f for f in (0.98, 1.0, 1.03)] for n in (1, 2, 4, 8, 16, 32, 64)}
           for kind in ("prefill", "batch")}


def test_the_knees_and_ratios_are_read_off_the_timed_runs():
    c = synthetic(PHYSICS)
    for kind in ("prefill", "batch"):
        one = sorted(PHYSICS[kind][1])[1]
        assert c.ratio(kind, 8) == pytest.approx(sorted(PHYSICS[kind][8])[1] / one)
        # the first n whose median reaches ×1.5 the one-row median, found by hand
        by_hand = next(n for n in sorted(PHYSICS[kind]) if sorted(PHYSICS[kind][n])[1] >= 1.5 * one)
        assert c.measured_knee(kind) == by_hand == 16
    # the predicted knee: where 2·100M·n FLOPs over 400 MB meets the ridge (1e11 / 25e9 = 4 FLOP/byte): n = 8
    assert c.predicted_knee("prefill", ROOF) == pytest.approx(8.0)
    assert ROOF.ridge == pytest.approx(4.0) and ROOF.ridge_tokens == pytest.approx(8.0)


def test_a_pass_knows_its_side_and_how_near_its_roof_it_ran():
    c = synthetic(PHYSICS)
    one, far = c.of("prefill")[0], c.of("prefill")[-1]
    bound = WEIGHTS / ROOF.bandwidth_for(WEIGHTS) * 1e3  # the rate measured at that many bytes
    assert one.bound == "memory" and one.share == pytest.approx(bound / 20.0)
    assert far.bound == "compute" and far.share == pytest.approx((2 * 100e6 * 64 / 1e11 * 1e3) / 128.0)


def test_a_pass_over_n_rows_is_charged_n_rows_of_arithmetic_and_its_weights_once():
    """Estimates written again from the model's figures: a pass over n rows does 2 FLOPs per weight per row (plus its
    attention) and reads every weight once, plus the K/V each sequence reads: FLOPs grow with n, weight bytes do not."""
    from engine.measure.kvcalc import from_table

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


def test_the_record_survives_its_json_and_keeps_every_timed_run():
    c = synthetic(PHYSICS)
    back = curves.Curve.from_dict(json.loads(json.dumps(c.to_dict())), ROOF)
    assert back == c
    row = c.to_dict()["points"][0]
    assert row["median_ms"] == pytest.approx(sorted(row["samples_ms"])[1])  # said beside the runs, for a reader


def test_a_bigger_pass_measured_faster_is_flagged_as_a_busy_server_or_as_noise():
    """Four sequences faster than two, the order physics forbids: a busy server where the repeats spread wide, timing
    noise where they agreed (the H200 recording's one-token prefill beside its two-token one)."""
    times = {k: dict(v) for k, v in PHYSICS.items()}
    times["batch"][4] = [9.0, 9.5, 10.0]
    note = curve_note(synthetic(times))
    assert note and note.startswith(NOISE) and "batch of 4 took 9.5 ms, less than the batch of 2 (20.0 ms)" in note
    times["batch"][4] = [5.0, 9.5, 12.0]  # ×2.4 between its fastest and slowest run
    note = curve_note(synthetic(times))
    assert note and note.startswith(BUSY) and "batch of 4 took 9.5 ms, less than the batch of 2 (20.0 ms)" in note
    assert curve_note(synthetic(PHYSICS)) is None


def test_the_caption_says_the_curves_own_figures_and_reads_it_only_where_the_knee_agrees():
    c = synthetic(PHYSICS)
    said = curve_draw.curve_caption(c, ROOF)
    assert f"×{c.ratio('prefill', 8):.2f} the one-row time as a prefill of 8 tokens" in said
    assert f"×{c.ratio('batch', 8):.2f} as a decode step for 8 sequences" in said
    assert "predicts the knee at ~8 rows" in said and "at 16 rows (prefill) and 16 rows (batch)" in said
    last = c.of("prefill")[-1]
    assert f"×{last.median_ms / last.compute_ms:.2f} its compute bound" in said
    assert "The knee sits where the ridge puts it" in said
    flat = synthetic({k: {n: [20.0, 20.0, 20.0] for n in v} for k, v in PHYSICS.items()})  # never leaves the floor
    assert "The knee sits" not in curve_draw.curve_caption(flat, ROOF)
    early = synthetic({k: {n: [20.0 * n] * 3 for n in v} for k, v in PHYSICS.items()})  # knee at 2: ×4 off
    assert "not within ×3 of the predicted one" in curve_draw.curve_caption(early, ROOF)


def test_a_lessons_claim_quotes_the_curve_with_the_verdicts_own_label():
    c = synthetic(PHYSICS)
    decode = curve_draw.curve_claim(c, ROOF, "decode", "this CPU")
    one = c.of("batch")[0]
    v = roofline.verdict(one.median_ms, one.flops, one.bytes_moved, ROOF)
    assert f"**{v.label}**" in decode and "memory-bound" in v.label
    assert f"took ×{c.ratio('batch', 8):.2f} the time of one, for ×8 the arithmetic" in decode
    prefill = curve_draw.curve_claim(c, ROOF, "prefill", "this CPU")
    last = c.of("prefill")[-1]
    assert f"**{roofline.verdict(last.median_ms, last.flops, last.bytes_moved, ROOF).label}**" in prefill
    assert "compute-bound" in prefill


def test_a_decode_claim_from_a_curve_without_batches_says_its_ratio_is_a_prefills():
    """The H200 recording timed only prefills over n rows (gpu-check saves a compile): lesson 3 quotes that ratio as
    a prefill's, never as the step for 8 sequences it did not time."""
    import dataclasses

    c = synthetic(PHYSICS)
    only = dataclasses.replace(c, points=tuple(p for p in c.points if p.kind != "batch"))
    said = curve_draw.curve_claim(only, ROOF, "decode", "an H200")
    assert "sequences at once took" not in said
    assert f"a prefill of 8 tokens; the step for 8 sequences was not timed here) took ×{c.ratio('prefill', 8):.2f}" \
        in said
    raw = json.loads((ASSETS / "ladder_gpu.json").read_text(encoding="utf-8"))
    lad = Ladder.from_dict(raw)
    gpu = curve_draw.curve_claim(lad.rungs[-1].curve, lad.roof, "decode", "an H200")
    assert not lad.rungs[-1].curve.of("batch") and "sequences at once took" not in gpu


def test_the_picture_draws_both_kinds_both_bounds_and_the_predicted_knee():
    c = synthetic(PHYSICS)
    fig = curve_draw.curve_figure(c, ROOF, "this CPU")
    names = [t.name for t in fig.data]
    assert "prefill of n tokens, measured" in names and "decode step for n sequences, measured" in names
    flat = next(t for t in fig.data if t.name.startswith("memory bound"))
    assert list(flat.y) == pytest.approx([WEIGHTS / ROOF.bandwidth_for(WEIGHTS) * 1e3] * 7)  # bytes ÷ bandwidth
    slope = next(t for t in fig.data if t.name.startswith("compute bound"))
    assert list(slope.y) == pytest.approx([2 * 100e6 * n / 1e11 * 1e3 for n in (1, 2, 4, 8, 16, 32, 64)])
    assert fig.layout.shapes[0].x0 == pytest.approx(8.0)
    assert any("×1.5 at n = 16" in a.text for a in fig.layout.annotations)


def test_the_rows_timed_reach_past_the_knee_on_each_device():
    import torch

    from engine.measure.kvcalc import from_table

    spec = from_table("Llama-3-8B")  # its published figures (config only)
    h200 = roofline.DeviceRoof("h200", 7.4e14, 4.1e12, True, elem_bytes=2.0)
    rows = curves.row_counts(spec, h200, torch.device("cuda"), 384)
    assert rows[0] == 1 and all(b == 2 * a for a, b in zip(rows, rows[1:]))
    assert rows[-1] >= 4 * h200.ridge_tokens  # far enough past ~180 rows for the slope to show
    passes = curves.every_pass(spec, h200, torch.device("cuda"), 384)
    assert ("prefill", 384) in passes and ("batch", 1) in passes


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


def test_gpu_check_runs_dry_on_a_cpu_and_writes_its_ladder_first(bundled_lm, tmp_path, monkeypatch):
    from benchmarks import gpu_check

    quick_probe(monkeypatch)
    path = tmp_path / "gpu.json"
    check = gpu_check.gpu_check(sizes=["own"], device="cpu", tokens=16, compile=False, json_path=str(path),
                                log=lambda text: None, curve_passes=[("batch", 1), ("prefill", 2), ("prefill", 16)])
    doc, rows = check.to_dict(), check.targets
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["rungs"][0]["curve"] == json.loads(json.dumps(doc["rungs"][0]["curve"]))
    targets = {r.target for r in rows}
    assert any("lean decode ≤ ×1.5 its memory bound" in t for t in targets)
    assert any("within ×3 of the predicted ridge" in t for t in targets)
    assert doc["gpu_check"]["targets"] == [{"target": r.target, "measured": r.measured, "holds": r.holds} for r in rows]
    assert all(r.holds is None for r in rows if r.target.startswith("≥ 7 B"))  # no 8 B rung: not measured
    assert set(doc["gpu_check"]) == set(json.loads((ASSETS / "ladder_gpu.json").read_text())["gpu_check"])  # its keys


def test_gpu_checks_far_prefill_target_says_every_pass_past_four_ridges_and_holds_on_the_nearest():
    """The H200 recording's rung with its prefills past 4× the ridge planted: one pass at ×1.37 its compute bound
    does not hold the target; a second at twice the rows and ×1.28 makes it hold (it asks for one such pass), and
    both are said."""
    import dataclasses

    from benchmarks import gpu_check

    lad = Ladder.from_dict(json.loads((ASSETS / "ladder_gpu.json").read_text(encoding="utf-8")))
    big = lad.rungs[-1]
    far = [p for p in big.curve.of("prefill") if p.rows >= 4 * lad.roof.ridge_tokens]
    assert far, "the recording reaches past four ridges"
    near = [p for p in big.curve.points if p not in far]

    def ran(point, ratio, rows=None):
        rows = rows or point.rows
        scale = rows / point.rows
        return dataclasses.replace(point, rows=rows, flops=scale * point.flops, compute_ms=scale * point.compute_ms,
                                   samples_ms=tuple(ratio * scale * point.compute_ms for _ in point.samples_ms))

    def prefill_target(points):
        grown = dataclasses.replace(big, curve=dataclasses.replace(big.curve, points=tuple(points)))
        rows = gpu_check.targets(dataclasses.replace(lad, rungs=(*lad.rungs[:-1], grown)), 100.0, None, None, None,
                                 150.0)
        return next(t for t in rows if "prefill pass of n ≥ 4×" in t.target)

    first = far[0].rows
    before = prefill_target([*near, ran(far[0], 1.37)])
    assert before.holds is False and re.findall(r"n = (\d+): ×([\d.]+)", before.measured) == [(str(first), "1.37")]
    after = prefill_target([*near, ran(far[0], 1.37), ran(far[0], 1.28, rows=2 * first)])
    assert re.findall(r"n = (\d+): ×([\d.]+)", after.measured) == [(str(first), "1.37"), (str(2 * first), "1.28")]
    assert after.holds is True
