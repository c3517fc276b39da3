"""The size ladder: rungs of the model's own family, refusals before any weight, one shared build, a record with
every field labelled by the roofline's rule, figures with the traces they claim, the CLI's JSON, the lean path.

Structure, labels and refusals only: no assert reads a timing (the benchmarks print the figures: `python -m engine ladder`, `bench`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import threading
import time
import weakref

import pytest
import torch

from engine.errors import StepError, TooLarge
from engine.generate.stepper import Stepper
from engine.load.load import load_model
from physics import machine, roofline, rungs
from topics.ladder import draw as draw
from topics.ladder import measure as ladder
from topics.ladder import store as stores
from topics.ladder.record import LADDER_KEYS, PASS_KEYS, RUNG_KEYS, Ladder

TINY = ["own", "1M"]  # the bundled model itself and a ~1 M rung: seconds, not minutes
pytestmark = pytest.mark.xdist_group("ladder")  # one worker: `measured` (a ladder of its own) is measured once


def short_probe_on(mp) -> None:
    """The roofline probe shortened: its length and buffer sizes change no structure a test reads."""
    mp.setattr(ladder, "PROBE_S", 0.05)
    mp.setitem(roofline.COPY_MIB, "cpu", (16, 64))  # not up to 1 GiB, twice over


@pytest.fixture(autouse=True)
def short_probe(monkeypatch):
    short_probe_on(monkeypatch)


@pytest.fixture(scope="module")
def gpt2_lm():
    return load_model("tinystories-gpt2", device="cpu")


@pytest.fixture(scope="module")
def measured(bundled_lm):
    """One tiny ladder on the bundled model, with the lean path timed too, and every progress report."""
    seen = []
    with pytest.MonkeyPatch.context() as mp:  # a module's fixture is set up before the function's short_probe
        short_probe_on(mp)
        lad = ladder.measure_ladder(bundled_lm, TINY, tokens=16, repeats=2, lean=True, compile=False,
                                    on_progress=lambda f, t: seen.append((f, t)))
    return lad, seen


# ---------------------------------------------------------------- rungs


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_rungs_keep_the_family_and_its_ratios_and_hit_the_sizes_asked(which, bundled_lm, gpt2_lm):
    lm = bundled_lm if which == "llama" else gpt2_lm
    own = rungs.own_shape(lm.config)
    planned, left_out = rungs.plan(lm, ["2M", "25M", "110M"])
    assert left_out == [] and [r.parameters for r in planned] == sorted(r.parameters for r in planned)
    for rung, asked in zip(planned, (2e6, 25e6, 110e6)):
        c, s = rung.config, rung.shape
        assert type(c) is type(lm.config) and c.architectures == lm.config.architectures
        assert c.vocab_size == lm.config.vocab_size  # the model's tokenizer still fits
        assert s.head_dim == own.head_dim and s.heads * s.head_dim == s.d_model
        assert s.heads // s.kv_heads == own.heads // own.kv_heads  # the GQA ratio (1 for GPT-2's MHA)
        if own.d_ff is not None:
            assert s.d_ff / s.d_model == pytest.approx(own.d_ff / own.d_model)
        assert rung.parameters == pytest.approx(asked, rel=0.05)
        assert rung.parameters == rungs.estimate_parameters(c)  # exact, from a meta build
        assert not rung.own and rung.weights == rungs.RANDOM_WEIGHTS


def test_a_size_near_the_model_is_the_model_itself(bundled_lm):
    (rung,), _ = rungs.plan(bundled_lm, ["5M"])
    assert rung.own and rung.parameters == int(bundled_lm.spec.parameters)
    assert rung.weights == rungs.TRAINED_WEIGHTS and rung.config is None


def test_sizes_are_read_like_people_write_them_and_nonsense_is_refused():
    assert rungs.parse_size("25M") == 25_000_000 and rungs.parse_size("1.1B") == 1_100_000_000
    assert rungs.parse_size("500k") == 500_000 and rungs.parse_size("own") is None
    for bad in ("abc", "-5M", "10"):
        with pytest.raises(StepError) as e:
            rungs.parse_size(bad)
        assert "\n" not in str(e.value)


def test_a_rung_over_the_memory_limit_is_refused_in_one_message_before_anything_is_built(bundled_lm, monkeypatch):
    monkeypatch.setenv("DECODE_LAB_MEMORY_LIMIT", str(60 * 2**20))
    monkeypatch.setattr(ladder, "build", lambda *a, **k: pytest.fail("a rung was built before the refusal"))
    with pytest.raises(TooLarge) as e:
        ladder.measure_ladder(bundled_lm, ["own", "25M", "110M"], tokens=16, repeats=1)
    message = str(e.value)
    assert "\n" not in message and "25M" in message and "110M" in message and "Choose smaller sizes" in message


def test_default_sizes_that_do_not_fit_are_left_out_not_refused(bundled_lm, monkeypatch):
    monkeypatch.setenv("DECODE_LAB_MEMORY_LIMIT", str(300 * 2**20))  # 50M fp32 fits with headroom, 110M does not
    planned, left_out = rungs.plan(bundled_lm, None)
    assert [r.size for r in planned] == ["own", "25M", "50M"] and left_out == ["110M", "220M"]


def test_a_rung_for_the_race_is_its_own_loaded_model(bundled_lm):
    assert rungs.rung_model(bundled_lm, "own") is bundled_lm
    rlm = rungs.rung_model(bundled_lm, "1M")
    assert rlm.spec.source == rungs.RANDOM_WEIGHTS and rlm.tokenizer is bundled_lm.tokenizer
    assert rlm.lock is not bundled_lm.lock and rlm.spec.max_positions == bundled_lm.spec.max_positions
    run = Stepper(rlm, "Once upon a time", max_new_tokens=3, stop_on_eos=False, repeats=1)
    run.run()
    assert len(run.generated_ids) == 3


def test_a_rung_stores_its_weights_as_a_checkpoint_does(bundled_lm):
    """[out, in], each output's row contiguous: the layout the lean pass's one-row kernel streams, shared with the
    readable pass (engine/forward/streamed.py)."""
    rlm = rungs.rung_model(bundled_lm, "1M")
    linears = [m for m in rlm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.is_contiguous() for m in linears)


# ---------------------------------------------------------------- the record


@pytest.mark.slow
def test_the_ladder_has_every_field_and_its_labels_are_the_roofline_rule(measured, bundled_lm):
    lad, _ = measured
    d = json.loads(json.dumps(lad.to_dict(), default=str))
    assert set(d) == set(LADDER_KEYS)
    for r in d["rungs"]:
        assert set(RUNG_KEYS) <= set(r)
        for name in ("prefill", "decode", "nocache", "lean"):
            assert set(r[name]) == set(PASS_KEYS)
    assert [r.trained for r in lad.rungs] == [False, True]  # 1M (random) below the 4 M model itself
    # every rung on the threads the app would serve the largest rung with (the browser keeps a core)
    assert lad.weights_note == rungs.RANDOM_WEIGHTS and lad.threads == machine.serving_threads(lad.rungs[-1].parameters)
    for r in lad.rungs:
        assert r.weights == (rungs.TRAINED_WEIGHTS if r.trained else rungs.RANDOM_WEIGHTS)
        assert (r.prefill.q_len, r.decode.q_len, r.nocache.q_len) == (16, 1, 17)  # s, 1, s + 1
        assert (r.decode.past, r.nocache.past) == (16, 0)
        for m in (r.prefill, r.decode, r.nocache, r.lean, r.lean_prefill):
            share = r.matmul_ms / r.decode.median_ms if m is r.decode else None  # the step's matmuls, where timed
            v = roofline.verdict(m.median_ms, m.flops, m.bytes_moved, lad.roof, min(1.0, share) if share else None)
            assert (m.kind, m.label) == (v.kind, v.label)
            assert m.runs == 2 and m.low_ms <= m.median_ms <= m.high_ms and m.warmup_ms is not None
        assert r.lean.path == "gpt-fast's Llama, eager"  # asked not to compile: the same pass, eager
        assert r.lean_prefill.path == r.lean.path and r.lean_prefill.q_len == 16
        assert r.same_token
        assert 0 < r.prefill_matmul_ms  # the prefill's matmuls alone, s rows each, timed too
    assert Ladder.from_dict(d) == lad  # a recorded ladder reads back whole
    table = lad.frame()
    assert len(table) == 2 and list(table["weights"]) == ["random (timing only)", "trained"]


@pytest.mark.slow
def test_the_ladder_restores_the_thread_count_and_reports_progress_in_order(measured):
    lad, seen = measured
    fractions = [f for f, _ in seen]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert any(rungs.RANDOM_WEIGHTS in t for _, t in seen)
    before = torch.get_num_threads()
    with ladder.serving_cores(300e6) as n:  # a large model: all cores but one, at least one
        assert torch.get_num_threads() == n == max(1, (os.cpu_count() or 1) - 1)
    assert torch.get_num_threads() == before


@pytest.mark.slow
def test_a_ladder_waits_for_the_models_lock_so_no_students_pass_runs_beside_it(bundled_lm):
    seen, out = [], []
    with bundled_lm.lock:  # a student's pass is running
        worker = threading.Thread(target=lambda: out.append(ladder.measure_ladder(
            bundled_lm, ["own"], tokens=16, repeats=1, on_progress=lambda f, t: seen.append(f))))
        worker.start()
        time.sleep(0.5)
        assert seen == [0.0] and not out  # waiting to probe: nothing measured yet
    worker.join(60)
    assert out and seen[-1] == 1.0


@pytest.mark.slow
def test_a_student_takes_a_step_while_the_ladder_builds_a_rung(bundled_lm, monkeypatch):
    """The ladder held the model for each rung's whole build, compile and timing (a minute at 112M on a CPU): a
    student's step in that minute waited 30 s and failed. It takes the model's turn only to time."""
    building, go_on, out = threading.Event(), threading.Event(), []
    real = ladder.build

    def build(rung, lm, seed=0, dtype=None):
        building.set()
        assert go_on.wait(60)
        return real(rung, lm, seed, dtype)

    monkeypatch.setattr(ladder, "build", build)
    worker = threading.Thread(target=lambda: out.append(ladder.measure_ladder(bundled_lm, ["1M"], tokens=16,
                                                                              repeats=1)))
    worker.start()
    assert building.wait(60)
    with bundled_lm.turn():  # waits 30 s and raises Busy were the ladder holding the model while it builds
        go_on.set()
    worker.join(120)
    assert out and out[0].rungs


@pytest.mark.slow
def test_a_rungs_weights_are_given_back_after_it_is_measured(bundled_lm, monkeypatch):
    refs = []

    def build(rung, lm, seed=0, dtype=None):
        rlm = rungs.build(rung, lm, seed, dtype)
        if not rung.own:
            refs.append(weakref.ref(rlm.model))
        return rlm

    monkeypatch.setattr(ladder, "build", build)
    ladder.measure_ladder(bundled_lm, ["1M", "2M"], tokens=16, repeats=1)
    gc.collect()
    assert len(refs) == 2 and all(r() is None for r in refs)


# ---------------------------------------------------------------- measured once, shared


def test_two_callers_asking_at_once_share_one_build():
    store, calls = stores.LadderStore(), []

    def measure(progress):
        calls.append(1)
        progress(0.5, "half way")
        time.sleep(0.4)
        return object()

    got, waits = [], []
    threads = [threading.Thread(target=lambda: got.append(store.get("k", measure, on_progress=lambda f, t: waits.append(t))))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 == store.builds and got[0] is got[1] and "half way" in waits
    assert store.get("k", measure) is got[0] and len(calls) == 1  # kept: the next caller measures nothing
    assert store.get("k", measure, again=True) is not got[0] and len(calls) == 2  # "measure again"


def test_a_failed_build_is_not_kept():
    store = stores.LadderStore()
    with pytest.raises(TooLarge):
        store.get("k", lambda progress: (_ for _ in ()).throw(TooLarge("no room")))
    assert store.kept("k") is None and store.get("k", lambda progress: "ok") == "ok"


def test_the_real_ladder_is_measured_once_for_two_threads(bundled_lm):
    store, got = stores.LadderStore(), []
    threads = [threading.Thread(target=lambda: got.append(stores.ladder(bundled_lm, ["own"], tokens=16, repeats=1,
                                                                        store=store))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert store.builds == 1 and len(got) == 2 and got[0] is got[1]
    assert stores.kept_ladder(bundled_lm, ["own"], tokens=16, repeats=1, store=store) is got[0]


# ---------------------------------------------------------------- figures and captions


@pytest.mark.slow
def test_the_figures_have_one_point_per_rung_for_each_pass_they_name(measured):
    lad, _ = measured
    n = len(lad.rungs)
    per = draw.per_token_figure(lad)
    lines = {t.name: t for t in per.data if t.name}
    assert set(lines) == {"decode, readable: per new token", "prefill (16 tokens), readable: per prompt token",
                          "decode, lean pass (compiled)"}  # each line names the path that ran it
    assert all(len(t.x) == n for t in lines.values())
    assert lines["decode, readable: per new token"].y[-1] == pytest.approx(lad.rungs[-1].decode.per_token_ms)
    assert draw.gap_words(lad.rungs[-1]) in [a.text for a in per.layout.annotations]
    roof = draw.roofline_figure(lad)
    placed = {t.name: t for t in roof.data if t.name in ("prefill, readable", "decode (cache), readable",
                                                         "decode (no cache), readable")}
    assert len(placed) == 3 and all(len(t.x) == n for t in placed.values())
    assert list(placed["decode (cache), readable"].x) == pytest.approx([r.decode.intensity for r in lad.rungs])
    split = draw.split_figure(lad)
    assert [len(t.x) for t in split.data] == [n, n]
    assert [a + b for a, b in zip(split.data[0].y, split.data[1].y)] == pytest.approx([100] * n)
    for fig in (per, roof, split):
        assert rungs.RANDOM_WEIGHTS in fig.layout.title.subtitle.text
    for axis in (per.layout.xaxis, per.layout.yaxis, roof.layout.xaxis, roof.layout.yaxis):
        assert axis.tickmode == "array" and len(axis.tickvals) == len(axis.ticktext)  # plain labels, no minor ones


def per_token(m) -> float:
    """A pass's measured median over the tokens it is charged for (a prefill's s prompt tokens, a decode step's 1)."""
    return m.median_ms / m.tokens


def gap_from_times(r) -> float:
    """Decode against prefill per token, recomputed from the record's measured times, never read off its property."""
    return per_token(r.decode) / per_token(r.prefill)


def shown_ms(text: str, ms: float) -> bool:
    """A time printed to three figures at most ('792', '23.3', '3.66', '0.089') is this measured time."""
    return float(text) == pytest.approx(ms, rel=0.006, abs=0.0006)


def gap_said(caption: str) -> tuple[float, float, float, str]:
    """(decode ms per token, prefill ms per prompt token, the factor, 'dearer' or 'cheaper') as the caption says."""
    m = re.search(r"one decoded token costs ([\d.]+) ms, one prompt token of the \d+-token prefill ([\d.]+) ms: "
                  r"decode ×([\d.]+) (dearer|cheaper) per token", caption)
    assert m, caption
    return float(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4)


@pytest.mark.parametrize("which", [0, 1], ids=["cpu", "gpu"])
def test_captions_say_what_the_numbers_say_even_when_decode_is_cheaper(which):
    """Each recorded ladder's per-token caption, read back: the two times are the medians over their tokens, and the
    gap ('×18 dearer', or 'cheaper' when a prefill's token costs more) is their ratio, recomputed here from
    median_ms and tokens; so is the first rung's. Then the same ladder with its top prefill made four times a decode
    token per prompt token: the caption turns to 'cheaper', by that factor."""
    lad = stores.recorded_ladders()[which]
    top, first = lad.rungs[-1], lad.rungs[0]
    slow_prefill = dataclasses.replace(top.prefill, median_ms=per_token(top.decode) * top.prefill.tokens * 4)
    flipped = dataclasses.replace(lad, rungs=(*lad.rungs[:-1], dataclasses.replace(top, prefill=slow_prefill)))
    for shown in (lad, flipped):
        r = shown.rungs[-1]
        gap = gap_from_times(r)
        decode_ms, prefill_ms, factor, word = gap_said(draw.per_token_caption(shown))
        assert shown_ms(str(decode_ms), per_token(r.decode)) and shown_ms(str(prefill_ms), per_token(r.prefill))
        assert word == ("dearer" if gap >= 1 else "cheaper")
        assert factor == pytest.approx(gap if gap >= 1 else 1 / gap, rel=0.05, abs=0.05)  # as printed: ×18, ×4.0
        if first is not r:
            said = re.search(rf"At {re.escape(first.label)} the readable path's gap is ×([\d.]+)\.",
                             draw.per_token_caption(shown))
            assert said and float(said.group(1)) == round(gap_from_times(first), 1)
    assert gap_said(draw.per_token_caption(flipped))[2:] == (4.0, "cheaper")
    assert top.decode.label in draw.roofline_caption(lad) and top.prefill.label in draw.roofline_caption(lad)
    share = min(1.0, top.matmul_ms / top.decode.median_ms)  # the matmuls timed alone over the whole step
    assert f"{share:.0%} at {top.label}" in draw.split_caption(lad)
    own = next(r for r in lad.rungs if r.trained)
    assert own.decode.label in draw.bundled_sentence(lad)


@pytest.mark.parametrize("which", ["cpu", "gpu"])
def test_the_bundled_models_sentence_says_what_the_largest_rung_measured_not_a_fixed_rest(which):
    """Under every ladder picture: "the rest is the fixed cost of hundreds of small operations ..., which does not
    shrink with the model. Bigger rungs show the physics." The H200 recording's rest grew from 7.7 to 48 ms and its
    largest rung's readable step was still overhead-bound (87 % outside the matmuls); the CPU's grew ×4. The words
    now give the rest in ms from each rung's record and the largest rung's own verdict: the physics is said to show
    only on a path whose verdict is not overhead-bound."""
    from engine.paths import ASSETS
    from topics.ladder.record import Ladder

    raw = json.loads((ASSETS / f"ladder_{which}.json").read_text(encoding="utf-8"))
    lad = Ladder.from_dict(raw)
    own = next(r for r in raw["rungs"] if r["trained"])
    top = raw["rungs"][-1]
    said = draw.bundled_sentence(lad)
    assert "fixed cost" not in said and "does not shrink" not in said
    rest = own["decode"]["median_ms"] * (1 - min(1.0, own["matmul_ms"] / own["decode"]["median_ms"]))
    assert re.search(r"the rest, ([\d.]+) ms", said) and float(re.search(r"the rest, ([\d.]+) ms", said).group(1)) \
        == pytest.approx(rest, rel=0.01)
    if top["decode"]["kind"] == "overhead-bound":
        assert "still overhead-bound" in said
        assert ("shows the physics" in said) == bool(top.get("lean") and top["lean"]["kind"] != "overhead-bound")
    else:
        assert "the bigger model shows the physics" in said


@pytest.mark.parametrize("which", ["cpu", "gpu"])
def test_every_measured_gap_says_how_far_it_is_off_the_rule_and_which_pass_ran_further_above_its_bound(which):
    """"The rule: the per-token gap ≈ min(s, the ridge in tokens)" stood beside measured gaps 1.3 to 2.25 times it
    (H200: rule ×169, lean ×230, readable ×379) and nothing said so. Each measured gap now gives its ratio to the
    rule and each pass's time over its bound, from the rung's record; the rule is the bounds' quotient, so the
    ratio is about the decode's over the prefill's (within 10 %)."""
    from engine.paths import ASSETS
    from topics.ladder.record import Ladder

    lad = Ladder.from_dict(json.loads((ASSETS / f"ladder_{which}.json").read_text(encoding="utf-8")))
    said = draw.per_token_caption(lad)
    found = re.findall(r"×([\d.]+) the rule(?:'s ×\d+)?: its decode step ran ×([\d.]+) its bound, its prefill "
                       r"×([\d.]+) its own", said)
    lean, top = draw.lean_rung(lad), lad.rungs[-1]
    passes = ([(lean.lean_gap, lean.lean, lean.lean_prefill)] if lean else []) + \
        ([(top.lean_gap, top.lean, top.lean_prefill)] if top.lean_gap and top is not lean else []) + \
        [(top.decode_vs_prefill_per_token, top.decode, top.prefill)]
    if top.lean_gap:  # the top rung's lean pass is quoted twice: in the lean sentence and beside the rule
        passes.insert(1, passes[0])
    assert len(found) == len(passes), (found, said)
    rules = {round(roofline.decode_prefill_gap(s, lad.roof.ridge_tokens), 6)
             for s in (lad.tokens, *(r.lean_prefill.tokens for r in (lean,) if r))}
    for (off, dec, pre), (gap, d, p) in zip(found, passes):
        assert (float(dec), float(pre)) == (round(d.ratio, 2), round(p.ratio, 2))
        assert any(float(off) == pytest.approx(gap / rule, abs=0.006) for rule in rules)
        assert float(off) == pytest.approx(d.ratio / p.ratio, rel=0.10)


# ---------------------------------------------------------------- the command line


@pytest.mark.slow
def test_cli_ladder_json_writes_the_documented_keys(tmp_path, capsys):
    from commands.main import main

    path = tmp_path / "ladder.json"
    code = main(["ladder", "--sizes", "own", "1M", "--tokens", "16", "--repeats", "1", "--json", str(path)])
    out = capsys.readouterr().out
    doc = json.loads(path.read_text())
    assert code == 0 and set(doc) == set(LADDER_KEYS) and len(doc["rungs"]) == 2
    assert set(RUNG_KEYS) <= set(doc["rungs"][0]) and rungs.RANDOM_WEIGHTS in out


def test_cli_ladder_refuses_a_rung_over_the_limit_in_one_line(capsys, monkeypatch):
    from commands.main import main

    monkeypatch.setenv("DECODE_LAB_MEMORY_LIMIT", str(60 * 2**20))
    code = main(["ladder", "--sizes", "110M"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: The ladder cannot build 110M") and err.count("\n") == 1


# ---------------------------------------------------------------- the lean path


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_the_lean_path_chooses_the_steppers_greedy_tokens(which, bundled_lm, gpt2_lm):
    from physics import compiled

    lm = bundled_lm if which == "llama" else gpt2_lm
    run = Stepper(lm, "Once upon a time, there was a little girl named Lily. She", max_new_tokens=24,
                  stop_on_eos=False, record=False, repeats=1)
    run.run()
    assert compiled.greedy(lm, run.ids[:, :run.prompt_len], 24, compile=False) == run.generated_ids
    timing, lean = compiled.time_decode(lm, run.ids[:, :run.prompt_len], repeats=2, compile=False)
    assert timing.repeats == 2 and timing.warmup_ms is not None and lean.how == "static cache + SDPA, not compiled"


def test_a_ladder_timed_on_a_busy_server_says_so_under_every_picture(measured):
    """One pass whose timed runs spread ×40 (a test run sharing the cores): each figure says which and how much,
    and a steady ladder says nothing."""
    from dataclasses import replace

    from drawing.caveats import BUSY
    from topics.ladder.notes import ladder_note

    lad, _ = measured
    steady = replace(lad, rungs=tuple(replace(r, **{k: replace(getattr(r, k), low_ms=getattr(r, k).median_ms,
                                                                high_ms=getattr(r, k).median_ms)
                                                    for k in ("prefill", "decode", "nocache")}, lean=None,
                                      lean_prefill=None)
                                      for r in lad.rungs))
    assert ladder_note(steady) is None
    r0 = steady.rungs[-1]
    busy = replace(steady, rungs=steady.rungs[:-1] + (replace(r0, decode=replace(r0.decode, low_ms=1.0, high_ms=40.0)),))
    note = ladder_note(busy)
    assert note.startswith(BUSY) and f"{r0.label}'s decode ranged 1.0–40.0 ms" in note and "×40.0" in note
    for make in (draw.per_token_figure, draw.roofline_figure, draw.split_figure):
        assert any(a.text.startswith("⚠ " + BUSY) for a in make(busy).layout.annotations)
        assert not any(a.text.startswith("⚠") for a in make(steady).layout.annotations)


def test_the_recorded_ladder_in_assets_reads_back_with_its_device_named():
    """The ladder shipped for a user to compare with (assets/ladder_*.json) is whole: device, roof, every rung."""
    shipped = stores.recorded_ladders()
    assert shipped, "no recorded ladder in assets/"
    for lad in shipped:
        assert lad.device and lad.measured_at and lad.weights_note == rungs.RANDOM_WEIGHTS
        assert lad.roof.measured and lad.roof.bandwidths and lad.roof.peak_flops > 0
        assert [r.parameters for r in lad.rungs] == sorted(r.parameters for r in lad.rungs) and len(lad.rungs) >= 2
        assert lad.rungs[0].trained and not any(r.trained for r in lad.rungs[1:])
        for r in lad.rungs:
            for m in (r.prefill, r.decode, r.nocache):
                assert m.kind in m.label and m.low_ms <= m.median_ms <= m.high_ms


def test_a_compute_bound_prefill_above_its_bound_is_explained_by_its_own_matmuls(measured):
    """The roofline's caption says how far the prefill's matmuls alone sit above the compute bound, and what share
    of the prefill is the rest, from the rung's own timings (or nothing, where the prefill is not compute-bound)."""
    from dataclasses import replace

    lad, _ = measured
    top = lad.rungs[-1]
    pre = replace(top.prefill, kind="compute-bound", median_ms=10.0, compute_ms=4.0)
    r = replace(top, prefill=pre, prefill_matmul_ms=6.0)
    words = draw.prefill_matmul_words(r)
    assert "matmuls alone took 6.00 ms, ×1.5 the compute bound" in words and "other 40% of the prefill" in words
    assert draw.prefill_matmul_words(replace(r, prefill=replace(pre, kind="overhead-bound"))) == ""
    assert draw.prefill_matmul_words(replace(r, prefill_matmul_ms=None)) == ""
    assert "took the whole prefill" in draw.prefill_matmul_words(replace(r, prefill_matmul_ms=12.0))


# ---------------------------------------------------------------- labels and why-sentences, read off a run


def _rung_at(lad, label, decode_ratio: float, matmul_share: float):
    """The recorded ladder's rung `label` with its decode step timed at decode_ratio × its memory bound and its
    matmuls alone at matmul_share of that step (a small fixture record: the 26 M rung of a run on this VM)."""
    from dataclasses import replace

    r = next(r for r in lad.rungs if r.label == label)
    ms = r.decode.memory_ms * decode_ratio
    r = replace(r, decode=replace(r.decode, median_ms=ms, low_ms=ms, high_ms=ms), matmul_ms=ms * matmul_share)
    return r.on(lad.roof)


def test_a_step_is_labelled_by_its_bound_only_when_the_bound_is_most_of_its_time():
    """The recorded CPU ladder, labelled by today's rule: 'memory-bound' only within ×2 of the bound. A 26 M decode step
    at ×2.58 whose matmuls are 45 % of it is on the memory side, not memory-bound, and says how much is overhead; the
    ≥ 100 M rungs' decode steps are labelled on the memory side of the ridge (bound by memory or on its side)."""
    lad = stores.recorded_ladders()[0]
    for r in lad.rungs:
        for m in (r.prefill, r.decode, r.nocache):
            bound = "memory" if m.memory_ms >= m.compute_ms else "compute"
            want = (f"{bound}-bound" if m.ratio <= roofline.EXPLAINS else f"{bound} side" if m.ratio <= roofline.OVERHEAD
                    else "overhead-bound")
            assert m.kind == want, (r.label, m.what, m.ratio, m.kind)
    big = [r for r in lad.rungs if r.parameters > 100e6]
    assert big and all(r.decode.memory_ms > r.decode.compute_ms and r.decode.kind in ("memory-bound", "memory side")
                       for r in big)
    r26 = _rung_at(lad, "26M", 2.58, 0.45)
    said = draw.bound_words(r26.decode, r26.matmul_share)
    share = r26.decode.memory_ms / r26.decode.median_ms  # the share of its roof it used, from the record's own times
    assert said.startswith(f"on the memory side, not memory-bound: {share:.0%} of the ")
    assert f"×{r26.decode.median_ms / r26.decode.memory_ms:.2f} its bound" in said
    assert "its matmuls alone 45% of the pass" in said
    assert "memory-bound," not in said and not said.startswith("memory-bound")
    top = _rung_at(lad, "26M", 2.58, 0.45)
    one = dataclasses.replace(lad, rungs=(top,))
    assert said in draw.roofline_caption(one)


def test_the_cli_ladder_table_and_its_rule_line_use_the_same_labels(capsys):
    """`python -m engine ladder` prints each pass's kind and the rule that gave it (the table is the record's)."""
    from topics.ladder.cli import label_rule

    lad = stores.recorded_ladders()[0]
    table = lad.text_table()
    for r in lad.rungs:
        row = next(line for line in table.splitlines() if line.split()[0] == r.label)
        assert r.decode.kind in row and r.prefill.kind in row
    assert f"within x{roofline.EXPLAINS:g}" in label_rule() and f"above x{roofline.OVERHEAD:g}" in label_rule()


def test_the_decode_prefill_gap_is_said_as_a_rule_with_this_devices_ridge_and_the_gpus():
    """'Decode ×N dearer per token': the reason given is min(s, the ridge in tokens), with the numbers of the run (the
    device's one ridge, the gap recomputed from the measured medians and tokens) and an H100's prediction in bf16
    beside them."""
    import re

    lad = stores.recorded_ladders()[0]
    top, h100 = lad.rungs[-1], roofline.h100()
    said = draw.per_token_caption(lad)
    here = lad.roof.peak_flops / lad.roof.dram_bandwidth * 4 / 2  # the ridge in rows, from the probe's own figures
    m = re.search(r"recorded [\d-]+ is ~(\d+) tokens \((\w+)\), so the rule gives ×(\d+) there \(measured ×([\d.]+)[^)]*\); "
                  r"on an NVIDIA H100 SXM \(datasheet\) in bf16 \(ridge ~(\d+) tokens\) it predicts ×(\d+) at s = (\d+)", said)
    assert m, said
    assert int(m.group(1)) == round(here) and m.group(2) == lad.roof.dtype == "fp32"
    gap = (top.decode.median_ms / top.decode.tokens) / (top.prefill.median_ms / top.prefill.tokens)  # from the times
    assert top.decode.tokens == 1 and top.prefill.tokens == lad.tokens  # a decoded token against a prompt token
    assert int(m.group(3)) == round(min(lad.tokens, here)) and float(m.group(4)) == round(gap, 1)
    assert int(m.group(5)) == round(h100.ridge_tokens) and int(m.group(6)) == min(lad.tokens, round(h100.ridge_tokens))
    assert int(m.group(7)) == lad.tokens
    assert "reads each weight once for all s = 128 positions" in said and "stops getting cheaper" in said
    assert draw.gap_rule(lad) in draw.per_token_claim(lad)  # the Latency view quotes the same rule
    claim = draw.per_token_claim(lad)  # ... and the same measured times, per token
    found = re.search(r"a prompt token of the (\d+)-token prefill cost ([\d.]+) ms and a decoded token ([\d.]+) ms: "
                      r"decode ×([\d.]+) dearer per token", claim)
    assert found, claim
    assert shown_ms(found.group(2), top.prefill.median_ms / lad.tokens)
    assert shown_ms(found.group(3), top.decode.median_ms)
    assert float(found.group(4)) == pytest.approx(gap, rel=0.05)


def test_a_128_token_prefill_is_compute_bound_only_with_its_condition():
    """The claim keeps its condition: past this device's ridge (tokens, at the rung's bytes), and on an H100 at batch
    1 the same prefill predicted from the run's own FLOPs and bytes, counted again in bf16."""
    import re

    lad = stores.recorded_ladders()[0]
    top, h100 = lad.rungs[-1], roofline.h100()
    said = draw.prefill_condition(lad)
    m = re.search(r"A (\d+)-token prefill is (past|short of) the ridge of cpu: [^(]+, recorded [\d-]+ \(~(\d+) tokens, "
                  r"(fp32)\); "
                  r"on an NVIDIA H100 SXM at batch 1 \(its datasheet's ridge ~(\d+) tokens in bf16\) the same prefill is "
                  r"predicted on "
                  r"(the memory side|the compute side) \((\d+) vs (\d+) FLOP/byte in bf16\)", said)
    assert m, said
    here = lad.roof.peak_flops / lad.roof.dram_bandwidth * 4 / 2  # the ridge in rows, from the probe's own figures
    assert int(m.group(1)) == lad.tokens and m.group(2) == ("past" if lad.tokens >= here else "short of")
    assert int(m.group(3)) == round(here) and int(m.group(5)) == round(h100.ridge_tokens)
    bf16 = top.prefill.flops / (top.prefill.bytes_moved / 2)  # the run's own counts, in 2 bytes an element
    assert int(m.group(7)) == round(bf16) and int(m.group(8)) == round(h100.ridge)
    assert m.group(6) == ("the compute side" if bf16 >= h100.ridge else "the memory side") == "the memory side"
    for claim in (draw.phase_claim(lad, "prefill"), draw.roofline_caption(lad)):
        assert said in claim
    assert "predicted on the memory side" in draw.phase_claim(lad, "decode")


def test_the_ladder_table_in_the_docs_is_the_recorded_run_labelled_by_todays_rule():
    """docs/measurements.md quotes assets/ladder_cpu.json: each rung's decode and prefill ratio and label are the
    recorded run's, labelled by roofline.verdict as it stands (no label left from an older rule)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "measurements.md").read_text(encoding="utf-8")
    lad = stores.recorded_ladders()[0]
    doc = doc[doc.index(f"## Measured {lad.measured_at[:10]}"):]  # the section of the day it was recorded
    words = {"overhead-bound": "overhead-bound", "memory-bound": "memory-bound", "compute-bound": "compute-bound",
             "memory side": "memory side (not memory-bound)", "compute side": "compute side (not compute-bound)"}
    for r in lad.rungs:
        row = next(line for line in doc.splitlines() if re.match(rf"\| \**{re.escape(r.label)}\** \|", line))
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        decode, prefill = cells[4], cells[7]
        for cell, m in ((decode, r.decode), (prefill, r.prefill)):
            ratio, label = cell.split(", ", 1)
            assert float(ratio.strip("×*")) == pytest.approx(m.ratio, abs=0.051), (r.label, cell)
            assert label.strip("*") == words[m.kind], (r.label, cell, m.kind)


# ---------------------------------------------------------------- a verdict shown to a class is one that held


def _rung(spread: float, median: float = 100.0):
    """The recorded ladder's top rung (assets/), its prefill's repeats set `spread` apart around `median` ms."""
    from dataclasses import replace

    top = stores.recorded_ladders()[0].rungs[-1]
    return replace(top, prefill=replace(top.prefill, median_ms=median, low_ms=median / spread ** 0.5,
                                        high_ms=median * spread ** 0.5),
                   decode=replace(top.decode, low_ms=top.decode.median_ms, high_ms=top.decode.median_ms))


def test_a_rung_whose_repeats_spread_wide_is_timed_again_and_the_steadiest_kept():
    """Injected timings: a rung measured ×2.0 apart is timed again; the steadiest of the tries is kept and says how
    many it took. A steady rung is timed once; one that stays wide stops after RETIMES more tries."""
    def measures(*spreads):
        seq = iter([_rung(s, 100.0 + i) for i, s in enumerate(spreads)])
        return lambda: next(seq)

    kept = ladder.steady(measures(2.0, 1.6, 1.1, 1.05), retimes=2)
    assert kept.timed == 3 and kept.prefill.median_ms == 102.0  # the third try, under RETIME_SPREAD: no fourth
    assert ladder.steady(measures(1.2, 9.0)).timed == 1
    stays = ladder.steady(measures(3.0, 2.0, 2.5, 1.0), retimes=2)
    assert stays.timed == 3 and stays.prefill.median_ms == 101.0  # the steadiest of three
    assert ladder.steady(measures(3.0, 2.5, 2.2, 2.1)).timed == 1 + ladder.RETIMES  # bounded: a busy server


def test_measure_ladder_times_a_busy_rung_again_before_it_is_shown(bundled_lm, monkeypatch):
    """measure_ladder with its rung's passes replaced by injected timings: wide, then steady."""
    seen = iter([_rung(2.5), _rung(1.1)])
    monkeypatch.setattr(ladder, "measure_rung", lambda *a, **k: next(seen))
    said = []
    lad = ladder.measure_ladder(bundled_lm, ["own"], tokens=16, repeats=2, lean=False,
                                on_progress=lambda f, t: said.append(t))
    r = lad.rungs[0]
    assert r.timed == 2 and r.prefill.high_ms / r.prefill.low_ms == pytest.approx(1.1)
    assert any("spread ×2.5, timing it again" in t for t in said)  # the progress line says why it takes longer


def test_a_label_that_flips_back_against_the_lesson_is_shown_with_its_spread_and_a_busy_server():
    """The issue's case: a 221M prefill at 816 ms (609–925) labelled overhead-bound above a 112M prefill labelled
    compute-bound. A bigger model does not go back towards its overheads: every picture says the server was busy,
    with the spread; the recorded ladder as it is says nothing."""
    from dataclasses import replace

    from drawing.caveats import BUSY
    from topics.ladder.notes import ladder_note

    rec = stores.recorded_ladders()[0]
    assert ladder_note(rec) is None
    top = rec.rungs[-1]
    flipped = replace(top, timed=3, prefill=replace(top.prefill, median_ms=816.0, low_ms=609.0, high_ms=925.0,
                                                     kind="overhead-bound",
                                                     label="overhead-bound (×3.0 above both bounds)"))
    busy = replace(rec, rungs=rec.rungs[:-1] + (flipped,))
    note = ladder_note(busy)
    smaller = rec.rungs[-2]
    assert note.startswith(BUSY) and f"{top.label}'s prefill measured 816.0 ms (609.0–925.0" in note
    assert "timed 3 times" in note and f"the smaller {smaller.label}'s was compute-bound" in note
    for make in (draw.per_token_figure, draw.roofline_figure, draw.split_figure):
        assert any(a.text.startswith("⚠ " + BUSY) for a in make(busy).layout.annotations)


@pytest.mark.parametrize("name", ["ladder_cpu.json", "ladder_gpu.json"])
def test_a_recording_shown_on_another_server_never_calls_its_roof_measured_here(name):
    """The shipped recordings are shown on every server, most of them not the machine that ran them: a verdict read
    "55% of the bandwidth measured here (MBU)" on a laptop about an H200's pass. Every pass's words, the table's,
    the roofline's hover text and the lessons' quote of the curve now name the roof without a 'here'."""
    from engine.paths import ASSETS
    from topics.ladder import curve_draw

    lad = Ladder.from_dict(json.loads((ASSETS / name).read_text(encoding="utf-8")))
    said = [getattr(r, p).label for r in lad.rungs for p in ("prefill", "decode", "nocache", "lean", "lean_prefill")
            if getattr(r, p) is not None]
    said += [str(v) for v in lad.frame().to_numpy().ravel()]
    said += [str(t.hovertemplate) + str(t.hovertext) + str(t.text) for t in draw.roofline_figure(lad).data]
    curve = next((r.curve for r in lad.rungs if r.curve), None)
    if curve is not None:
        said += [curve_draw.curve_claim(curve, lad.roof, phase, draw.machine(lad), lad.device)
                 for phase in ("prefill", "decode")]
        said += [str(t.hovertemplate) for t in curve_draw.curve_figure(curve, lad.roof, draw.machine(lad)).data]
    assert len(said) > 10 and any("(MBU)" in s for s in said) and any("(MFU)" in s for s in said)
    assert not [s for s in said if "measured here" in s or "bandwidth here" in s]


@pytest.mark.parametrize("name", ["default", "tinystories-gpt2"])
def test_the_latency_claim_speaks_of_the_bundled_model_only_where_the_ladder_grew_the_model_on_screen(name):
    """With tinystories-gpt2 on screen, the Step-through's Latency view said "the bundled 4.1M model's decode step
    is overhead-bound ... the rest, 2.54 ms": the CPU recording's tinystories-llama, picked by device alone. The
    sentence now names the ladder's model, and where the model on screen is another, says it is another's."""
    from engine.load.load import load_model
    from topics.ladder.page_ladder import latency_claim, shown_ladder

    lm = load_model(name, device="cpu")
    ladder, _ = shown_ladder(lm)
    own = next(r for r in ladder.rungs if r.trained)
    said = latency_claim(lm)
    if own.parameters == lm.spec.parameters:
        assert f"the bundled {own.label} model ({ladder.model}) is" in said
    else:
        assert "the bundled" not in said.split("(a recording")[-1] and "the rest, " not in said
        assert f"That ladder grows {ladder.model}, not the model on screen ({lm.spec.name})" in said
