"""The engine's claims, on tiny random GPT-2 (MHA) and Llama (GQA) models."""

from __future__ import annotations

import json

import pytest
import torch

from commands.main import main as cli_main
from engine import Sampling, StepError, Stepper, compare

PROMPT = "Once upon a time there was a cat"


# "greedy tokens with and without the cache equal transformers' generate" is checked for every family,
# GPT-2 and Llama included, in tests/test_families.py


def test_cache_and_no_cache_logits_agree_in_fp32(tiny_lm):
    rep = compare(tiny_lm, PROMPT, new_tokens=10)
    assert rep.identical
    assert rep.max_logit_diff < 1e-4
    assert len(rep.latency_ms["cache"]) == len(rep.latency_ms["nocache"])


def test_prefill_attention_is_causal_and_rows_sum_to_one(tiny_lm):
    s = Stepper(tiny_lm, PROMPT)
    t = s.prefill()
    n = s.prompt_len
    for layer in t.layers:
        att = layer.pattern.float()  # [head, query_pos, key_pos]
        assert att.shape == (tiny_lm.spec.heads, n, n) and layer.key_start == 0
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        assert att[..., future].abs().max() == 0
        assert torch.allclose(att.sum(-1), torch.ones(att.shape[:-1]), atol=2e-3)


@pytest.mark.parametrize("use_cache", [True, False])
def test_decode_attention_is_one_new_row_per_layer(tiny_lm, use_cache):
    s = Stepper(tiny_lm, PROMPT, use_cache=use_cache)
    s.prefill()
    for _ in range(3):
        t = s.decode()
        assert all(layer.pattern.shape == (tiny_lm.spec.heads, 1, t.kv_len) for layer in t.layers)
        assert len(t.layers) == tiny_lm.spec.layers
        assert t.kv_len == s.ids.shape[1] - 1
        assert t.q_len == (1 if use_cache else t.kv_len)


def test_kv_bytes_match_formula_and_grow_by_one_position(tiny_lm):
    m = tiny_lm.spec
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=8, stop_on_eos=False)
    traces = s.run()
    elem = torch.finfo(tiny_lm.dtype).bits // 8
    for t in traces:
        assert t.kv_bytes == m.layers * 2 * 1 * m.kv_heads * t.kv_len * m.head_dim * elem
        assert all(shape == (1, m.kv_heads, t.kv_len, m.head_dim) for shape in t.kv_shapes)
    lengths = [t.kv_shapes[0][2] for t in traces]
    assert lengths == list(range(lengths[0], lengths[0] + len(traces)))


def test_no_cache_holds_no_kv_bytes(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, use_cache=False, max_new_tokens=4)
    assert all(t.kv_bytes == 0 and t.kv_shapes == () for t in s.run())


def test_gqa_model_has_fewer_kv_heads(tiny_dirs):
    from engine import load_model

    assert load_model(tiny_dirs["llama"]).spec.attention == "GQA"
    assert load_model(tiny_dirs["gpt2"]).spec.attention == "MHA"


def test_shapes_contrast_prefill_with_decode(tiny_lm):
    s = Stepper(tiny_lm, PROMPT)
    pre, dec = s.prefill(), s.decode()
    m = tiny_lm.spec
    every = "{0..%d}" % (m.layers - 1)
    shape = {t.phase: {r.tensor: r.shape for r in t.shapes} for t in (pre, dec)}
    assert shape["prefill"][f"blocks.{every}.resid_in"] == (1, s.prompt_len, m.d_model)
    assert shape["decode"][f"blocks.{every}.resid_in"] == (1, 1, m.d_model)
    assert shape["prefill"][f"blocks.{every}.attn.q"] == (1, m.heads, s.prompt_len, m.head_dim)
    assert shape["decode"][f"blocks.{every}.attn.q"] == (1, m.heads, 1, m.head_dim)
    assert shape["decode"][f"blocks.{every}.attn.k"] == (1, m.kv_heads, 1, m.head_dim)
    assert shape["decode"][f"blocks.{every}.kv.keys"] == (1, m.kv_heads, s.prompt_len + 1, m.head_dim)
    assert all(r.source == "measured" for t in (pre, dec) for r in t.shapes)  # nothing derived from the config


def test_same_seed_same_sample_and_cache_setting_does_not_change_it(tiny_lm):
    def sample(seed, use_cache):
        s = Stepper(tiny_lm, PROMPT, use_cache=use_cache, max_new_tokens=10, stop_on_eos=False,
                    sampling=Sampling(greedy=False, temperature=1.5, top_k=50, top_p=0.95, seed=seed))
        s.run()
        return s.generated_ids

    assert sample(1, True) == sample(1, True) == sample(1, False)
    assert sample(1, True) != sample(2, True)


def test_warpers_change_the_distribution(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, sampling=Sampling(greedy=False, top_k=2, seed=0))
    t = s.prefill()
    assert sum(c.p_after > 0 for c in t.top) == 2
    assert abs(sum(c.p_after for c in t.top) - 1) < 1e-5
    assert t.token_id in [c.token_id for c in t.top if c.p_after > 0]


def test_stop_reasons(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=3, stop_on_eos=False)
    s.run()
    assert s.stop_reason == "max_new_tokens" and len(s.generated_ids) == 3

    s = Stepper(tiny_lm, PROMPT, max_new_tokens=50, stop_on_eos=False)
    s.prefill()
    first_piece = tiny_lm.tokenizer.decode([s.records[0].token_id])  # its text (a byte shows as ⟨hex⟩ on screen)
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=50, stop_strings=[first_piece], stop_on_eos=False)
    s.run()
    assert s.stop_reason == "stop_string" and len(s.generated_ids) == 1

    limit = tiny_lm.spec.max_positions
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=200, stop_on_eos=False)
    s.run()
    assert s.stop_reason == "context_limit" and s.ids.shape[1] == limit


def test_eos_stops_the_run(tiny_lm):
    eos = tiny_lm.tokenizer.eos_token_id
    forced_eos = Sampling(greedy=True, repetition_penalty=1.0)
    s = Stepper(tiny_lm, PROMPT, sampling=forced_eos, max_new_tokens=20)
    s.chooser.processors.append(lambda ids, scores: torch.where(torch.arange(scores.shape[-1])[None] == eos, 1e9, -1e9))
    s.prefill()
    assert s.stop_reason == "eos"
    with pytest.raises(StepError, match="finished"):
        s.decode()


@pytest.mark.parametrize("prompt, message", [("", "empty"), ("   \n\t", "empty"), ("x" * 60_000, "characters")])
def test_bad_prompts_get_clear_errors(tiny_lm, prompt, message):
    with pytest.raises(StepError, match=message):
        Stepper(tiny_lm, prompt)


def test_prompt_longer_than_context_is_refused(tiny_lm):
    with pytest.raises(StepError, match="positions"):
        Stepper(tiny_lm, "the cat " * 200)


def test_one_prompt_limit_for_the_box_and_a_link_and_a_link_that_long_fits_nginx(tiny_lm):
    """MAX_PROMPT_CHARS is defined once (engine/generate/loop.py): the prompt box and a link refuse the same length and
    say the limit; a link with a prompt that long still fits nginx's default 8 KiB request line."""
    from urllib.parse import quote, urlencode

    from engine.generate import loop
    from topics.serving.scenarios import LONG
    from ui.link_codec import MAX_PROMPT_CHARS, make_link, read_link

    assert loop.MAX_PROMPT_CHARS is MAX_PROMPT_CHARS
    too_long = "x" * (MAX_PROMPT_CHARS + 1)
    with pytest.raises(StepError, match=f"the limit is {MAX_PROMPT_CHARS:,} characters"):
        Stepper(tiny_lm, too_long)
    settings, problems = read_link({"prompt": too_long})
    assert "prompt" not in settings and f"longer than {MAX_PROMPT_CHARS:,} characters" in problems[0]
    prose = (LONG + "\n") * (MAX_PROMPT_CHARS // len(LONG) + 1)  # story text with punctuation and newlines
    link = make_link({"model": "tinystories-llama", "prompt": prose[:MAX_PROMPT_CHARS], "rule": "sample",
                      "temperature": 0.8, "top_k": 50, "top_p": 0.95, "seed": 123456, "max_new_tokens": 512,
                      "stop": ".,!", "cache": "off", "steps": 512, "at": 511, "presenter": "on"})
    values, problems = read_link(link)
    assert problems == [] and values["prompt"] == prose[:MAX_PROMPT_CHARS]
    query = urlencode(link, quote_via=quote)  # spaces as %20, the longer of the two ways a browser writes them
    assert len(f"GET /step_through?{query} HTTP/1.1".encode()) < 8 * 1024


def test_decode_before_prefill_and_double_prefill_are_refused(tiny_lm):
    s = Stepper(tiny_lm, PROMPT)
    with pytest.raises(StepError, match="Prefill first"):
        s.decode()
    s.prefill()
    with pytest.raises(StepError, match="already"):
        s.prefill()


@pytest.mark.parametrize("settings, message", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top-p"), (dict(top_p=1.5), "top-p"), (dict(top_k=10**6), "larger than the vocabulary"),
    (dict(top_k=-3), "top-k"), (dict(seed="abc"), "seed"), (dict(repetition_penalty=0.0), "repetition"),
])
def test_bad_sampling_settings_get_clear_errors(tiny_lm, settings, message):
    with pytest.raises(StepError, match=message):
        Stepper(tiny_lm, PROMPT, sampling=Sampling(greedy=False, **settings))


@pytest.mark.parametrize("n, message", [(0, "at least 1"), (-5, "at least 1"), (10**7, "capped"), ("ten", "whole")])
def test_bad_max_new_tokens_get_clear_errors(tiny_lm, n, message):
    with pytest.raises(StepError, match=message):
        Stepper(tiny_lm, PROMPT, max_new_tokens=n)


def test_temperature_zero_means_greedy(tiny_lm):
    a = Stepper(tiny_lm, PROMPT, sampling=Sampling(greedy=False, temperature=0.0), max_new_tokens=5)
    b = Stepper(tiny_lm, PROMPT, sampling=Sampling(greedy=True), max_new_tokens=5)
    a.run(), b.run()
    assert a.generated_ids == b.generated_ids


def test_latency_and_estimates_are_recorded(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, use_cache=False, max_new_tokens=6, stop_on_eos=False)
    traces = s.run()
    assert all(t.forward_ms > 0 and t.sample_ms >= 0 for t in traces)
    # each step is the median of 3 timed repeats of the same pass; the run before them is the warm-up, kept apart
    assert all(t.timing.repeats == 3 and t.timing.warmup_ms is not None for t in traces)
    assert all(t.timing.low_ms <= t.forward_ms <= t.timing.high_ms for t in traces)
    flops = [t.flops_estimate for t in traces[1:]]
    assert flops == sorted(flops) and flops[-1] > flops[0]  # no-cache work grows every step


def test_cli_run_writes_the_documented_json(tiny_dirs, tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = cli_main(["run", "--model", tiny_dirs["llama"], "--prompt", PROMPT, "--steps", "4", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert {"model", "text", "stop_reason"} <= doc.keys()
    for key in ("phase", "step", "q_len", "kv_len", "token_id", "token", "kv_bytes", "kv_shapes", "shapes",
                "latency_ms", "flops_estimate"):
        assert key in doc["steps"][0]
    assert [s["phase"] for s in doc["steps"]] == ["prefill", "decode", "decode", "decode"]
    assert "kv_len" in capsys.readouterr().out
    for step in doc["steps"]:  # Q, K, V read off the real tensors of every layer, nothing derived
        assert len(step["layers"]) == 2 and all(layer["source"] == "measured" for layer in step["layers"])
        assert all({"attn.q", "attn.k", "attn.v", "kv.keys"} <= layer["shapes"].keys() for layer in step["layers"])
        assert {r["source"] for r in step["shapes"]} == {"measured"}
    assert doc["steps"][1]["layers"][0]["shapes"]["attn.q"] == [1, 4, 1, 8]  # [batch, head, query_pos, head_dim]


def test_cli_compare_reports_identical_tokens(tiny_dirs, tmp_path):
    out = tmp_path / "cmp.json"
    assert cli_main(["compare", "--model", tiny_dirs["gpt2"], "--prompt", PROMPT, "--steps", "6", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["identical"] is True and doc["max_logit_diff"] < 1e-4 and "speedup" in doc


def test_cli_bad_model_is_a_clear_error_not_a_traceback(capsys):
    assert cli_main(["run", "--model", "no-such-org/no-such-model", "--prompt", "hi"]) == 2
    assert "Could not find" in capsys.readouterr().err


def test_the_exported_trace_round_trips_through_json(tiny_lm):
    s = Stepper(tiny_lm, "hello world", max_new_tokens=6)
    s.run()
    doc = json.loads(json.dumps(s.report(), default=str))
    assert [st["token_id"] for st in doc["steps"]] == [t.token_id for t in s.records]
    assert [[r["shape"] for r in st["shapes"]] for st in doc["steps"]] == \
        [[list(r.shape) for r in t.shapes] for t in s.records]
    assert doc["text"] == s.text and doc["stop_reason"] == "max_new_tokens"
    assert [st["q_len"] for st in doc["steps"]] == [s.prompt_len, 1, 1, 1, 1, 1]


def test_serving_threads_leave_the_browser_a_core():
    from physics.machine import serving_threads

    assert serving_threads(4_000_000, cores=8) == 1  # a tiny model: one thread is as fast, and never stalls
    assert serving_threads(500_000_000, cores=8) == 7  # a big one: every core but one
    assert serving_threads(500_000_000, cores=1) == 1


def test_cached_keys_and_values_equal_a_full_recomputation_on_the_bundled_model(bundled_lm):
    """Why the cache is exact: the K and V it holds for old positions are what recomputing them gives."""
    from engine.generate.compare import kv_reuse

    s = Stepper(bundled_lm, "Tom had a red ball. Tom liked to play with the ball.", max_new_tokens=12,
                stop_on_eos=False)
    s.run()
    proof = kv_reuse(bundled_lm, s.ids, s.cache)
    assert proof.positions == s.ids.shape[1] - 1 and len(proof.layers) == bundled_lm.spec.layers
    assert proof.max_key_diff < 1e-4 and proof.max_value_diff < 1e-4
    # and no step after the prefill computed a query for any position but its own new one
    assert all(t.layers[0].shapes["attn.q"][2] == 1 for t in s.records[1:])
