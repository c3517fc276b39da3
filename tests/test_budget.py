"""The KV cache on a budget (topics/budget): each claim checked against a reference the code under test did not
compute: transformers' own copy of the model (tests/reference.py: its own eager attention, no engine in it), its
generate, forward pass and DynamicCache, its fp8 cache layer, and the tensors themselves."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import Fp8QuantizedLayer

from engine.errors import StepError
from engine.generate.stepper import Stepper
from engine.load.load import DEFAULT_MODEL, MODELS_DIR, load_model
from engine.paths import ASSETS
from tests import reference
from topics.budget.measure import compare_policies, forced_logprobs, held_out_ids, ranking, sink_mass
from topics.budget.policies import EVICTING, POLICIES, BudgetCache, budget_cache, check
from topics.budget.quant import GROUP, Fp8, Kivi

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside."
NEW = 24
BUNDLED = MODELS_DIR / DEFAULT_MODEL


def their_model():
    """transformers' own copy of the bundled model (not the engine's: no decode_lab attention in it)."""
    return reference.model(str(BUNDLED))


def tensor_bytes(obj, seen=None) -> int:
    """Bytes of every distinct tensor reachable from obj's attributes (K and V rows, codes, scales, zero points),
    bookkeeping (positions, scores) left out: counted from the tensors, not by the cache's own nbytes()."""
    seen = set() if seen is None else seen
    total = 0
    for name, value in vars(obj).items():
        if name in ("positions", "scores"):
            continue
        if isinstance(value, torch.Tensor):
            if value.numel() and value.data_ptr() not in seen:
                seen.add(value.data_ptr())
                total += value.numel() * value.element_size()
        elif dataclasses.is_dataclass(value):
            total += tensor_bytes(value, seen)
    return total


def dynamic_cache_bytes(ids: list[int], dtype=torch.float32) -> int:
    """transformers' own DynamicCache after one pass of its own copy (eager attention, in `dtype`) over ids: K and V
    bytes from its tensors."""
    from transformers import AutoModelForCausalLM

    m = their_model() if dtype == torch.float32 else AutoModelForCausalLM.from_pretrained(
        BUNDLED, attn_implementation="eager", dtype=dtype, use_safetensors=True).eval()
    cache = DynamicCache(config=m.config)
    with torch.inference_mode():
        m(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers)


@pytest.fixture(scope="module")
def full_run(bundled_lm):
    """transformers' own greedy generate from PROMPT on its own copy: the full cache's tokens and logits."""
    ids = torch.tensor([bundled_lm.tokenizer(PROMPT)["input_ids"]])
    return ids.shape[1], reference.greedy(BUNDLED, ids, NEW)


# ---------------------------------------------------------------- a budget with room for everything changes nothing


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_budget_that_holds_the_whole_sequence_gives_the_full_caches_tokens(bundled_lm, full_run, policy):
    prompt_len, full = full_run
    budget = prompt_len + NEW  # every position the run will ever see
    run = Stepper(bundled_lm, PROMPT, make_cache=budget_cache(bundled_lm, policy, budget), max_new_tokens=NEW,
                  record=False, stop_on_eos=False)
    logits = []
    while not run.done:  # the prefill chooses the first new token, each decode one more
        run.step()
        logits.append(run.last_logits)
    assert run.generated_ids == full.tokens
    for i, (mine, their) in enumerate(zip(logits, full.logits)):
        reference.assert_logits_close(mine, their, f"{policy}, step {i}")
    assert isinstance(run.cache, BudgetCache) == (policy != "full")


@pytest.mark.parametrize("policy", list(EVICTING))
def test_evicting_on_learned_positions_too_gpt2(family_model, family_dirs, policy):
    """GPT-2 adds a learned position embedding instead of rotating: a held position still keeps its own."""
    lm = family_model("gpt2")
    run = Stepper(lm, "Once upon a time there was a cat.", make_cache=budget_cache(lm, policy, 40),
                  max_new_tokens=20, record=False, stop_on_eos=False)
    full = reference.greedy(family_dirs["gpt2"], run.ids, 20)
    run.run()
    assert len(run) <= 40 and run.generated_ids == full.tokens


# ---------------------------------------------------------------- what the policies hold


def test_each_eviction_rule_holds_the_positions_it_names(bundled_lm):
    ids = held_out_ids(bundled_lm, 96)
    budget = 32
    for policy in EVICTING:
        _, cache = forced_logprobs(bundled_lm, policy, budget, ids, 64)
        for layer in cache.layers:
            held = layer.positions[0]  # [kv_head, held]
            assert held.shape[-1] == budget and layer.keys.shape[-2] == budget
            for head in held.tolist():
                assert head == sorted(head)
                if policy == "window":
                    assert head == list(range(96 - budget, 96))
                if policy == "sinks":
                    assert head == [0, 1, 2, 3] + list(range(96 - budget + 4, 96))
                if policy == "heavy":  # the recent half, whatever the scores
                    assert set(range(96 - budget // 2, 96)) <= set(head)
                if policy == "snap":  # every position decoded after the 64-position prefill is newer than the budget
                    assert head == list(range(96 - budget, 96))


def test_snap_keeps_its_observation_window_and_every_position_decoded_after_it(bundled_lm):
    ids = held_out_ids(bundled_lm, 70)
    _, cache = forced_logprobs(bundled_lm, "snap", 32, ids, 64)  # a 64-position prefill, then 6 decode steps
    for layer in cache.layers:
        for head in layer.positions[0].tolist():
            assert set(range(64 - 16, 70)) <= set(head)  # the last 16 prompt positions (the window) and 64..69
            assert len(head) == 32


def test_held_keys_keep_their_original_rotation(bundled_lm):
    """A held key is the key transformers' own cache holds at that position: rotated once, by its true position,
    never re-rotated by its slot in the cache (StreamingLLM's way). Layer 0's keys depend on the token and its
    position only, so there the two runs must agree whatever was evicted."""
    ids = held_out_ids(bundled_lm, 80)
    full = DynamicCache(config=their_model().config)
    with torch.inference_mode():
        their_model()(torch.tensor([ids]), past_key_values=full, use_cache=True)
    _, cache = forced_logprobs(bundled_lm, "sinks", 24, ids, 40)
    mine, theirs = cache.layers[0], full.layers[0]
    where = mine.positions[0, 0]
    assert where.tolist() == [0, 1, 2, 3] + list(range(60, 80))
    assert torch.allclose(mine.keys[0, 0], theirs.keys[0, 0, where], atol=1e-5)
    assert not torch.allclose(mine.keys[0, 0, 4:], theirs.keys[0, 0, 4:24], atol=1e-2)  # slot order: other keys
    assert mine.get_seq_length() == 80  # the next position is numbered 80, not 24


# ---------------------------------------------------------------- quantized: bytes and damage


def test_the_fp8_codec_rounds_as_transformers_fp8_layer_does():
    torch.manual_seed(0)
    keys, values = torch.randn(1, 2, 40, 32) * 3, torch.randn(1, 2, 40, 32)
    theirs = Fp8QuantizedLayer()
    theirs.update(keys, values)
    k2, v2 = theirs.update(keys[:, :, :1] * 0.5, values[:, :, :1] * 0.5)  # returns everything, dequantized
    codec = Fp8()
    mine_k = codec.unpack(codec.pack(keys, True).then(codec.pack(keys[:, :, :1] * 0.5, True)), torch.float32)
    mine_v = codec.unpack(codec.pack(values, False).then(codec.pack(values[:, :, :1] * 0.5, False)), torch.float32)
    assert torch.equal(mine_k, k2) and torch.equal(mine_v, v2)
    assert not torch.equal(mine_k, torch.cat([keys, keys[:, :, :1] * 0.5], dim=2))  # it did round


@pytest.mark.parametrize("bits", [8, 4])
def test_kivi_rounds_each_number_to_within_half_a_step_and_int4_packs_two_a_byte(bits):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 2 * GROUP, 32)
    codec = Kivi(bits)
    for keys in (True, False):
        packed = codec.pack(x, keys)
        back = codec.unpack(packed, torch.float32)
        step = packed.scale.float()
        step = step.expand(1, 2, 2, GROUP, 32).reshape(x.shape) if keys else step.expand_as(x)
        assert ((back - x).abs() <= step / 2 + 2e-3 * x.abs().max()).all()  # fp16 scales and zero points
        assert packed.codes.numel() == x.numel() * bits // 8


FP8_WINDOW = 16  # fp8 keeps the newest 16 positions exact (a residual window, as transformers' quantized cache keeps)


def test_fp8_holds_at_most_55_percent_of_bf16_and_30_percent_of_fp32(bundled_lm):
    """fp8 with its 16-position residual window, against transformers' DynamicCache in bf16 and in fp32, after 256
    positions of the held-out text."""
    bf16 = load_model("default", device="cpu", dtype="bfloat16")
    for lm, dtype, share in ((bf16, torch.bfloat16, 0.55), (bundled_lm, torch.float32, 0.30)):
        ids = held_out_ids(lm, 256)
        _, cache = forced_logprobs(lm, "fp8", FP8_WINDOW, ids, 128)
        held = sum(tensor_bytes(layer) for layer in cache.layers)
        assert held == cache.nbytes()
        assert held <= share * dynamic_cache_bytes(ids, dtype), lm.dtype_name


def test_fp8_agrees_with_the_full_cache_on_98_percent_of_held_out_tokens(bundled_lm):
    """The same fp8 cache, teacher-forced over four 256-token windows of the held-out stories (128 prefilled, 128
    fed one a step: 512 next tokens in all): its top-1 token is the full cache's on at least 98 % of them, the full
    cache's being transformers' own forward pass over each window. (Every position but one in fp8, this model
    agrees on about 97 %: a few near-ties flip.)"""
    text = (ASSETS / "held_out" / "tinystories_eval_40.txt").read_text(encoding="utf-8")
    every = bundled_lm.tokenizer(text, verbose=False)["input_ids"]
    agree = total = 0
    for w in range(4):
        ids = every[w * 256:(w + 1) * 256]
        with torch.inference_mode():
            full = their_model()(torch.tensor([ids])).logits[0, 128:].float()  # the next token after 128..255
        logp, cache = forced_logprobs(bundled_lm, "fp8", FP8_WINDOW, ids, 128)
        assert cache.layers[0].quantized == 256 - FP8_WINDOW
        agree += int((logp.argmax(-1) == full.argmax(-1)).sum())
        total += len(full)
    assert total == 512 and agree / total >= 0.98, agree / total


# ---------------------------------------------------------------- evicting at a quarter of the context


def test_at_a_quarter_of_256_positions_the_eviction_policies_are_measured_and_ranked(bundled_lm):
    rows = compare_policies(bundled_lm, ("full", *EVICTING), budget=64, context=256, new_tokens=4)
    by = {r.policy: r for r in rows}
    full_bytes = dynamic_cache_bytes(held_out_ids(bundled_lm, 256))
    assert by["full"].cache.bytes_held == full_bytes and by["full"].forced.agreement == 1.0
    for policy in EVICTING:
        r = by[policy]
        assert r.cache.bytes_held * 4 == full_bytes  # 64 of 256 positions, measured
        assert len(r.forced.agree) == 128 and r.forced.agreement < 1.0 and r.forced.kl_mean > 0
    order = ranking(rows)
    assert sorted(order) == sorted(EVICTING)
    agreement = [by[p].forced.agreement for p in order]
    assert agreement == sorted(agreement, reverse=True)


# ---------------------------------------------------------------- the attention sink


def test_the_sink_is_measured_per_layer_from_the_models_own_attention(bundled_lm):
    rows = sink_mass(bundled_lm, context=128, from_pos=32)
    assert [r.layer for r in rows] == list(range(bundled_lm.spec.layers))
    ids = held_out_ids(bundled_lm, 128)
    with torch.inference_mode():
        attentions = their_model()(torch.tensor([ids]), output_attentions=True).attentions
    for r, a in zip(rows, attentions):
        assert r.mass == pytest.approx(a[0, :, 32:, 0].float().mean().item(), rel=1e-4)
        assert r.uniform == pytest.approx(sum(1 / (q + 1) for q in range(32, 128)) / 96)
        assert r.rows == 96


# ---------------------------------------------------------------- refused in plain words


@pytest.mark.parametrize("policy, budget, says", [
    ("window", 0, "at least 1 position"),
    ("heavy", -8, "at least 1 position"),
    ("int4", 100_000, "context window (512 positions)"),
    ("lru", 64, "Unknown policy 'lru'"),
    ("window", "64", "whole number"),
    ("sinks", 4, "at least 5"),
    ("snap", None, "needs a budget"),
])
def test_bad_input_is_refused_in_plain_words(bundled_lm, policy, budget, says):
    with pytest.raises(StepError, match=says.replace("(", r"\(").replace(")", r"\)")):
        check(bundled_lm, policy, budget)


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "full"])
def test_sliding_window_layers_are_refused_in_plain_words(family_model, policy):
    lm = family_model("gemma2")
    with pytest.raises(StepError, match="sliding-window layers"):
        budget_cache(lm, policy, 16)
    assert budget_cache(lm, "full", None)  # the full cache is the model's own: always there


def test_the_cli_refuses_in_one_line_before_loading_a_model(capsys, tmp_path, monkeypatch):
    import engine.load.load
    from commands.main import main

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(engine.load.load, "load_model", refuse)
    for argv in (["--policy", "window", "--budget", "0"], ["--policy", "lru"], ["--policy", "all", "--budget", "-1"],
                 ["--policy", "sinks", "--budget", "2"], ["--policy", "int4", "--json", str(tmp_path / "no" / "x")]):
        assert main(["budget", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_the_cli_prints_the_numbers_and_writes_them(capsys, tmp_path):
    from commands.main import main

    assert main(["budget", "--policy", "window", "--budget", "100000"]) == 2  # over this model's 512 positions
    assert "context window (512 positions)" in capsys.readouterr().err
    out = tmp_path / "b.json"
    assert main(["budget", "--policy", "int8", "--budget", "16", "--context", "48", "--new-tokens", "4",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "int8" in text and "bytes held" in text and "agree" in text
    assert out.exists()


# ---------------------------------------------------------------- the pictures say what the record says


def test_the_cache_picture_greys_what_was_evicted_and_hatches_what_was_quantized(bundled_lm):
    from topics.budget.draw import cache_svg
    from topics.budget.measure import cache_map, full_bytes

    ids = held_out_ids(bundled_lm, 96)
    _, full = forced_logprobs(bundled_lm, "full", None, ids, 64)
    for policy, state, first in (("window", "evicted", 64), ("int8", "quantized", 96 - 32)):
        _, cache = forced_logprobs(bundled_lm, policy, 32, ids, 64)
        cmap = cache_map(bundled_lm, cache, policy, 32, 96, full_bytes(full), 64)
        svg = cache_svg(cmap)
        # one run of cells per layer: positions 0 .. first-1 in that state
        assert svg.count(f'data-state="{state}" data-start="0" data-length="{first}"') == bundled_lm.spec.layers
        assert cmap.bytes_held == cache.nbytes() and cmap.bytes_full == full_bytes(full)


@pytest.mark.slow
def test_the_page_measures_a_scenario_and_refuses_bad_input_without_losing_the_session(bundled_lm):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    page = Path(__file__).resolve().parent.parent / "pages" / "budget.py"  # the door: topics/budget/page.py show()
    at = AppTest.from_file(str(page), default_timeout=300)
    at.session_state["settings"], at.session_state["lm"] = None, bundled_lm  # what app.py's frame provides
    at.run()
    assert not at.exception and not at.error
    at.button(key="budget_scenario_a window forgets the name").click().run()
    said = next(m.value for m in at.markdown if m.value.startswith("Holds "))
    assert "Holds **128.0 KiB** of the full cache's 512.0 KiB (**25%**" in said and "texts part at step" in said
    charts = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert any("Damage against the budget" in c for c in charts)  # on the first screen, before any button
    at.selectbox(key="budget_policy").set_value("sinks")
    at.slider(key="budget_budget").set_value(3).run()
    assert not at.exception and "at least 5" in at.error[0].value
    at.slider(key="budget_budget").set_value(64).run()
    assert not at.error and any(m.value.startswith("Holds ") for m in at.markdown)
