"""The Scale page a class can trust: every ladder number names the path that ran it (the lean pass first where a
recording has one), a busy measurement is kept beside the recording and never replaces it nor draws a knee verdict,
the CPU's and the GPU's curves stand side by side, and no chart, table or ridge says what it should not. The
browser's view of the side-by-side pictures is in tests/test_browser_scale.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from topics.ladder import curve_draw
from topics.ladder import draw as draw
from topics.ladder.store import STORE, ladder_key, recorded_ladders
from ui.apptest import app_test, page
from ui.charts import CONFIG

pytestmark = pytest.mark.slow  # every test here drives the app's pages in AppTest

LADDER_TITLES = {"ms per token: prefill vs decode", "Every rung on its machine's roofline",
                 "Where a decode step's time goes"}


def recording(kind: str):
    return next(r for r in recorded_ladders() if ("cuda" in r.device) == (kind == "gpu"))


def scale_page(**query):
    at = app_test()
    at.query_params = query
    at.run()
    at.switch_page(page("scale")).run()
    assert not at.exception
    return at


def pick(at, words: str):
    """Pick the ladder whose name in the picker contains `words`."""
    box = at.selectbox(key="scale_ladder_pick")
    box.set_value(next(o for o in box.options if words in o)).run()
    assert not at.exception
    return at


def figures(at) -> dict[str, dict]:
    return {c.proto.id or str(i): json.loads(c.proto.spec)["layout"] for i, c in enumerate(at.get("plotly_chart"))}


def texts(at) -> list[str]:
    """Every sentence on the page as read (the markdown's escapes apart)."""
    return [m.value.replace("\\", "") for m in at.markdown] + [c.value.replace("\\", "") for c in at.caption]


@pytest.mark.parametrize("view", ["per_token", "roofline", "split", "table"])
def test_the_h200_recording_names_the_path_of_every_number_and_leads_with_the_lean_pass(view):
    gpu = recording("gpu")
    at = pick(scale_page(ladder=view), "NVIDIA H200")
    for layout in figures(at).values():
        if layout["title"]["text"] in LADDER_TITLES:  # the ladder's picture: its path under the title
            assert draw.READABLE in layout["title"]["subtitle"]["text"]
        if layout["title"]["text"].startswith("One pass over n rows"):
            assert draw.LEAN in layout["title"]["subtitle"]["text"]
    said = texts(at)
    for text in said:  # no sentence quotes the readable path's decode cost as the device's
        if "one decoded token costs" in text or "Cached decode:" in text:
            assert "readable path" in text, text
    if view == "per_token":
        caption = draw.per_token_caption(gpu)
        assert caption in said and caption.startswith("On the lean pass at Llama-3-8B")
        assert f"×{gpu.rungs[-1].lean_gap:.0f}" in caption and f"×{gpu.rungs[-1].lean_cache_saves:.2f}" in caption
    elif view == "roofline":
        assert any(t.startswith(f"On the {draw.LEAN} at Llama-3-8B, a decode step is memory-bound") for t in said)
    elif view == "split":
        lean_ms = draw._ms(gpu.rungs[-1].lean.median_ms)  # the recording's own figure, as the page rounds it
        assert any(t.startswith(f"The {draw.LEAN} runs Llama-3-8B's decode step in {lean_ms} ms") for t in said)
    else:
        table = at.dataframe[0].value
        assert list(table["path"])[:2] == ["lean (compiled)", "readable (eager)"]  # the lean row first
        top = gpu.rungs[-1]
        assert table["decode ms"].iloc[0] == top.lean.spread() and table["decode ms"].iloc[1] == top.decode.spread()
        assert top.lean.median_ms < top.decode.median_ms / 5  # the lean path's step, far below the readable one's


@pytest.fixture
def busy_here():
    """A measurement made on this server while it was busy (one pass's repeats spread ×3), kept as this server's."""
    from engine.load.load import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL, device="cpu")
    rec = recording("cpu")
    top = rec.rungs[-1]
    wide = dataclasses.replace(top.decode, high_ms=top.decode.low_ms * 3)
    busy = dataclasses.replace(rec, recorded=False, device="cpu: the busy stand-in (x86_64, 1 thread)",
                               measured_at="2026-11-29T08:40:00+00:00",
                               rungs=(*rec.rungs[:-1], dataclasses.replace(top, decode=wide)))
    key = ladder_key(lm)
    before = STORE._kept.pop(key, None), STORE._history.pop(key, None)
    STORE._kept[key], STORE._history[key] = busy, [busy]
    yield busy
    STORE._kept.pop(key, None), STORE._history.pop(key, None)
    if before[0] is not None:
        STORE._kept[key] = before[0]
    if before[1] is not None:
        STORE._history[key] = before[1]


def test_a_busy_measurement_is_kept_beside_the_recording_and_draws_no_knee_verdict(busy_here):
    rec = recording("cpu")
    assert "The knee lies within ×1.5 of where the ridge puts it" in curve_draw.curve_caption(
        next(r.curve for r in rec.rungs if r.curve), rec.roof, rec.device)  # the clean recording draws one
    at = scale_page()
    box = at.selectbox(key="scale_ladder_pick")
    assert box.value == "AMD EPYC CPU · readable + lean · 2026-11-28"  # the clean recording stays the default
    assert "this server, 2026-11-29 08:40, busy · the busy stand-in CPU · readable + lean" in box.options  # beside it
    at = pick(at, "busy")
    assert any("flagged" in w.value for w in at.warning)
    said = " ".join(texts(at))
    assert "The knee lies within ×1.5 of where the ridge puts it" not in said and curve_draw.FLAGGED in said
    curve = next(v for v in figures(at).values() if v["title"]["text"].startswith("One pass over n rows"))
    assert "busy" in curve["title"]["subtitle"]["text"]
    assert not [a for a in curve.get("annotations", []) if a.get("text", "").startswith("measured knee")]
    # and the lessons still quote the clean recording, server-wide
    lesson = app_test()
    lesson.query_params = {"lesson": "3"}
    lesson.run()
    lesson.switch_page(page("lessons")).run()
    quoted = " ".join(m.value for m in lesson.markdown)
    assert "a recording made on cpu: AMD EPYC" in quoted and "busy stand-in" not in quoted


def curves_shown(at) -> set[str]:
    """The subtitles of the passes-over-n-rows curves on the page (each names its device, path and date)."""
    return {json.loads(c.proto.spec)["layout"]["title"]["subtitle"]["text"] for c in at.get("plotly_chart")
            if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("One pass over n rows")}


def test_the_cpu_and_gpu_curves_stand_side_by_side_each_named_with_device_path_and_date():
    at = scale_page()
    at.toggle(key="scale_ladder_both").set_value(True).run()
    assert not at.exception
    shown = curves_shown(at)
    for kind, device in (("cpu", "AMD EPYC"), ("gpu", "NVIDIA H200")):
        rec = recording(kind)
        assert any(device in s and draw.LEAN in s and rec.measured_at[:10] in s for s in shown), shown
    assert len(shown) == 2


def test_the_side_by_side_curves_are_in_the_link_and_a_link_opens_them_and_the_toggle_after_drops_them():
    at = scale_page()
    at.toggle(key="scale_ladder_both").set_value(True).run()
    link = {k: at.query_params[k] for k in at.query_params}
    assert link.get("curves") in ("side_by_side", ["side_by_side"]), link
    opened = scale_page(**{k: v[0] if isinstance(v, list) else v for k, v in link.items()})
    assert len(curves_shown(opened)) == 2 and opened.toggle(key="scale_ladder_both").value
    opened.toggle(key="scale_ladder_both").set_value(False).run()  # the click after: one curve, and the link says so
    assert len(curves_shown(opened)) == 1 and "curves" not in opened.query_params


def test_no_chart_draws_plotlys_toolbar_and_no_table_prints_none():
    at = scale_page(ladder="table")
    pick(at, "NVIDIA H200")
    charts = at.get("plotly_chart")
    assert charts and all(json.loads(c.proto.config) == CONFIG for c in charts)
    for frame in at.dataframe:
        df = frame.value
        assert not df.isna().any().any(), df
        assert not (df.astype(str) == "None").any().any(), df
    lesson = app_test()
    lesson.query_params = {"lesson": "4"}
    lesson.run()
    lesson.switch_page(page("lessons")).run()
    assert all(json.loads(c.proto.config) == CONFIG for c in lesson.get("plotly_chart"))


def test_each_ridge_on_the_page_names_the_machine_it_belongs_to():
    at = pick(scale_page(), "AMD EPYC")
    said = texts(at)
    cpu = recording("cpu")
    assert any(f"The ridge of {draw.short_device(cpu.device)}, recorded {cpu.measured_at[:10]} is ~7 tokens" in t
               for t in said)
    assert any(t.startswith("This server's roof (") and "since the server started" in t and "the ridge at" in t
               for t in said)


@pytest.mark.parametrize("peak, bandwidth, threads, said_threads", [
    (1.92, 1.35, (2,), "on 1 thread, this probe on 2"), (1.92, 1.35, (1, 2), "on 1 thread, this probe on 1 and 2"),
    (1.92, 1.35, (1,), None), (1.0, 1.0, (2,), None)])
def test_two_ridges_for_one_cpu_on_the_page_say_why_they_differ_in_the_runs_numbers(monkeypatch, peak, bandwidth,
                                                                                    threads, said_threads):
    """The recorded ladder quotes its run's ridge (~3.4 FLOP/byte, one thread); the roofline quotes this server's
    probe. Where the two differ, a sentence sets them side by side with the peaks' and bandwidths' ratios, and the
    threads each ran on where they differ: the kept probes' own, not this moment's (serving changes torch's threads
    after a probe); where they agree, nothing is said."""
    import torch

    from physics import roofline

    rec = recording("cpu")
    mine = dataclasses.replace(rec.roof, name="cpu (measured here, float32 matmul)",
                               peak_flops=rec.roof.peak_flops * peak, threads=threads,
                               bandwidths=tuple((b, r * bandwidth) for b, r in rec.roof.bandwidths))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # this moment's count, which the sentence never quotes
    monkeypatch.setitem(roofline._roofs, ("cpu", str(torch.float32)), mine)
    said = [t for t in texts(pick(scale_page(), "AMD EPYC")) if t.startswith("The ladder above quotes its own run")]
    if peak == bandwidth:
        assert said == []
        return
    (one,) = said
    assert f"its own run's ridge, {rec.roof.ridge:.1f} FLOP/byte" in one and rec.measured_at[:10] in one
    assert f"peak is ×{peak:.2f} that run's and its bandwidth ×{bandwidth:.2f}, so its ridge is " \
           f"×{peak / bandwidth:.2f}" in one
    assert ("this probe on" in one) == (said_threads is not None) and (said_threads is None or said_threads in one), one


def test_llama_3_70b_weights_are_counted_from_its_shapes():
    from physics import kvcalc
    from physics.units import human_bytes

    llama = kvcalc.from_table("Llama-3-70B")
    assert human_bytes(kvcalc.weight_bytes(llama, 2)) == "131.4 GiB"  # not the nominal 70.0 B's 130.4 GiB
    assert kvcalc.counted_parameters(llama) == 70_553_706_496  # 80 layers of 8192, 64 heads, 8 K/V, MLP 28672


def test_every_page_places_its_charts_through_the_one_helper():
    """A chart placed with st.plotly_chart directly drew plotly's toolbar over its title (the Serving and budget
    pages kept it): every page, topic and lesson places charts through ui.charts.chart (the step page's hidden
    warm-up chart, drawn static, aside)."""
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True).stdout.split()
    direct = [f"{f}:{i}" for f in files if not f.startswith(("tests/", "ui/charts.py"))
              for i, line in enumerate((root / f).read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"\.plotly_chart\(", line) and "staticPlot" not in line]
    assert direct == [], direct


def test_every_measure_button_says_how_long_its_recording_took_never_a_few_minutes():
    """'Measure on this server (a few minutes)' promised what the bytes run broke: 9 minutes on this project's 2
    cores beside a class's requests. Each button now quotes how long the recording shown took on its machine, read
    here from the shipped files themselves."""
    from pathlib import Path

    from tests.test_lessons import lesson

    assets = Path(__file__).parents[1] / "assets"
    took = {name: json.loads((assets / name).read_text())["wall_s"] for name in ("bytes_cpu.json", "ladder_cpu.json")}
    in_words = {name: f"{s / 60:.2g} min" if s >= 100 else f"{s:.3g} s" for name, s in took.items()}
    at = scale_page()
    labels = {b.key: b.label for b in at.button if b.key in ("scale_bytes_measure", "scale_ladder_measure")}
    assert f"took {in_words['bytes_cpu.json']} on its machine" in labels["scale_bytes_measure"], labels
    assert f"took {in_words['ladder_cpu.json']} on its machine" in labels["scale_ladder_measure"], labels
    assert f"took {in_words['bytes_cpu.json']} on its machine" in lesson(12).button(key="lesson12_measure").label
    assert not any("few minutes" in b.label for b in at.button)
