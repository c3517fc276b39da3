"""The stage laid out for a phone (drawing/stage_phone.py): the same pass as the wide stage, read from the same
record, whole at a phone's width with no word under 11 px. How it looks in a browser (every word inside the picture
and apart, on the first screen of a 390x844 phone) is tests/test_browser_way_through.py's."""

from __future__ import annotations

import re

import pytest

from drawing.stage import stage_heading, stage_html, stage_svg
from drawing.stage_phone import NW, phone_stage_svg, stage_pictures
from engine import Stepper

PHONE_COLUMN = 370  # px: a 390 px phone's page, less its padding (ui/style.py)


def groups(svg: str, role: str) -> list[dict]:
    """The attributes of every <g data-role=role ...>, as dicts."""
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(0)))
            for m in re.finditer(rf'<g data-role="{role}"[^>]*>', svg)]


def sizes(svg: str) -> list[float]:
    return [float(x) for x in re.findall(r'font-size="([\d.]+)"', svg)]


@pytest.fixture(scope="module")
def passes(bundled_lm):
    s = Stepper(bundled_lm, "Once upon a time", max_new_tokens=20)
    out = {"prefill": (s.prefill(), s)}
    for _ in range(3):
        s.decode()
    out["decode"] = (s.records[-1], s)
    off = Stepper(bundled_lm, "Once upon a time", max_new_tokens=20, use_cache=False)
    off.prefill()
    for _ in range(4):
        off.decode()
    out["cache off"] = (off.records[-1], off)
    return out


@pytest.mark.parametrize("name", ["prefill", "decode", "cache off"])
def test_the_phone_stage_draws_the_pass_the_wide_stage_draws(passes, name):
    t, run = passes[name]
    wide = stage_svg(t, run.pieces(), run.prompt_len, layer=2, head=5)
    phone = phone_stage_svg(t, run.pieces(), run.prompt_len, layer=2, head=5)
    for role in ("k-col", "v-col", "query-row", "token"):  # every column, row and token, as the wide stage has them
        assert groups(phone, role) == groups(wide, role), role
    cols = groups(phone, "k-col")
    assert len(cols) == t.kv_len  # a column per position
    if t.use_cache:  # this pass's columns, outlined as new
        assert [int(c["data-pos"]) for c in cols if c["data-new"] == "1"] == list(range(t.past, t.kv_len))
    assert len(groups(phone, "query-row")) == t.q_len  # the rows fed: s, 1, or every position with the cache off
    fed = [int(g["data-pos"]) for g in groups(phone, "token") if g["data-fed"] == "1"]
    assert fed == list(range(t.past, t.past + t.q_len))
    layers = groups(phone, "layer")
    assert [int(g["data-layer"]) for g in layers] == list(range(len(t.layers)))  # four layers: every one a button
    assert [int(g["data-layer"]) for g in layers if g["data-open"] == "1"] == [2]
    assert re.search(r'data-role="chosen-chip">.*?>([^<]+)</text>', phone).group(1) == t.token.replace(" ", "·")
    assert 'data-role="stage"' in phone and f'data-step="{t.step}"' in phone and 'data-layout="phone"' in phone


def test_every_word_of_the_phone_stage_is_11_px_or_more_and_its_title_is_whole(passes):
    for t, run in passes.values():
        svg = phone_stage_svg(t, run.pieces(), run.prompt_len)
        assert f'viewBox="0 0 {NW} ' in svg
        assert min(sizes(svg)) * PHONE_COLUMN / NW >= 11
        title = re.findall(r'<text [^>]*font-weight="bold"[^>]*>([^<]*)</text>', svg)[:2]
        assert " ".join(title) == stage_heading(t) or title[0] == stage_heading(t)
    t, run = passes["decode"]
    wide = stage_svg(t, run.pieces(), run.prompt_len)
    assert min(sizes(wide)) * 520 / 1000 < 11  # the wide stage at a phone's 520 px: why this one exists


def test_a_page_places_both_and_a_phone_shows_its_own(passes):
    t, run = passes["decode"]
    html = stage_pictures(t, run.pieces(), run.prompt_len, layer=1, head=2)
    imgs = re.findall(r'<img class="(dl-stage-\w+)" alt="[^"]*" src="data:image/svg\+xml;base64,', html)
    assert imgs == ["dl-stage-wide", "dl-stage-phone"] and 'data-testid="dl-stage"' in html
    assert "dl-stage-head" not in html  # nothing to repeat: the phone's picture holds its title whole
    assert "dl-stage-head" in stage_html(stage_svg(t, run.pieces(), run.prompt_len), "x", heading="h")


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_the_cache_writes_arrowhead_stands_clear_of_the_note_above_it(passes, name):
    """On a phone the green arrowhead over this pass's new columns drew through 'kept for later steps': SVG sizes a
    marker in stroke widths, so a 7-wide head on a 2.5 stroke reaches 15.75 units back from its tip (refX 9 of 10)."""
    from drawing.svg import defs

    t, run = passes[name]
    svg = phone_stage_svg(t, run.pieces(), run.prompt_len)
    marker = re.search(r'<marker id="arrow-new" viewBox="0 0 10 10" refX="([\d.]+)" [^>]*markerHeight="([\d.]+)"',
                       defs())
    ref_x, size = float(marker.group(1)), float(marker.group(2))
    notes = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
        r'<text x="[\d.]+" y="([\d.]+)" font-size="([\d.]+)"[^>]*>kept for later steps</text>', svg)]
    heads = [float(m.group(2)) - ref_x / 10 * size * float(m.group(3)) for m in re.finditer(
        r'<g data-role="write-[kv]">.*?<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)" stroke="[^"]+" '
        r'stroke-width="([\d.]+)" marker-end', svg)]
    assert len(notes) == len(heads) == 2
    for (baseline, font), top in zip(notes, heads):  # a descender reaches about 0.25 of a font size under the line
        assert top >= baseline + 0.25 * font, (baseline, font, top)
