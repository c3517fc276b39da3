"""`python -m engine bench --json` writes what it always wrote: its parts are records now, and their JSON keeps the
keys (and their order) that the files measured before them have."""

from __future__ import annotations

import json

from benchmarks import bench
from benchmarks.records import AppClick, Bench, MemoryBound, ViewClicks

OVERHEAD_KEYS = ["generate_ms", "engine_ms", "engine_traced_ms", "ratio_untraced", "ratio_traced",
                 "ratio_untraced_rounds", "ratio_traced_rounds", "steps_per_mode"]  # at the top level, first


def quiet(*args) -> None:
    pass


def test_the_bench_json_keeps_its_keys_with_and_without_its_optional_parts(bundled_lm):
    o = bench.overhead(bundled_lm, new_tokens=3, rounds=1, log=quiet)
    prompt = len(bundled_lm.tokenizer(bench.PROMPT)["input_ids"])
    rows = bench.cache_vs_nocache(bundled_lm, lengths=(prompt + 3,), log=quiet)
    assert o.generate_ms > 0 and o.steps_per_mode > 0 and len(o.ratio_traced_rounds) == 1
    assert len(rows) == 1 and rows[0].identical and rows[0].tokens == prompt + 3
    bound = MemoryBound(bandwidth_gb_s=10.0, peak_tflops=0.1, context=40, bound_ms=0.5, measured_ms=o.engine_ms,
                        measured_over_bound=o.engine_ms / 0.5)
    served = {"continuous_tokens_per_s": 1.0}  # topics/serving's report, written as it comes
    clicks = AppClick(100, 50.0, 80.0, {"stage": ViewClicks(50.0, 80.0)}, "stage", 300.0)
    full = Bench(o, bound, (), tuple(rows), served, (), clicks, True, "m", "cpu", "fp32", 1).to_dict()
    assert list(full) == OVERHEAD_KEYS + ["memory_bound", "ladder", "cache_vs_nocache", "serving", "budget",
                                          "app_click", "model", "device", "dtype", "torch_threads"]
    assert list(full["memory_bound"]) == ["bandwidth_gb_s", "peak_tflops", "context", "bound_ms", "measured_ms",
                                          "measured_over_bound"]
    assert list(full["cache_vs_nocache"][0]) == ["tokens", "cache_ms", "nocache_ms", "ratio", "flops_ratio",
                                                 "identical"]
    assert full["serving"] == served and full["ratio_untraced"] == o.ratio_untraced
    assert json.loads(json.dumps(full)) == full  # plain JSON: no record left inside
    # no ladder asked for, and no app measured (--no-app): neither key written; an app run that failed: null
    short = Bench(o, bound, None, tuple(rows), served, (), None, False, "m", "cpu", "fp32", 1).to_dict()
    assert "ladder" not in short and "app_click" not in short
    failed = Bench(o, bound, None, tuple(rows), served, (), None, True, "m", "cpu", "fp32", 1).to_dict()
    assert failed["app_click"] is None


def test_the_app_click_measurement_crosses_the_process_boundary_unchanged():
    """benchmarks/app_click.py prints its record as JSON in a child process; the bench reads it back."""
    clicks = AppClick(context_tokens=100, click_ms_median=51.5, warmup_click_ms=300.2,
                      by_view={"stage": ViewClicks(51.5, 300.2), "attention": ViewClicks(60.1, 90.0)},
                      slowest_view="attention", lesson6_seed_ms=420.0)
    doc = json.loads(json.dumps(clicks.to_dict()))
    assert list(doc) == ["context_tokens", "click_ms_median", "warmup_click_ms", "by_view", "slowest_view",
                         "lesson6_seed_ms"]
    assert doc["by_view"]["attention"] == {"median_ms": 60.1, "warmup_click_ms": 90.0}
    assert AppClick.from_dict(doc) == clicks
