"""`python -m benchmarks.bytes_targets`: each verdict follows the recording's own numbers, recomputed here from its JSON
(per-round ratios, a least-squares line), and flips when the numbers do; a GPU's recording gets gpu-check's targets."""

from __future__ import annotations

import copy
import json
import statistics

import pytest

from benchmarks import bytes_targets as bt

SHIPPED = json.loads(bt.SHIPPED.read_text())


def passes(d: dict, storage: str, kind: str) -> list[dict]:
    return [p for p in d["passes"] if p["storage"] == storage and p["kind"] == kind]


def per_round(d: dict, storage: str, kind: str, against: str = "fp32") -> float:
    (a,), (b,) = passes(d, storage, kind), passes(d, against, kind)
    return statistics.median(x / y for x, y in zip(a["samples_ms"], b["samples_ms"]))


def rows(d: dict) -> dict:
    return {t.target: t for t in bt.targets(bt.Record.from_dict(d))}


def row(d: dict, starts: str):
    (hit,) = [t for name, t in rows(d).items() if name.startswith(starts)]
    return hit


def test_the_decode_and_prefill_verdicts_are_the_recordings_per_round_ratios_against_their_bounds():
    for starts, kind, holds in (("bf16 weight-only decode", "decode", lambda r: r <= 0.6),
                                ("bf16 weight-only prefill", "prefill", lambda r: r >= 0.9)):
        got, want = row(SHIPPED, starts), per_round(SHIPPED, "bf16", kind)
        assert got.measured == f"×{want:.2f}"
        assert got.holds is holds(want)


@pytest.mark.parametrize("ratio, holds", [(0.7, False), (0.5, True)])
def test_a_bf16_decode_made_slower_or_faster_flips_its_verdict_and_the_exit_code(ratio, holds, tmp_path):
    d = copy.deepcopy(SHIPPED)
    (ref,), (bf16,) = passes(d, "fp32", "decode"), passes(d, "bf16", "decode")
    bf16["samples_ms"] = [ratio * x for x in ref["samples_ms"]]
    assert row(d, "bf16 weight-only decode").holds is holds
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(d))
    others_hold = all(t.holds is not False for name, t in rows(d).items() if not name.startswith("bf16 weight-only d"))
    assert bt.main([str(path)]) == (0 if holds and others_hold else 1)


def test_the_slope_verdict_is_a_least_squares_line_against_the_caches_read_recomputed_from_the_json():
    pts = sorted(passes(SHIPPED, "fp32", "context"), key=lambda p: p["context"])
    xs, ys = [p["context"] for p in pts], [statistics.median(p["samples_ms"]) for p in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    reads = [r["cache"] or r["read"] for r in SHIPPED["rounds"]]
    predicted = 1e3 * SHIPPED["kv_per_token"] / statistics.median(reads)
    got = row(SHIPPED, "decode against context")
    assert got.measured.startswith(f"×{slope / predicted:.2f}")
    assert got.holds is (abs(slope / predicted - 1) <= 0.15)


def test_a_steeper_line_fails_the_slope_and_a_window_no_faster_than_the_full_cache_fails_the_eviction():
    d = copy.deepcopy(SHIPPED)
    predicted = 1e3 * d["kv_per_token"] / statistics.median(r["cache"] or r["read"] for r in d["rounds"])
    for p in passes(d, "fp32", "context"):  # each position costs its predicted time more: the slope off by ×2 or so
        p["samples_ms"] = [x + predicted * p["context"] for x in p["samples_ms"]]
    (evicted,) = passes(d, "fp32", "evicted")
    longest = max(passes(d, "fp32", "context"), key=lambda p: p["context"])
    evicted["samples_ms"] = list(longest["samples_ms"])
    assert row(d, "decode against context").holds is False
    assert row(d, "the step over a window").holds is False
    assert row(d, "the step over a window").measured == "×1.00"


def test_int8_slower_than_bf16_is_a_no_with_both_figures():
    d = copy.deepcopy(SHIPPED)
    (bf16,), (int8,) = passes(d, "bf16", "decode"), passes(d, "int8", "decode")
    int8["samples_ms"] = [1.1 * x for x in bf16["samples_ms"]]
    got = row(d, "int8 weight-only decode faster")
    assert got.holds is False
    assert f"bf16's ×{per_round(d, 'bf16', 'decode'):.2f}" in got.measured


def test_too_few_stories_or_an_fp32_storage_that_disagrees_fails_the_damage():
    d = copy.deepcopy(SHIPPED)
    d["damage"][0]["agree"], d["damage"][0]["kl"] = d["damage"][0]["agree"][:7], d["damage"][0]["kl"][:7]
    assert row(d, "the damage over").holds is False
    d = copy.deepcopy(SHIPPED)
    own = next(x for x in d["damage"] if x["storage"] == "fp32")
    own["agree"] = [0.99] + list(own["agree"][1:])
    assert row(d, "fp32 storage against fp32").holds is False


def test_a_gpus_recording_is_held_to_gpu_checks_targets():
    d = copy.deepcopy(SHIPPED)
    d["reference"] = "bf16 model"
    names = list(rows(d))
    assert any(name.startswith("int8 weight-only decode ≤ ×0.65") for name in names)
    assert not any(name.startswith("bf16 weight-only decode") for name in names)
