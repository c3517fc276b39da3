"""Every model family the engine claims to step, on tiny random models (see conftest.FAMILIES).

Hybrid attention is per layer: Gemma 2 alternates sliding-window (window 4) and full layers,
Gemma 3 has five sliding layers to one full one. How many positions a layer keeps is
transformers' DynamicSlidingWindowLayer rule (cache_utils: `update` appends the new keys and
the pass scores the last window - 1 of the old ones plus the new; the layer then keeps only its
last `window - 1`, at once in `update`, or at the engine's `crop(0)` since engine.forward.cache switches
on past recording so a pass can be rolled back):

    full layer:     kept(n) = n                    the newest query scores kv_len = n keys
    sliding layer:  kept(n) = min(n, window - 1)   the newest query scores min(n, window) keys
                                                   (the kept window - 1 plus its own)

where n is the number of positions in the sequence after the pass. Each run is 16 new tokens,
four times the window, so every sliding layer has slid many times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from commands.main import main as cli_main
from engine.forward import capture
from engine.generate.stepper import Stepper
from engine.load.load import load_model, read_config
from tests import reference
from tests.conftest import FAMILIES, SLIDING_WINDOW
from tests.reference import assert_logits_close

# One worker runs this module (pytest.ini's --dist loadgroup), in pytest's order, which keeps the tests of each
# family and prompt together: the module's `runs` (two engine runs and two of transformers' own, per family and
# prompt) is then built once each, instead of again whenever the tests a worker was handed alternate.
pytestmark = pytest.mark.xdist_group("families")

NEW_TOKENS = 16
PROMPTS = {
    "long": "Once upon a time there was a cat",  # 19 positions: the prefill already passes the window
    "short": "Tom",  # 3 positions (window - 1): the cache reaches the window while decoding
}
# Families whose attention engine.forward.capture reads off the real tensors (Q/K/V shapes "measured").
# Every family here routes attention through transformers' attention interface today; a family
# dropping out of this list would mean its shapes are only derived from the config.
CAPTURED = ("gpt2", "llama", "llama-mqa", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gpt_neox", "opt")
NOT_CAPTURED = ()
ELEM_BYTES = 4  # float32 on the CPU


def family_of(lm) -> str:
    return Path(lm.spec.name).name  # conftest saves each family in a folder named after it


def layer_rule(window: int | None, n: int) -> tuple[int, int]:
    """(kept, kv_len) of one layer after a pass that leaves n positions: the rule in the module docstring."""
    if window is None:
        return n, n
    return min(n, window - 1), min(n, window)


@pytest.fixture(scope="module", params=list(PROMPTS))
def runs(request, family_lm, family_dirs):
    """One NEW_TOKENS-token greedy run per cache setting, each step's logits, and transformers' own run of the same
    prompt on its own copy of the model (tests/reference.py), with the same cache setting."""
    prompt = PROMPTS[request.param]
    steppers, logits, references = {}, {}, {}
    for use_cache in (True, False):
        # the cache run times each pass as the app does (a warm-up and repeats, each rolled back: sliding layers
        # included); the no-cache run holds no cache to roll back, so one run per pass is enough
        s = Stepper(family_lm, prompt, use_cache=use_cache, max_new_tokens=NEW_TOKENS, stop_on_eos=False,
                    repeats=None if use_cache else 1)
        logits[use_cache] = []
        s.run(on_step=lambda trace, s=s, kept=logits[use_cache]: kept.append(s.last_logits))
        steppers[use_cache] = s
        prompt_ids = s.ids[:, :s.prompt_len]
        references[use_cache] = reference.greedy(family_dirs[family_of(family_lm)], prompt_ids, NEW_TOKENS, use_cache)
    return family_lm, steppers, (logits, references)


# ---------------------------------------------------------------- tokens and logits


def test_greedy_tokens_and_logits_with_and_without_cache_equal_transformers(runs):
    """At the prefill and at every decode step, cache on and off: the engine's token is transformers' token and its
    logits are transformers' logits (tests/reference.py: transformers' own copy of the model, its own attention)."""
    _, steppers, (logits, references) = runs
    for use_cache, s in steppers.items():
        theirs = references[use_cache]
        assert len(theirs.tokens) == NEW_TOKENS
        assert s.generated_ids == theirs.tokens
        assert len(logits[use_cache]) == NEW_TOKENS
        for step, (mine, expected) in enumerate(zip(logits[use_cache], theirs.logits)):
            assert_logits_close(mine, expected, f"{'prefill' if step == 0 else f'decode step {step}'}, "
                                                f"cache {'on' if use_cache else 'off'}")


# ---------------------------------------------------------------- KV cache, per layer


def test_sliding_layers_are_read_from_the_config(family_lm):
    windows = {"gemma2": (SLIDING_WINDOW, None) * 2, "gemma3": (SLIDING_WINDOW,) * 5 + (None,)}
    family = family_of(family_lm)
    assert family_lm.spec.windows == windows.get(family, ())
    assert [family_lm.spec.window(layer) for layer in range(family_lm.spec.layers)] == \
        list(windows.get(family, (None,) * family_lm.spec.layers))


def test_kv_shapes_keep_every_position_or_the_window(runs):
    """[batch, kv_head, pos, head_dim], pos = kept(layer, positions): capped at window - 1 for a sliding layer."""
    lm, steppers, _ = runs
    m = lm.spec
    capped = 0
    for t in steppers[True].records:
        for layer in t.layers:
            kept, kv_len = layer_rule(layer.window, t.kv_len)
            assert m.kept(layer.layer, t.kv_len) == kept
            assert layer.shapes["kv.keys"] == layer.shapes["kv.values"] == (1, m.kv_heads, kept, m.head_dim)
            assert layer.cached == kept
            assert layer.kv_len == kv_len  # keys the newest query scored
            capped += kept < t.kv_len
    assert (capped > 0) == (m.sliding_layers > 0)  # the sliding layers really did slide


def test_a_sliding_layer_keeps_the_last_positions_not_the_first(runs):
    """What a sliding layer holds is the tail of what a full cache would hold, position for position."""
    from transformers import DynamicCache

    lm, steppers, _ = runs
    s = steppers[True]
    every = DynamicCache()  # no config: every layer keeps every position
    with torch.inference_mode():
        lm.model(input_ids=s.ids[:, :-1], attention_mask=torch.ones_like(s.ids[:, :-1]),
                 past_key_values=every, use_cache=True)
    n = s.ids.shape[1] - 1
    for layer, (held, full) in enumerate(zip(s.cache.layers, every.layers)):
        kept = lm.spec.kept(layer, n)
        assert full.keys.shape[2] == n and held.keys.shape[2] == kept
        torch.testing.assert_close(held.keys, full.keys[:, :, n - kept:], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(held.values, full.values[:, :, n - kept:], rtol=1e-4, atol=1e-5)


def test_no_cache_holds_nothing_but_sliding_layers_still_read_only_their_window(runs):
    lm, steppers, _ = runs
    for t in steppers[False].records:
        assert t.kv_bytes == 0 and t.kv_shapes == ()
        assert all(layer.cached == 0 and layer.kv_len == layer_rule(layer.window, t.kv_len)[1] for layer in t.layers)


def test_kv_bytes_are_the_sum_over_layers_of_what_each_keeps(runs):
    """kv_bytes = sum over layers of 2 * kv_heads * head_dim * kept(layer) * 4 bytes (float32)."""
    lm, steppers, _ = runs
    m = lm.spec
    assert lm.elem_bytes == ELEM_BYTES
    for t in steppers[True].records:
        per_layer = [2 * m.kv_heads * m.head_dim * m.kept(layer, t.kv_len) * ELEM_BYTES for layer in range(m.layers)]
        assert list(t.kv_bytes_per_layer) == per_layer
        assert t.kv_bytes == sum(per_layer) == m.kv_bytes(t.kv_len, elem_bytes=ELEM_BYTES)


# ---------------------------------------------------------------- attention


def test_attention_rows_sum_to_one_over_the_visible_keys(runs):
    """Every kept row: weight 1 over keys at or before the query and inside the layer's window, 0 elsewhere."""
    lm, steppers, _ = runs
    for use_cache, s in steppers.items():
        for t in s.records:
            for layer in t.layers:
                att = layer.pattern.float()  # [head, query_pos, key_pos]
                heads, rows, width = att.shape
                assert heads == lm.spec.heads and rows == t.pattern_rows
                query = torch.arange(t.kv_len - rows, t.kv_len)[:, None]
                key = torch.arange(layer.key_start, layer.key_start + width)[None, :]
                visible = key <= query
                if layer.window is not None:
                    visible &= query - key < layer.window
                assert att[:, ~visible].abs().sum().item() == 0  # masked keys get no weight
                torch.testing.assert_close(att.sum(-1), torch.ones(heads, rows), rtol=0, atol=2e-3)
                assert int(visible[-1].sum()) == layer.kv_len  # the newest query sees kv_len keys
                if use_cache and t.phase == "decode":  # the layer scored only what it keeps plus the new key
                    assert width == layer.kv_len
                    assert layer.shapes["attn.pattern"] == (1, lm.spec.heads, 1, layer.kv_len)


# ---------------------------------------------------------------- measured or derived


def test_the_captured_families_are_the_listed_ones(family_dirs):
    assert set(CAPTURED) | set(NOT_CAPTURED) == set(FAMILIES)
    captured = tuple(f for f in FAMILIES if capture.supports(read_config(family_dirs[f])))
    assert captured == CAPTURED


def test_shapes_are_measured_where_attention_is_captured(runs):
    lm, steppers, _ = runs
    assert lm.captures == (family_of(lm) in CAPTURED)
    for s in steppers.values():
        for t in s.records:
            derived = [r.tensor for r in t.shapes if r.source == "derived"]
            if lm.captures:
                assert derived == []
                assert all(layer.measured for layer in t.layers)
            else:
                assert derived and all(".attn." in name for name in derived)


# ---------------------------------------------------------------- the command line, on Gemma 3


@pytest.mark.parametrize("cache_flag", [[], ["--no-cache"]])
def test_cli_run_on_gemma3_matches_generate_and_caps_sliding_layers(family_dirs, tmp_path, cache_flag):
    folder = family_dirs["gemma3"]
    out = tmp_path / "run.json"
    prompt = PROMPTS["long"]
    rc = cli_main(["run", "--model", folder, "--prompt", prompt, "--steps", str(NEW_TOKENS),
                   "--json", str(out), *cache_flag])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["use_cache"] is not bool(cache_flag)
    assert doc["model"]["windows"] == [SLIDING_WINDOW] * 5 + [None]

    tokenizer = load_model(folder, device="cpu").tokenizer
    expected = reference.greedy(folder, torch.tensor([tokenizer(prompt)["input_ids"]]), NEW_TOKENS).tokens
    # the CLI stops at EOS; this seeded model never picks it in NEW_TOKENS greedy steps, so all of them run
    assert tokenizer.eos_token_id not in expected
    assert [step["token_id"] for step in doc["steps"]] == expected
    assert doc["stop_reason"] == "max_new_tokens" and len(doc["steps"]) == NEW_TOKENS

    for step in doc["steps"]:
        n = step["kv_len"]
        assert len(step["layers"]) == 6
        for rec in step["layers"]:
            kept, kv_len = layer_rule(rec["window"], n)
            assert rec["kv_len"] == kv_len
            assert rec["cached"] == (kept if doc["use_cache"] else 0)
            if rec["window"] is None:
                assert rec["layer"] == 5 and rec["kv_len"] == n  # the full layer is never capped
            else:
                assert rec["kv_len"] <= SLIDING_WINDOW
        if doc["use_cache"]:
            assert step["kv_bytes"] == sum(rec["kv_bytes"] for rec in step["layers"])
    last = doc["steps"][-1]
    assert [rec["kv_len"] for rec in last["layers"]] == [SLIDING_WINDOW] * 5 + [last["kv_len"]]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.slow
def test_the_pages_render_with_the_family(family, family_dirs, monkeypatch):
    """A server started with `--model DIR` offers the family; the step page, its views, a lesson and the
    Model and Scale pages render with it."""
    import ui.model
    from engine.load.policy import from_settings
    from ui.apptest import app_test, page

    monkeypatch.setattr(ui.model, "POLICY", from_settings(["--model", family_dirs[family]], {}))
    at = app_test().run()
    at.sidebar.selectbox(key="side_model").set_value(family_dirs[family]).run()
    at.text_input(key="step_prompt").set_value("Once upon a time there was").run()
    at.button(key="step_btn_prefill").click().run()
    for _ in range(6):  # past the sliding window of 4
        at.button(key="step_btn_next").click().run()
    for view in ("Attention", "Matmuls", "KV cache", "Shapes"):
        at.session_state["step_view"] = view
        at.run()
        assert not at.exception and not at.error, (family, view, [e.value for e in at.exception])
    assert any("7 new tokens" in m.value for m in at.markdown)
    for name in ("model_info", "scale", "lessons"):
        at.switch_page(page(name)).run()
        assert not at.exception and not at.error, (family, name, [e.value for e in at.exception])
