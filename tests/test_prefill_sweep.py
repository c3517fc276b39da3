"""Prefill across the ridge: each s timed, labelled by the roofline rule, capped by positions and a time budget;
the crossing predicted from the intensities; a sweep reads back from its JSON. And gpu-check's targets: each
beside its figure, none claimed without one, and a refusal in one line where there is no GPU.

Structure and labels only: no assert reads a timing.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from topics.ladder import sweep as ps
from engine.measure.roofline import DeviceRoof, verdict

ROOF = DeviceRoof("test roof", peak_flops=1e11, bandwidth=1e10, measured=True)  # ridge 10 FLOP/byte


@pytest.fixture(scope="module")
def swept(bundled_lm):
    return ps.prefill_sweep(bundled_lm, lengths=(8, 16, 32, 1024), repeats=2, roof=ROOF, compile=False)


def test_each_length_is_timed_and_labelled_by_the_roofline_rule(swept, bundled_lm):
    assert [p.s for p in swept.points] == [8, 16, 32]
    assert swept.left_out == ("1024: past the model's 512 positions",)
    for p in swept.points:
        v = verdict(p.median_ms, p.flops, p.bytes_moved, ROOF)
        assert (p.kind, p.label, p.ratio) == (v["kind"], v["label"], v["ratio"])
        assert p.per_token_ms == pytest.approx(p.median_ms / p.s) and p.runs == 2 and p.low_ms <= p.high_ms
        assert p.intensity == pytest.approx(p.flops / p.bytes_moved)
    assert [p.intensity for p in swept.points] == sorted(p.intensity for p in swept.points)  # grows with s
    assert swept.dtype == "float32" and swept.how == "every position at once, SDPA, not compiled"
    assert swept.rung == bundled_lm.spec.name and swept.compile_ms is not None


def test_the_crossing_is_where_the_intensity_meets_the_ridge(swept):
    ridge = swept.ridge
    a, b = swept.points[0], swept.points[-1]
    if a.intensity < ridge <= b.intensity:
        assert a.s < swept.crossing_s <= b.s
    pts = [replace(p, kind=k) for p, k in zip(swept.points, ("memory-bound", "memory-bound", "compute-bound"))]
    assert replace(swept, points=tuple(pts)).measured_crossing_s == 32
    low = DeviceRoof("high ridge", peak_flops=1e15, bandwidth=1e10, measured=True)
    assert swept.on(low).crossing_s is None and all(p.side == "the memory side" for p in swept.on(low).points)


def test_a_sweep_reads_back_from_its_json_and_shows_a_table(swept):
    d = json.loads(json.dumps(swept.to_dict(), default=str))
    assert set(ps.SWEEP_KEYS) <= set(d) and all(set(p) == set(ps.POINT_KEYS) for p in d["points"])
    assert ps.PrefillSweep.from_dict(d) == swept
    table = swept.frame()
    assert len(table) == 3 and list(table["measured"]) == [p.label for p in swept.points]


def test_a_time_budget_leaves_the_longest_lengths_out_and_says_so(bundled_lm):
    sweep = ps.prefill_sweep(bundled_lm, lengths=(8, 16, 32), repeats=1, roof=ROOF, compile=False, budget_s=0.0)
    assert [p.s for p in sweep.points] == [8]
    assert sweep.left_out == ("16: past the 0 s time budget", "32: past the 0 s time budget")


def test_sweep_at_builds_a_rung_checked_first_and_names_it(bundled_lm):
    sweep = ps.sweep_at(bundled_lm, "1M", lengths=(8, 16), repeats=1, roof=ROOF, compile=False)
    assert sweep.rung.endswith("M") and "random weights" in sweep.weights and len(sweep.points) == 2


# ---------------------------------------------------------------- gpu-check's targets


def test_gpu_check_without_a_gpu_is_one_line_and_exit_status_2(capsys, monkeypatch):
    import torch

    from commands.main import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU machine runs it as a laptop would
    code = main(["gpu-check"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: gpu-check needs a CUDA GPU") and err.count("\n") == 1


def test_every_target_is_printed_beside_its_figure_and_none_is_claimed_without_one(measured_ladder, swept):
    from benchmarks.gpu_check import table, targets

    rows = targets(measured_ladder, swept, ladder_s=300.0, race=None, rung_race=None, tests=None, total_s=None)
    by = {r["target"].split(":")[0]: r for r in rows}
    assert by["≥ 7 B real shape"]["holds"] is None and "not measured" in by["≥ 7 B real shape"]["measured"]
    assert by["~1 B real shape"]["holds"] is None  # the tiny ladder has no such rung: nothing is claimed
    ladder_row = next(r for r in rows if r["target"].startswith("the whole GPU ladder"))
    assert ladder_row["holds"] is False and ladder_row["measured"].startswith("300 s")
    text = table(rows)
    assert all(r["target"] in text for r in rows) and "NO" in text


@pytest.fixture(scope="module")
def measured_ladder(bundled_lm):
    from topics.ladder import measure as ladder

    with pytest.MonkeyPatch.context() as m:
        m.setattr(ladder, "PROBE_S", 0.05)  # the probe's length changes no structure
        return ladder.measure_ladder(bundled_lm, ["own"], tokens=16, repeats=1, lean=True)


@pytest.mark.slow  # the whole gpu-check flow on the CPU, at tiny sizes: ~20 s
def test_gpu_checks_document_is_a_ladder_a_page_reads_back_with_its_sweep(bundled_lm, monkeypatch, tmp_path):
    """A dry run of gpu-check's code on the CPU: its JSON is a ladder (shippable as assets/ladder_gpu.json) that
    carries the sweep, and a race at a rung runs on the lean path."""
    from benchmarks import gpu_check
    from topics.ladder import measure as ladder
    from topics.ladder.record import Ladder

    monkeypatch.setattr(ladder, "PROBE_S", 0.05)
    doc, rows = gpu_check.gpu_check(sizes=["own", "1M"], sweep_shape="1M", tests=False, races=False, device="cpu",
                                    sweep_lengths=(8, 16), log=lambda text: None)
    d = json.loads(json.dumps(doc, default=str))
    lad = Ladder.from_dict(d)
    assert [r.trained for r in lad.rungs] == [False, True] and all(r.lean and r.lean_prefill for r in lad.rungs)
    assert lad.versions["torch"] and d["gpu_check"]["versions"]["transformers"]
    sweep = ps.PrefillSweep.from_dict(d["gpu_check"]["sweep"])
    assert [p.s for p in sweep.points] == [8, 16] and sweep.roof == lad.roof  # placed on the ladder's final roof
    assert d["gpu_check"]["targets"] == rows and all({"target", "measured", "holds"} <= set(r) for r in rows)
    race = gpu_check.race_at_rung(bundled_lm, "1M", 8, log=lambda text: None)
    assert race["identical"] and race["how"]["cache"].startswith("static cache + SDPA")


def test_the_sweeps_figure_has_the_measured_line_both_bounds_and_the_ridge_and_says_whose_shape(swept):
    from topics.ladder.sweep_draw import sweep_caption, sweep_figure

    fig = sweep_figure(swept)
    lines = {t.name: t for t in fig.data}
    measured = lines["prefill, measured: per prompt token"]
    assert list(measured.x) == [8, 16, 32] and list(measured.y) == pytest.approx([p.per_token_ms for p in swept.points])
    assert list(lines["memory bound per token (estimate)"].y) == pytest.approx([p.memory_ms / p.s for p in swept.points])
    assert swept.weights in fig.layout.title.subtitle.text and swept.how in fig.layout.title.subtitle.text
    ridge = next((a.text for a in fig.layout.annotations if a.text.startswith("ridge")), None)
    assert (ridge is not None) == (swept.crossing_s is not None)
    words = sweep_caption(swept)
    assert swept.points[0].label in words and "past the model's 512 positions" in words


def test_a_sweep_timed_on_a_busy_server_says_so_under_its_picture(swept):
    from topics.ladder.sweep_draw import sweep_figure
    from engine.measure.caveats import BUSY, sweep_note

    steady = replace(swept, points=tuple(replace(p, low_ms=p.median_ms, high_ms=p.median_ms) for p in swept.points))
    assert sweep_note(steady) is None
    p0 = steady.points[1]
    busy = replace(steady, points=(steady.points[0], replace(p0, low_ms=1.0, high_ms=9.0), *steady.points[2:]))
    assert sweep_note(busy).startswith(f"{BUSY}: the prefill of {p0.s} tokens ranged 1.0–9.0 ms")
    assert any(a.text.startswith("⚠ " + BUSY) for a in sweep_figure(busy).layout.annotations)
