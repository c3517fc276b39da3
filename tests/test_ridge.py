"""One ridge per device and dtype: every page and lesson that quotes this device's ridge quotes one figure, the
roof's peak over its DRAM bandwidth (FLOP/byte) and that in rows, never the cache's faster rate. The reference is
the figures of a roof planted as this server's, divided out here."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from physics import roofline
from tests.test_lessons import lesson, text

# Beside tests/test_lessons.py on one worker (pytest.ini's --dist loadgroup): the lessons opened here (2, 3, 5) reuse
# the runs that worker's lessons already made (lessons/course.py keeps them for the process).
pytestmark = pytest.mark.xdist_group("lessons")
MIB = 2**20
# a roof whose cache is twice DRAM's rate: the in-cache ratio (2.0) and the ridge (4.0) must never be confused
PLANTED = roofline.DeviceRoof("cpu (measured here, float32 matmul)", peak_flops=1.2e11, bandwidth=60e9, measured=True,
                              bandwidths=((16 * MIB, 60e9), (64 * MIB, 45e9), (1024 * MIB, 30e9)), elem_bytes=4.0)
RIDGE = 1.2e11 / 30e9  # 4.0 FLOP/byte: peak over DRAM's rate
ROWS = RIDGE * 4 / 2  # 8 rows in fp32: 2 FLOPs per weight per row over 4 bytes a weight


@pytest.fixture
def planted(monkeypatch):
    """PLANTED kept as this process's roof for the CPU in fp32, as a probe would have kept it."""
    monkeypatch.setitem(roofline._roofs, ("cpu", str(torch.float32)), PLANTED)
    return PLANTED


OTHER_DEVICE = ("H100", "H200", "datacenter", "a recording made on", "Xeon", "predicted")


def ridge_figures(said: str) -> tuple[list[float], list[float]]:
    """(FLOP/byte figures, rows figures) the text gives for this device's ridge; a sentence about another device (a
    datasheet card, a recording) is skipped."""
    per_byte, rows = [], []
    for sentence in re.split(r"(?<=[.;])\s+", said):
        if any(word in sentence for word in OTHER_DEVICE):
            continue
        per_byte += [float(x) for x in re.findall(r"ridge (?:is |at )?([\d.]+) FLOP/byte", sentence)]
        rows += [float(x) for x in re.findall(r"ridge at [\d.]+ FLOP/byte \(~(\d+) rows", sentence)]
        rows += [float(x) for x in re.findall(r"R ≈ (\d+) tokens", sentence)]
    return per_byte, rows


def test_the_planted_roofs_ridge_is_drams_not_the_caches(planted):
    assert planted.ridge == pytest.approx(RIDGE) and planted.ridge_tokens == pytest.approx(ROWS)
    assert planted.cache_bandwidth == 60e9 and planted.ridge != pytest.approx(1.2e11 / 60e9)
    assert roofline.probe_device("cpu", "float32") is planted  # kept: no second probe, no second figure


def test_a_later_probe_can_only_tighten_the_roof_every_page_reads(planted, monkeypatch):
    slower = roofline.DeviceRoof(PLANTED.name, 1.0e11, 50e9, True, ((16 * MIB, 50e9), (1024 * MIB, 25e9)))
    kept = roofline.remember(slower, torch.device("cpu"), torch.float32)  # a busy minute's probe
    assert kept.ridge == pytest.approx(RIDGE) and roofline.probe_device("cpu", "float32") == kept


def test_the_scale_page_and_the_lessons_quote_one_ridge_for_this_device(planted):
    from topics.ladder.scale_draw import roof_sentence

    texts = {"scale": roof_sentence(roofline.probe_device("cpu", "float32"))}
    for number in (2, 3, 5):
        texts[f"lesson {number}"] = text(lesson(number))
    found = {name: ridge_figures(said) for name, said in texts.items()}
    assert found["scale"] == ([round(RIDGE, 1)], [round(ROWS)])
    assert found["lesson 2"][0] and found["lesson 5"][1]  # the prefill's bound sentence; the race's rule
    for name, (per_byte, rows) in found.items():
        assert all(x == pytest.approx(round(RIDGE, 1)) for x in per_byte), (name, per_byte)
        assert all(x == round(ROWS) for x in rows), (name, rows)


def test_this_servers_roof_says_how_many_probes_set_it_and_that_a_busy_one_reads_low():
    """"This server, measured now: peak 112.9 GFLOP/s ... ridge 6.0" on one load and "peak 300.6 ... ridge 20.4" on
    the next, the demo prefill's verdict flipping with it: one short probe, said as "measured now". The roof keeps
    the best rates of every probe (a later one can only raise it), and the sentence says how many set it."""
    from physics import roofline
    from topics.ladder.scale_draw import roof_sentence

    mib = 2**20
    low = roofline.DeviceRoof("cpu (test)", 1.13e11, 1.9e10, True, ((64 * mib, 2.0e10), (512 * mib, 1.88e10)))
    high = roofline.DeviceRoof("cpu (test)", 3.0e11, 1.5e10, True, ((64 * mib, 1.8e10), (512 * mib, 1.47e10)))
    one = roof_sentence(low)
    assert "one short probe" in one and "a busy moment reads low" in one and "measured now" not in one
    both = low.best(high)
    assert dataclasses.replace(low, threads=(2,)).best(dataclasses.replace(high, threads=(1,))).threads == (1, 2)
    assert both.probes == 2 and both.peak_flops == 3.0e11 and both.dram_bandwidth == 1.88e10  # each the better
    assert "The best rates of its 2 probes since the server started" in roof_sentence(both)
    assert f"the ridge at {3.0e11 / 1.88e10:.1f} FLOP/byte" in roof_sentence(both)
