"""KV-cache calculator and roofline: hand-computed sizes, the live model, and where steps land."""

from __future__ import annotations

import json
import re

import pytest
import torch

from commands.main import main as cli_main
from engine import Stepper, timing
from engine.timing import now
from physics import kvcalc, roofline
from ui.apptest import app_test, page


def test_gpt2_mha_matches_hand_computation():
    # 12 layers x 12 heads x 64 dims x 2 (K,V) x 2 bytes = 36,864 bytes per token
    a = kvcalc.from_table("gpt2")
    assert a.attention == "MHA"
    assert a.kv_bytes_per_token(2) == 36_864
    assert a.kv_bytes(1024, 1, 2) == 37_748_736


def test_llama3_8b_gqa_matches_hand_computation_and_saves_4x():
    # 32 layers x 8 KV heads x 128 dims x 2 x 2 bytes = 131,072 bytes per token: 1 GiB at 8,192 tokens
    a = kvcalc.from_table("Llama-3-8B")
    assert (a.attention, a.kv_heads) == ("GQA", 8)
    assert a.kv_bytes(8192, 1, 2) == 2**30
    assert a.as_mha().kv_bytes(8192, 1, 2) == 4 * 2**30


def test_falcon_7b_mqa_matches_hand_computation():
    # 32 layers x 1 KV head x 64 dims x 2 x 2 bytes = 8,192 bytes per token
    a = kvcalc.from_table("falcon-7b")
    assert a.attention == "MQA"
    assert a.kv_bytes(2048, 4, 2) == 8192 * 2048 * 4


def test_deepseek_v3_uses_the_mla_latent():
    a = kvcalc.from_table("DeepSeek-V3")
    assert a.attention == "MLA" and a.kv_bytes_per_token(2) == 61 * 576 * 2


def test_live_model_figure_equals_measured_kv_bytes(tiny_lm):
    s = Stepper(tiny_lm, "Once upon a time", max_new_tokens=30, stop_on_eos=False)
    arch = kvcalc.from_live(tiny_lm)
    elem = torch.finfo(tiny_lm.dtype).bits // 8
    s.prefill()
    checked = 0
    for _ in range(3):
        t = s.records[-1]
        assert arch.kv_bytes(t.kv_len, 1, elem) == t.kv_bytes
        checked += 1
        s.run(5)
    assert checked == 3


def test_cli_kv_size_json():
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["kv-size", "--model", "Llama-3-8B", "--tokens", "8192", "--json"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["bytes"] == 2**30 and doc["bytes_per_token"] == 131_072
    assert (doc["layers"], doc["kv_heads"], doc["head_dim"]) == (32, 8, 128)


def test_prefill_of_128_tokens_sits_right_of_a_decode_step(bundled_lm):
    prompt = " ".join(["the cat sat on the mat."] * 40)
    ids = bundled_lm.tokenizer(prompt)["input_ids"][:128]
    s = Stepper(bundled_lm, bundled_lm.tokenizer.decode(ids, skip_special_tokens=True), max_new_tokens=3)
    s.run()
    pts = roofline.place(s.records)
    pre = next(p for p in pts if p.kind == "prefill")
    dec = [p for p in pts if p.kind == "decode (cache)"]
    assert s.prompt_len >= 120
    assert all(pre.intensity > 10 * d.intensity for d in dec)


def test_device_probe_counts_the_work_it_times(monkeypatch):
    """With a clock that moves 2 ms per reading, every timed run takes exactly 2 ms: the probe must then report a
    1024² matmul's 2·1024³ FLOPs and each buffer's bytes over 2 ms, no more and no less."""
    ticks = iter(range(10**9))
    for module in (roofline, timing):  # the probe's deadline, and the clock its timed spans read
        monkeypatch.setattr(module, "now", lambda device=None: next(ticks) * 0.002)
    monkeypatch.setitem(roofline.COPY_MIB, "cpu", (1, 2))
    roof = roofline.probe(torch.device("cpu"), budget_s=0.1)
    assert roof.peak_flops == pytest.approx(2 * 1024**3 / 0.002) and roof.measured
    assert [b for b, _ in roof.bandwidths] == [2**20, 2 * 2**20]  # every size, smallest first
    assert [r for _, r in roof.bandwidths] == pytest.approx([2**20 / 0.002, 2 * 2**20 / 0.002])
    assert roof.bandwidth == max(r for _, r in roof.bandwidths) and roof.dram_bandwidth == roof.bandwidths[-1][1]
    assert roof.ridge == roof.peak_flops / roof.dram_bandwidth  # THE ridge: DRAM's, whatever a cache reads
    assert roof.threads == (torch.get_num_threads(),)  # what the Scale page says it ran on, once serving changed it


@pytest.mark.perf
def test_device_probe_reads_this_machines_matmul_rate(monkeypatch):
    """The probe's peak against a matmul timed here, apart from it (best of several): the same within ×3."""

    monkeypatch.setitem(roofline.COPY_MIB, "cpu", (16,))  # the bandwidth's sizes are the test above's: one is enough

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = 0.0
    for _ in range(8):
        t0 = now()
        a @ b
        best = max(best, 2 * 1024**3 / (now() - t0))
    roof = roofline.probe(torch.device("cpu"), budget_s=0.3)
    assert best / 3 < roof.peak_flops < 3 * best, (roof.peak_flops, best)
    assert roof.bandwidth > 1e8


def test_the_memory_roof_is_the_fastest_of_a_read_a_copy_and_a_matrix_vector_product_at_every_size(monkeypatch):
    """A copy writes as much as it reads and reads low, and an eager matrix-vector kernel streams at half the read
    rate: a decode step, which reads its weights once, then beat its own 'bound'. The probe keeps the fastest of a
    plain read, a copy and a matrix-vector product at each size."""
    calls = []
    rates = {0: 27e9, 1: 11e9, 2: 14e9}  # read, copy, matrix-vector, in the probe's order at each size

    def fake_rate(fn, work, device, **how):
        calls.append(fn)
        return 1e11 if len(calls) == 1 else rates[(len(calls) - 2) % 3]

    monkeypatch.setattr(roofline, "best_rate", fake_rate)
    monkeypatch.setitem(roofline.COPY_MIB, "cpu", (1, 2, 4))  # the rates are given: small buffers, not up to 1 GiB
    roof = roofline.probe(torch.device("cpu"), budget_s=0.1)
    assert len(calls) == 1 + 3 * len(roofline.COPY_MIB["cpu"])
    assert [r for _, r in roof.bandwidths] == [27e9] * len(roofline.COPY_MIB["cpu"])


def test_a_steps_memory_bound_uses_the_bandwidth_its_own_bytes_get():
    """A 16 MB model read from cache is bounded by the cache's rate, a 450 MB one by DRAM's (a hierarchy)."""
    mib = 2**20
    roof = roofline.DeviceRoof("test", peak_flops=1e12, bandwidth=50e9, measured=True,
                               bandwidths=((16 * mib, 50e9), (64 * mib, 50e9), (256 * mib, 25e9), (1024 * mib, 20e9)))
    assert roof.bandwidth_for(8 * mib) == 50e9 and roof.bandwidth_for(4096 * mib) == 20e9
    assert 20e9 < roof.bandwidth_for(450 * mib) < 25e9  # between its neighbours
    small = roofline.verdict(1.0, 1e6, 16 * mib, roof)
    big = roofline.verdict(40.0, 1e6, 512 * mib, roof)
    assert small.memory_ms == pytest.approx(16 * mib / 50e9 * 1e3)
    assert big.memory_ms > 512 * mib / 25e9 * 1e3 and big.kind == "memory-bound"
    # the small one's bound is the cache's roof, and its label says so; the big one's is DRAM's (MBU)
    assert small.in_cache and "the on-chip cache's measured bandwidth" in small.label  # the processor's, not the KV cache
    assert not big.in_cache and "(MBU)" in big.label
    # the same step against the cache's rate would have been called overhead-bound: the hierarchy matters
    flat = roofline.DeviceRoof("flat", peak_flops=1e12, bandwidth=50e9, measured=True)
    assert roofline.verdict(40.0, 1e6, 512 * mib, flat).kind == "overhead-bound"
    # one ridge: the peak over DRAM's rate, never the cache's
    assert roof.ridge == pytest.approx(1e12 / 20e9) and roof.ridge_tokens == pytest.approx(1e12 / 20e9 * 4 / 2)
    # the best of two probes, size by size
    low = roofline.DeviceRoof("test", 2e12, 40e9, True, ((16 * mib, 40e9), (1024 * mib, 22e9)))
    best = roofline.DeviceRoof("test", 1e12, 50e9, True, ((16 * mib, 50e9), (1024 * mib, 20e9))).best(low)
    assert best.peak_flops == 2e12 and best.bandwidths == ((16 * mib, 50e9), (1024 * mib, 22e9))


def formula_value(text: str) -> tuple[float, float]:
    """The calculator's formula done again from its text: each term's factors multiplied (a sliding term's kept count
    already has the window's − 1 in it), the terms summed, times the batch; and the total it states."""
    import re

    left, right = text.split(" = ")
    left, batch = left.rsplit(" × batch ", 1)
    number = re.compile(r"\d[\d,]*(?:\.\d+)?")
    total = 0.0
    for term in left.split(" + "):
        product = 1.0
        for factor in re.sub(r"\(window [\d,]+ − 1\)", "", term).split(" × "):
            (n,) = number.findall(factor)
            product *= float(n.replace(",", ""))
        total += product
    stated = float(number.match(right).group().replace(",", ""))
    return total * int(batch), stated


@pytest.mark.parametrize("name", kvcalc.model_names())
def test_the_formula_shown_adds_up_to_the_calculators_bytes(name):
    a = kvcalc.from_table(name)
    for tokens, batch, elem in ((8192, 1, 2.0), (300, 7, 0.5), (100_000, 2, 4.0)):
        done, stated = formula_value(kvcalc.formula(a, tokens, batch, elem))
        assert done == stated == a.kv_bytes(tokens, batch, elem), (name, tokens, batch, elem)


def test_does_it_fit_with_the_weights_resident():
    """Llama-3-8B (8,030,261,248 parameters, counted from its config's shapes: 8.0 B nominal) on an 80 GB card in
    fp16: 63.94 GB left for the cache, 2³⁰ bytes a sequence of 8,192 tokens (131,072 a token), and the model reads
    at most 8,192 positions."""
    llama = kvcalc.from_table("Llama-3-8B")
    fit = kvcalc.largest_fit(llama, 80e9, 2, 2, 8192)
    assert fit == kvcalc.Fit(free_for_kv=80e9 - 2 * 8_030_261_248, max_batch=59, max_tokens_batch1=487_819,
                             context_limit=8192)
    # a sliding model stops growing past its window: gemma-3-270m keeps 15 x 511 positions of 1,024 bytes and grows
    # by its 3 full layers' 3,072 bytes a token
    gemma = kvcalc.from_table("gemma-3-270m")
    free = 1e9 - kvcalc.counted_parameters(gemma) * 2
    fit = kvcalc.largest_fit(gemma, 1e9, 2, 2, 8192)
    assert fit.max_tokens_batch1 == (free - 15 * 1024 * 511) // 3072 and fit.max_batch == free // 33_014_784
    assert kvcalc.largest_fit(kvcalc.from_table("Llama-3.1-405B"), 80e9, 2, 2, 8192).free_for_kv < 0
    assert kvcalc.largest_fit(kvcalc.from_table("Llama-3.1-405B"), 80e9, 2, 2, 8192).max_batch == 0


@pytest.mark.slow
def test_the_scale_page_shows_each_models_formula_and_whether_it_fits():
    """The formula on the page, done again, against the bytes each model's published shape gives by hand."""
    at = app_test().run()
    at.switch_page(page("scale")).run()
    assert not at.exception, [e.value for e in at.exception]
    by_hand = {  # 8,192 tokens, batch 1, fp16 (the page's defaults)
        "live model (sidebar)": 2 * 4 * 2 * 32 * 2 * 8192,  # tinystories-llama: 4 layers, 2 KV heads, head_dim 32
        "gpt2": 36_864 * 8192, "falcon-7b": 8192 * 8192, "DeepSeek-V3": 61 * 576 * 2 * 8192,
        "gemma-3-270m": 33_014_784, "Llama-3-8B": 2**30,
    }
    for name, expected in by_hand.items():
        at.selectbox(key="scale_model").set_value(name).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        (shown,) = [c.value for c in at.code]
        assert formula_value(shown) == (expected, expected), (name, shown)
    fits = next(m.value for m in at.markdown if "Largest batch" in m.value)  # Llama-3-8B on an H100 (80 GB), fp16
    assert "Largest batch at 8,192 tokens: **59**" in fits and "longest context at batch 1: **487,819 tokens**" in fits
    assert "reads at most **8,192**" in fits
    assert "of 80 GB (74.5 GiB, in the same binary units)" in fits  # 80e9 / 2**30: beside the GiB it is compared with
    at.selectbox(key="scale_model").set_value("Llama-3.1-405B").run()
    assert any("do not fit in 80 GB (74.5 GiB)" in e.value for e in at.error)


def test_gemma_3_270m_at_8192_tokens_counts_its_sliding_layers():
    """15 sliding layers (window 512) keep 511 positions each; the 3 full ones keep all 8,192 (fp16, MQA, head_dim 256)."""
    a = kvcalc.from_table("gemma-3-270m")
    assert (a.layers, a.kv_heads, a.head_dim, a.sliding_layers) == (18, 1, 256, 15)
    assert [i for i in range(18) if a.window(i) is None] == [5, 11, 17]  # every sixth layer is global
    per_position = 2 * 1 * 256 * 2  # K and V, one KV head, head_dim 256, 2 bytes
    expected = 15 * per_position * 511 + 3 * per_position * 8192
    assert expected == 33_014_784
    assert a.kv_bytes(8192, 1, 2) == expected
    assert a.kv_bytes(8192, 1, 2) < a.kv_bytes_per_token(2) * 8192 / 4  # far below "every layer keeps everything"


def test_cli_kv_size_reports_per_layer_bytes_for_a_sliding_model():
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["kv-size", "--model", "gemma-3-270m", "--tokens", "8192", "--json"]) == 0
    doc = json.loads(buf.getvalue())
    assert doc["bytes"] == 33_014_784 and sum(doc["bytes_per_layer"]) == doc["bytes"]
    assert doc["windows"].count(512) == 15


def test_a_decode_steps_time_is_taken_apart_without_changing_the_run(bundled_lm):
    from engine.forward.estimates import step_bytes
    from topics.ladder.profile import decode_breakdown

    s = Stepper(bundled_lm, "Once upon a time", max_new_tokens=20)
    s.run(6)
    held = s.cache.get_seq_length()
    b = decode_breakdown(s, bandwidth=20e9, repeats=2)
    assert s.cache.get_seq_length() == held  # every pass it made was rolled back
    assert 0 < b.matmul_ms and b.ops > 10 * bundled_lm.spec.layers  # a step is many small ops, not one matmul
    # the bound is the next step's bytes (every weight + the cache read + one new K/V row) over the bandwidth given
    moved = step_bytes(bundled_lm.spec, 1, held, bundled_lm.elem_bytes)
    assert b.memory_bound_ms == pytest.approx(moved / 20e9 * 1e3)
    assert moved > bundled_lm.spec.parameters * bundled_lm.elem_bytes
    nxt = s.decode()  # the run continues exactly where it was
    assert nxt.kv_len == held + 1


def test_the_time_split_never_shows_a_lower_bound_beaten_without_saying_so():
    """A matmul faster than its own memory bound contradicts the bound: the sentence says why, not 'x % of the step'."""
    from dataclasses import replace

    from topics.ladder.profile import Breakdown, breakdown_note

    b = Breakdown(wall_ms=10.0, matmul_ms=2.8, rest_ms=7.2, ops=400, memory_bound_ms=5.6, runs=5, device="cpu",
                  bandwidth=1e10)
    note = breakdown_note(b)
    assert "beat the memory bound" in note and "read low" in note and "72%" in note
    fine = breakdown_note(replace(b, memory_bound_ms=1.0))
    assert "beat" not in fine and "10% of the step" in fine
    # a new bandwidth probe moves the bound only (bytes / bandwidth), and says which bandwidth it was made with
    assert b.at_bandwidth(2e10).memory_bound_ms == pytest.approx(2.8) and b.at_bandwidth(2e10).bandwidth == 2e10
    # which step it is and where it was timed, said: two splits of two steps on one page read as one step's before
    assert breakdown_note(b, "your run's next step, measured now").startswith("On cpu, your run's next step, measured now:")


def test_the_roofline_names_its_ridge_where_the_ridge_is():
    """plotly's add_vline annotation takes x as log10 on a log axis: 'ridge 19.4' was drawn at 10^19.4 and the axis
    stretched until the roof filled a third of the chart. The words sit on the ridge's own line now."""
    import math

    from topics.ladder import scale_draw as scale_draw

    roof = roofline.DeviceRoof("test", peak_flops=3e11, bandwidth=2e10, measured=True)
    f = scale_draw.roofline_figure(roof, [roofline.RoofPoint(step=0, kind="prefill", intensity=30.0, achieved=1e11,
                                                             ms=1.0, bytes_estimate=1e6)])
    ridge = next(a for a in f.layout.annotations if a.text.startswith("ridge"))
    assert ridge.x == pytest.approx(math.log10(roof.ridge)) and f.layout.shapes[0].x0 == roof.ridge


# ---------------------------------------------------------------- a datacenter roof: predictions, never verdicts


def test_a_datacenter_roof_predicts_the_same_passes_in_its_own_dtype_and_judges_none(bundled_lm):
    """The bundled prefill and decode steps on an H100's datasheet: placed at their bf16 intensity (twice the fp32 one
    the CPU trace reports), on the roof itself, labelled predicted; the table of predictions has no measured time
    and no verdict, and the prefill's sentence judges the measured time against this device's bounds only."""
    from topics.ladder import scale_draw as scale_draw

    run = Stepper(bundled_lm, "Once upon a time, there was a little girl named Lily. She", max_new_tokens=3)
    run.run()
    h100 = roofline.h100()
    pts = roofline.predicted_points(run.records, bundled_lm.spec, h100)
    for t, p in zip(run.records, pts):
        assert p.intensity == pytest.approx(2 * t.intensity_estimate)  # bf16: 2 bytes an element, not 4
        assert p.achieved <= h100.peak_flops * (1 + 1e-9)
        assert p.achieved == pytest.approx(min(h100.peak_flops, p.intensity * h100.bandwidth), rel=1e-9)
    fig = scale_draw.roofline_figure(h100, pts, predicted=True)
    assert {t.name for t in fig.data if t.mode == "markers"} == {"prefill (predicted)", "decode (cache) (predicted)"}
    assert fig.layout.title.text.startswith("Predicted: NVIDIA H100 SXM, bf16")
    from topics.ladder.tables import prediction_frame

    frame = prediction_frame(run.records, bundled_lm.spec, h100)
    assert not any("measured" in c or "shows" in c for c in frame.columns)
    assert list(frame["FLOP/byte in bf16 (estimate)"]) == pytest.approx([round(2 * t.intensity_estimate, 1)
                                                                          for t in run.records], abs=0.051)
    here = roofline.DeviceRoof("cpu (measured here, float32 matmul)", 1e11, 2e10, True)
    pre = run.records[0]
    said = scale_draw.prefill_sentence(pre, bundled_lm.spec, here, h100)
    v, p = roofline.step_verdict(pre, here), roofline.predict_step(pre, bundled_lm.spec, h100)
    def written(ms: float) -> str:  # a time to three figures, in µs below a millisecond (never "0.00246 ms")
        return f"{ms:.3g} ms" if ms >= 1 else f"{ms * 1000:.3g} µs"

    assert f"{written(pre.forward_ms)} against bounds of {written(v.memory_ms)} (memory)" in said
    assert f": {v.label}. On an NVIDIA H100 SXM nothing ran" in said
    assert p.predicted_ms < 1 and f"{p.predicted_ms * 1000:.3g} µs (the larger of" in said  # a tiny model on an H100
    assert f"predicted on {p.side} ({p.intensity:,.0f} vs 295 FLOP/byte in bf16), {written(p.predicted_ms)}" in said
    assert not re.search(r"\b0\.0+\d* ms", said), said


@pytest.mark.slow
def test_choosing_an_h100_roof_on_the_scale_page_adds_predictions_and_leaves_the_verdicts_this_devices():
    at = app_test().run()
    at.switch_page(page("scale")).run()
    shows = next(d.value for d in at.dataframe if "what the measurement shows" in d.value.columns)
    at.selectbox(key="scale_roof").set_value("NVIDIA H100 SXM (predicted beside it)").run()
    assert not at.exception, [e.value for e in at.exception]
    after = next(d.value for d in at.dataframe if "what the measurement shows" in d.value.columns)
    assert list(after["what the measurement shows"]) == list(shows["what the measurement shows"])  # judged here only
    predicted = next(d.value for d in at.dataframe if "predicted ms" in d.value.columns)
    assert len(predicted) == len(after) and set(predicted["predicted"]) <= {"memory side", "compute side"}
    charts = [c for c in at.get("plotly_chart")]
    assert len([c for c in charts if "Predicted: NVIDIA H100 SXM, bf16" in str(c.proto.spec)]) == 1
    said = next(m.value for m in at.markdown if m.value.startswith("The prefill of")).replace("\\", "")  # plain()'s escapes
    assert "nothing ran: the same pass is predicted on" in said and "above both bounds" not in said.split("On an")[1]


def test_a_step_that_fits_the_cache_is_never_put_on_a_side_its_own_bounds_contradict():
    """Lesson 2 said a 15.5 MiB prefill was on "the memory side" of the 8.0 FLOP/byte ridge, beside bounds of 0.602 ms
    (memory, at the cache's rate) and 0.738 ms (compute): the larger bound said compute. THE ridge stays the one
    figure (DRAM's); where the bytes fit the cache and its faster roof puts them on the other side, the words say
    that too, and which side that is agrees with the larger of the two bounds."""
    mib = 2**20
    roof = roofline.DeviceRoof("test", peak_flops=1e11, bandwidth=17e9, measured=True,
                               bandwidths=((16 * mib, 17e9), (64 * mib, 17e9), (1024 * mib, 12.5e9)))
    assert roof.ridge == pytest.approx(8.0)
    for mib_moved, flops in ((15.5, 7.2), (15.5, 4.0), (15.5, 9.0), (900, 7.2)):  # MiB, FLOP per byte
        moved = mib_moved * mib
        v = roofline.verdict(1.0, flops * moved, moved, roof)
        said = roofline.side(flops, roof) + roofline.cache_side(flops, moved, roof)
        last = "compute" if said.rsplit("the ", 1)[1].startswith("compute side") else "memory"
        assert last == v.bound, (mib_moved, flops, said, v)  # the side said last is the larger bound's
        assert ("fit the cache" in said) == (mib_moved < 64 and 100 / 17 <= flops < 8.0)
    said = roofline.cache_side(7.2, 15.5 * mib, roof, mark=lambda s: f"**{s}**")
    assert said == ("; but the 15.5 MiB it moves fit the cache, whose faster roof meets the matmul peak at 5.9 "
                    "FLOP/byte: against that ridge it is on **the compute side**")


def test_times_are_written_in_the_unit_a_reader_reads_them_in():
    """A measurement's 190 s was '1.9e+05 ms' through human_ms; a slow prefill's 1,234 ms '1.23e+03 ms'."""
    from physics.units import human_ms

    assert [human_ms(ms) for ms in (0.00246, 12.1, 1234, 59_999, 190_000, 540_000, 3_600_000)] == [
        "2.46 µs", "12.1 ms", "1.23 s", "60 s", "3.2 min", "9 min", "60 min"]


def test_a_recorded_ladders_ratios_carry_the_digits_a_timing_earns():
    """The H200's cache saving read '×2304.55' in its table: six digits from timings good to two or three."""
    from topics.ladder import draw
    from topics.ladder.store import recorded_ladders

    for ladder in recorded_ladders():
        cells = " ".join(str(v) for v in ladder.paths_frame().to_numpy().ravel())
        said = cells + " " + (draw.lean_sentence(ladder) or "")
        figures = re.findall(r"×([\d.]+\d)", said)
        assert figures and all(len(f.replace(".", "")) <= 4 for f in figures), (ladder.device, figures)


def test_the_kv_growth_chart_stops_each_model_at_the_context_it_reads():
    """Llama-2-7b's line ran on to 8,192 tokens: its published config reads at most 4,096 (max_position_embeddings).
    Its line now ends there, the limit named at its end; Llama-3-8B (8,192) runs the whole axis."""
    from topics.ladder.scale_draw import kv_growth_figure

    fig = kv_growth_figure([kvcalc.from_table("Llama-2-7b"), kvcalc.from_table("Llama-3-8B")], 8192, 1, 2)
    old, new = fig.data
    assert max(old.x) == 4096 and "4,096" in old.text[-1] and not any(old.text[:-1])
    assert max(new.x) == 8192 and not any(new.text)
