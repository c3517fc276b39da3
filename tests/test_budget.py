"""The KV cache on a budget (topics/budget): each claim checked against a reference the code under test did not
compute: transformers' own copy of the model (tests/reference.py: its own eager attention, no engine in it), its
generate, forward pass and DynamicCache, its fp8 cache layer, hand-written H2O, SnapKV and KIVI (below, from their
papers' rules), KL and agreement recomputed by hand, and the tensors themselves."""

from __future__ import annotations

import dataclasses
import html
import math
import re
import statistics

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import Fp8QuantizedLayer

from engine.errors import StepError
from engine.forward.run import run_pass
from engine.generate.stepper import Stepper
from engine.load.load import DEFAULT_MODEL, MODELS_DIR, load_model
from engine.paths import ASSETS
from tests import reference
from topics.budget.measure import compare_forced, compare_policies, forced_logprobs, held_out_ids, ranking, sink_mass
from topics.budget.policies import CAPPED, EVICTING, POLICIES, BudgetCache, budget_cache, check
from topics.budget.quant import GROUP, Fp8, Kivi, QuantizedLayer

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


# ---------------------------------------------------------------- hand-written references: H2O, SnapKV, KIVI

SINKS, OBSERVATION, KERNEL = 4, 16, 5  # StreamingLLM's 4 sinks; SnapKV's window (scaled) and kvpress's kernel


def snap_window(budget: int, prompt: int) -> int:
    """The observation window the module docstring promises: 16 queries, at most half the budget, before the end."""
    return max(1, min(OBSERVATION, budget // 2, prompt - 1))


def hand_snap_scores(att: torch.Tensor, heads: range, prefix: int, window: int) -> list[float]:
    """SnapKV's score of each prefix position, by its paper's rule: for each head, the last `window` queries'
    attention to the prefix averaged over those queries, then the mean over KERNEL neighbours with zero padding
    counted (avg_pool1d's default in FasterDecoding/SnapKV and kvpress), written out here in plain Python, then the
    mean over the heads that share the kv_head."""
    per_head = []
    for h in heads:
        seen = att[h, -window:, :prefix].mean(dim=0).tolist()  # the observation window's queries, averaged
        per_head.append([sum(seen[k] for k in range(j - KERNEL // 2, j + KERNEL // 2 + 1) if 0 <= k < prefix) / KERNEL
                         for j in range(prefix)])
    return [sum(column) / len(heads) for column in zip(*per_head)]


@dataclasses.dataclass
class HandRun:
    logp: torch.Tensor  # [passes, vocab] log-probs of each pass's last row: the prefill's, then each decode's
    held: list  # per pass: [layer][kv_head] -> the positions held after it, sorted


def hand_evict(rule: str, ids: list[int], prompt: int, budget: int) -> HandRun:
    """Each eviction rule written out from its paper, run on transformers' own copy of the model.

    The model's own DynamicCache holds the keys and values; after each pass this loop reads every layer's attention
    (output_attentions, transformers' eager function), scores the positions in plain Python, keeps what the rule
    keeps, and gathers the cache down to those rows; the next pass is told its true positions (position_ids).

        window       the last B
        sinks        positions 0-3, then the newest
        heavy        H2O: the attention each position has received, summed over every query and every head that
                     shares its kv_head; the newest B/2 protected, then the highest sums (ties: the newer)
        heavy-avg    the same, the sum averaged over those heads and divided by the queries that could see the
                     position (kvpress's ObservedAttentionPress)
        snap         SnapKV at the prefill (its window always kept, the rest by hand_snap_scores), never after
        snap-capped  the same prefill, then at most B: decoded positions protected, the prompt's lowest scores out
    """
    m = their_model()
    cfg = m.config
    layers, kv_heads = cfg.num_hidden_layers, cfg.num_key_value_heads
    group = cfg.num_attention_heads // kv_heads
    cache = DynamicCache(config=cfg)
    held = [[[] for _ in range(kv_heads)] for _ in range(layers)]
    score = [[{} for _ in range(kv_heads)] for _ in range(layers)]
    seen, logps, states = 0, [], []
    for chunk in [ids[:prompt]] + [[t] for t in ids[prompt:]]:
        new = list(range(seen, seen + len(chunk)))
        with torch.inference_mode():
            out = m(torch.tensor([chunk]), past_key_values=cache, position_ids=torch.tensor([new]),
                    output_attentions=True, use_cache=True)
        seen += len(chunk)
        logps.append(torch.log_softmax(out.logits[0, -1].float(), dim=-1))
        for layer in range(layers):
            att = out.attentions[layer][0].float()  # [head, query_pos, key_pos]: the held rows, then the new
            rows = []
            for g in range(kv_heads):
                cols, s = held[layer][g] + new, score[layer][g]
                heads = range(g * group, (g + 1) * group)
                if rule in ("heavy", "heavy-avg"):  # every query of every head in the group, on each column
                    got = att[g * group:(g + 1) * group].sum(dim=(0, 1)).tolist()
                    for p, a in zip(cols, got):
                        s[p] = s.get(p, 0.0) + (a if rule == "heavy" else a / group)
                if rule in ("snap", "snap-capped") and seen == prompt:
                    window = snap_window(budget, prompt)
                    s.update(zip(cols, hand_snap_scores(att, heads, prompt - window, window)))
                    s.update({p: math.inf for p in cols[prompt - window:]})
                cap = len(cols) if rule == "snap" and seen > prompt else budget
                if len(cols) > cap:
                    protect = {"window": [], "sinks": [p for p in cols if p < SINKS],
                               "heavy": [p for p in cols if p >= seen - budget // 2],
                               "heavy-avg": [p for p in cols if p >= seen - budget // 2]}.get(
                        rule, [p for p in cols if p >= prompt])[-budget:]
                    value = (lambda p: s[p] / (seen - p)) if rule == "heavy-avg" else (lambda p: s.get(p, 0.0))
                    rest = sorted((p for p in cols if p not in protect), key=lambda p: (value(p), p), reverse=True)
                    kept = sorted(protect + rest[:budget - len(protect)])
                else:
                    kept = cols
                rows.append([cols.index(p) for p in kept])
                held[layer][g] = kept
            index = torch.tensor(rows)[None, :, :, None]
            lay = cache.layers[layer]
            lay.keys = lay.keys.gather(2, index.expand(-1, -1, -1, lay.keys.shape[-1]))
            lay.values = lay.values.gather(2, index.expand(-1, -1, -1, lay.values.shape[-1]))
        states.append([[list(h) for h in layer] for layer in held])
    return HandRun(torch.stack(logps), states)


def hand_kivi(x: torch.Tensor, bits: int, keys: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """KIVI's grouping written out (arXiv:2402.02750): keys per channel over each GROUP positions, values per position
    over its channels; asymmetric, scale (max - min) / (2^bits - 1) and zero point min in fp16, codes rounded and
    clipped. Returns (codes [.., pos, head_dim] as integers, the dequantized rows, the step each number had)."""
    levels = 2**bits - 1
    b, h, n, d = x.shape
    codes, back, step = torch.zeros(b, h, n, d, dtype=torch.long), torch.zeros(b, h, n, d), torch.zeros(b, h, n, d)
    for i in range(b):
        for j in range(h):
            if keys:
                groups = [(slice(g, g + GROUP), slice(c, c + 1)) for g in range(0, n, GROUP) for c in range(d)]
            else:
                groups = [(slice(p, p + 1), slice(0, d)) for p in range(n)]
            for rows, channels in groups:
                block = x[i, j, rows, channels].float()
                low, high = block.min(), block.max()
                scale = ((high - low) / levels).clamp(min=1e-6).half().float()
                zero = low.half().float()
                c = ((block - zero) / scale).round().clamp(0, levels)
                codes[i, j, rows, channels] = c.long()
                back[i, j, rows, channels] = c * scale + zero
                step[i, j, rows, channels] = (high - low) / levels
    return codes, back, step


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


@pytest.mark.parametrize("rule", list(EVICTING))
def test_every_eviction_rule_keeps_what_its_hand_written_paper_rule_keeps(bundled_lm, rule):
    """A 40-position prompt under a budget of 16, then 8 decode steps: after every pass, each layer and kv_head holds
    exactly the positions hand_evict's plain-Python rule keeps (H2O's sum and kvpress's averaged score, SnapKV as
    published and capped, the window, the sinks), and the next-token log-probs are the reference's."""
    ids = held_out_ids(bundled_lm, 48)
    hand = hand_evict(rule, ids, 40, 16)
    cache = budget_cache(bundled_lm, rule, 16)(bundled_lm.config)
    for step, chunk in enumerate([ids[:40]] + [[t] for t in ids[40:]]):
        logits = run_pass(bundled_lm, torch.tensor([chunk]), cache).logits[0, -1].float()
        held = [[layer.positions[0, g].tolist() for g in range(layer.positions.shape[1])] for layer in cache.layers]
        assert held == hand.held[step], f"{rule}, pass {step}"
        assert torch.allclose(torch.log_softmax(logits, -1), hand.logp[step], atol=1e-4), f"{rule}, pass {step}"
    if rule == "snap":  # as published: the prompt cut to 16 once, every decoded position kept
        assert all(len(h) == 16 + 8 for layer in held for h in layer)
    else:
        assert all(len(h) == 16 for layer in held for h in layer)


def test_each_eviction_rule_holds_the_positions_it_names(bundled_lm):
    ids = held_out_ids(bundled_lm, 96)
    budget = 32
    for policy in EVICTING:
        _, cache = forced_logprobs(bundled_lm, policy, budget, ids, 64)
        for layer in cache.layers:
            held = layer.positions[0]  # [kv_head, held]
            size = budget + 32 if policy == "snap" else budget  # snap never evicts a decoded position
            assert held.shape[-1] == size and layer.keys.shape[-2] == size
            for head in held.tolist():
                assert head == sorted(head)
                if policy in ("window", "snap-capped"):  # 32 decoded positions fill a capped snap's budget
                    assert head == list(range(96 - budget, 96))
                if policy == "sinks":
                    assert head == [0, 1, 2, 3] + list(range(96 - budget + 4, 96))
                if policy in ("heavy", "heavy-avg"):  # the recent half, whatever the scores
                    assert set(range(96 - budget // 2, 96)) <= set(head)
                if policy == "snap":  # 32 of the prompt's 64 (its last 16, the window, among them), then 64..95
                    assert set(range(48, 96)) <= set(head) and len([p for p in head if p < 64]) == 32


def test_snap_keeps_its_observation_window_and_every_position_decoded_after_it(bundled_lm):
    ids = held_out_ids(bundled_lm, 70)
    for policy, size in (("snap", 32 + 6), ("snap-capped", 32)):
        _, cache = forced_logprobs(bundled_lm, policy, 32, ids, 64)  # a 64-position prefill, then 6 decode steps
        for layer in cache.layers:
            for head in layer.positions[0].tolist():
                assert set(range(64 - 16, 70)) <= set(head)  # the last 16 prompt positions (the window) and 64..69
                assert len(head) == size


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


# ---------------------------------------------------------------- the damage, by hand


def test_kl_and_agreement_are_the_textbook_ones_recomputed_by_hand():
    """Two steps of a 3-token vocabulary: KL(full || policy) = Σ p_full (log p_full − log p_policy), summed here in
    plain Python, is not KL(policy || full); agreement is the share of steps with the same top token."""
    full_logits = [[4.0, 0.0, -2.0], [0.0, 3.0, 0.1]]  # peaked where the policy is flat: the two KLs differ ×2
    policy_logits = [[0.5, 1.0, 0.0], [0.2, 2.5, 0.0]]  # step 0 picks another token, step 1 the same

    def softmax(row):
        z = sum(math.exp(v) for v in row)
        return [math.exp(v) / z for v in row]

    def kl(p, q):
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q))

    f = compare_forced("x", 8, 4, torch.log_softmax(torch.tensor(full_logits, dtype=torch.float64), -1).float(),
                       torch.log_softmax(torch.tensor(policy_logits, dtype=torch.float64), -1).float())
    forward = [kl(softmax(a), softmax(b)) for a, b in zip(full_logits, policy_logits)]
    backward = [kl(softmax(b), softmax(a)) for a, b in zip(full_logits, policy_logits)]
    assert f.agree == (False, True) and f.agreement == 0.5
    assert f.kl == pytest.approx(forward, rel=1e-5)
    assert abs(forward[0] - backward[0]) > 0.5 and f.kl[0] != pytest.approx(backward[0], rel=0.1)  # the direction
    assert f.kl_mean == pytest.approx(sum(forward) / 2, rel=1e-5)


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


@pytest.mark.parametrize("budget", [128, 192])
def test_fp8_rounds_a_run_within_1_5x_of_transformers_fp8_layer_on_the_same_tensors(bundled_lm, budget):
    """The keys and values of 256 held-out positions, as transformers' own model caches them, fed to both fp8 caches
    as a run feeds them (a 128-position prefill, then one row a step): transformers' Fp8QuantizedLayer (its scale
    set by its first update, the prompt) and ours with `budget` positions in full precision. On the rows ours
    quantized, its mean round-trip error is within ×1.5 of transformers' on the same rows, layer by layer, K and V."""
    ids = held_out_ids(bundled_lm, 256)
    full = DynamicCache(config=their_model().config)
    with torch.inference_mode():
        their_model()(torch.tensor([ids]), past_key_values=full, use_cache=True)
    for i, layer in enumerate(full.layers):
        k, v = layer.keys, layer.values  # [batch, kv_head, 256, head_dim]
        theirs, mine = Fp8QuantizedLayer(), QuantizedLayer("fp8", budget)
        for start, end in [(0, 128)] + [(p, p + 1) for p in range(128, 256)]:
            their_k, their_v = theirs.update(k[:, :, start:end], v[:, :, start:end])
            mine.update(k[:, :, start:end], v[:, :, start:end])
            mine.observe()
        n = mine.quantized
        assert n == 256 - budget
        my_k = mine.codec.unpack(mine.packed_keys, torch.float32)
        my_v = mine.codec.unpack(mine.packed_values, torch.float32)
        for name, exact, their, my in (("K", k, their_k, my_k), ("V", v, their_v, my_v)):
            their_error = (their[:, :, :n] - exact[:, :, :n]).abs().mean()
            my_error = (my - exact[:, :, :n]).abs().mean()
            assert my_error <= 1.5 * their_error, f"layer {i} {name}: {my_error:.3g} vs transformers' {their_error:.3g}"


@pytest.mark.parametrize("bits", [8, 4])
def test_kivi_rounds_each_number_to_within_half_a_step_and_int4_packs_two_a_byte(bits):
    """Against hand_kivi (KIVI's grouping written out): the same codes, the same numbers back, each within half of
    the step its own group's range gives (computed here from the raw numbers, not read off the packed scale), and
    int4's byte i holding channel 2i in its low four bits and 2i + 1 in its high four."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 2 * GROUP, 32)
    x[..., 5] *= 20  # an outlier channel: KIVI gives keys a range per channel so it does not swamp the others
    codec = Kivi(bits)
    for keys in (True, False):
        packed = codec.pack(x, keys)
        back = codec.unpack(packed, torch.float32)
        codes, expected, step = hand_kivi(x, bits, keys)
        assert torch.allclose(back, expected, rtol=0, atol=1e-5), "keys" if keys else "values"
        assert ((back - x).abs() <= step / 2 + 2e-3 * step + 1e-6).all()  # + fp16's rounding of the scale
        raw = packed.codes.long()
        if bits == 4:
            assert packed.codes.shape[-1] == x.shape[-1] // 2
            assert torch.equal(raw & 0x0F, codes[..., 0::2]) and torch.equal(raw >> 4, codes[..., 1::2])
        else:
            assert torch.equal(raw, codes)
        assert packed.codes.numel() * packed.codes.element_size() == x.numel() * bits // 8


FP8_WINDOW = 16  # fp8 keeps the newest 16 positions exact (a residual window, as transformers' quantized cache keeps)


@pytest.mark.slow  # a bf16 load and 2 x 256 teacher-forced positions: ~1.6 s
def test_fp8_holds_at_most_55_percent_of_bf16_and_30_percent_of_fp32(bundled_lm):
    """fp8 with its 16-position residual window, against transformers' DynamicCache in bf16 and in fp32, after 256
    positions of the held-out text; and the bf16 share the page counts from the fp32 run (the same tensors at 2
    bytes a full-precision number) is the share a bf16 run measures."""
    from topics.budget.measure import cache_map

    bf16 = load_model("default", device="cpu", dtype="bfloat16")
    counted = None
    for lm, dtype, share in ((bundled_lm, torch.float32, 0.30), (bf16, torch.bfloat16, 0.55)):
        ids = held_out_ids(lm, 256)
        _, cache = forced_logprobs(lm, "fp8", FP8_WINDOW, ids, 128)
        held = sum(tensor_bytes(layer) for layer in cache.layers)
        assert held == cache.nbytes()
        theirs = dynamic_cache_bytes(ids, dtype)
        assert held <= share * theirs, lm.dtype_name
        cmap = cache_map(lm, cache, "fp8", FP8_WINDOW, 256, theirs, 128)
        if counted is None:
            counted = (cmap.bytes_held_at(2), cmap.bytes_full_at(2), cmap.ratio_bf16)
        else:
            assert counted == (held, theirs, pytest.approx(held / theirs))


@pytest.mark.slow  # 512 teacher-forced steps (~2.5 s); the fast tier reads the first window, below
def test_fp8_agrees_with_the_full_cache_on_98_percent_of_held_out_tokens(bundled_lm):
    """The same fp8 cache, teacher-forced over four 256-token windows of the held-out stories (128 prefilled, 128
    fed one a step: 512 next tokens in all): its top-1 token is the full cache's on at least 98 % of them, the full
    cache's being transformers' own forward pass over each window. (Every position but one in fp8, this model
    agrees on about 97 %: a few near-ties flip.)"""
    assert forced_agreement(bundled_lm, "fp8", windows=4)[0] >= 0.98


def test_fp8_agrees_with_the_full_cache_on_nearly_every_token_of_a_held_out_window(bundled_lm):
    """The same fp8 cache on the first of those windows alone (128 teacher-forced steps): its top-1 token is the
    full cache's on at least 95 % of them (124 of 128 on this model). The slow tier holds all four windows to 98 %."""
    assert forced_agreement(bundled_lm, "fp8", windows=1)[0] >= 0.95


def forced_agreement(lm, policy: str, windows: int) -> tuple[float, list[int], object]:
    """Top-1 agreement with transformers' own forward pass over `windows` 256-token windows of the held-out stories,
    the policy keeping FP8_WINDOW positions in full precision; and the first window's ids and cache."""
    text = (ASSETS / "held_out" / "tinystories_eval_40.txt").read_text(encoding="utf-8")
    every = lm.tokenizer(text, verbose=False)["input_ids"]
    agree = total = 0
    first = None
    for w in range(windows):
        ids = every[w * 256:(w + 1) * 256]
        with torch.inference_mode():
            full = their_model()(torch.tensor([ids])).logits[0, 128:].float()  # the next token after 128..255
        logp, cache = forced_logprobs(lm, policy, FP8_WINDOW, ids, 128)
        assert cache.layers[0].quantized == (256 - FP8_WINDOW) // cache.layers[0].codec.group * \
            cache.layers[0].codec.group
        agree += int((logp.argmax(-1) == full.argmax(-1)).sum())
        total += len(full)
        first = first or (ids, cache)
    assert total == 128 * windows
    return agree / total, *first


@pytest.mark.parametrize("windows", [1, pytest.param(2, marks=pytest.mark.slow)])  # 128 steps a window (~0.6 s)
@pytest.mark.parametrize("policy, bits, fp32_share, bf16_share", [("int8", 8, 0.35, 0.65), ("int4", 4, 0.25, 0.40)])
def test_kivi_agrees_on_98_percent_and_holds_the_bytes_its_format_says(bundled_lm, policy, bits, fp32_share,
                                                                       bf16_share, windows):
    """int8 and int4 with a 16-position residual window: on one 256-token held-out window (two in the slow tier)
    the top-1 token is transformers' own on at least 98 % of the teacher-forced steps; the bytes held are KIVI's
    format counted by hand (codes at `bits` a number; an fp16 scale and zero point per channel per 16 key positions
    and per value position; the tail in fp32), and under the shares of transformers' fp32 and bf16 DynamicCache
    named here."""
    agreement, ids, cache = forced_agreement(bundled_lm, policy, windows=windows)
    assert agreement >= 0.98
    s = bundled_lm.spec
    quantized = (256 - FP8_WINDOW) // GROUP * GROUP
    tail = 256 - quantized
    per_layer = (2 * quantized * s.kv_heads * s.head_dim * bits // 8  # K and V codes
                 + 2 * 2 * (quantized // GROUP) * s.kv_heads * s.head_dim  # keys: scale and zero, fp16, per channel
                 + 2 * 2 * quantized * s.kv_heads  # values: scale and zero, fp16, per position
                 + 2 * tail * s.kv_heads * s.head_dim * 4)  # the full-precision tail
    assert sum(tensor_bytes(layer) for layer in cache.layers) == cache.nbytes() == s.layers * per_layer
    assert cache.nbytes() <= fp32_share * dynamic_cache_bytes(ids)
    assert cache.nbytes() - s.layers * 2 * tail * s.kv_heads * s.head_dim * 2 <= \
        bf16_share * dynamic_cache_bytes(ids, torch.bfloat16)  # the tail counted at bf16's 2 bytes


def test_a_quantized_step_says_what_its_dequantize_took_and_what_it_moves(bundled_lm):
    """The time of each fp8 decode step includes the dequantize the page names (timed inside the step, never more
    than it), the page's median is the median of those records, and the bytes a step moves (an estimate) are
    counted by hand from the cache's shapes: the quantized rows read packed, written back in fp32 and read again,
    the tail read once."""
    from topics.budget.draw import step_words

    full, row = compare_policies(bundled_lm, ("full", "fp8"), 16, context=64, new_tokens=6)
    assert len(row.greedy.dequant_ms) == len(row.greedy.step_ms) == 5 and full.greedy.dequant_ms == ()
    assert all(0 < d < ms for d, ms in zip(row.greedy.dequant_ms, row.greedy.step_ms))
    said = step_words(row, full)
    median = statistics.median(row.greedy.dequant_ms[row.greedy.warmup_steps:])
    assert f"{median:.2f} ms" in said
    s = bundled_lm.spec
    quantized = 64 - 16
    packed = 2 * quantized * s.kv_heads * s.head_dim * 1 + 2 * 4  # fp8 codes, K and V, and their two fp32 scales
    moved = s.layers * (packed + 2 * 2 * quantized * s.kv_heads * s.head_dim * 4 + 2 * 16 * s.kv_heads * s.head_dim * 4)
    assert (f"×{moved / row.cache.bytes_full:.2f} the full cache's bytes a step (estimate, counted at the "
            f"{row.cache.positions} positions") in said
    assert moved > row.cache.bytes_full  # this implementation moves more than the full cache, and says so


def test_the_policy_tables_step_time_is_the_median_of_the_timed_steps_with_their_spread(bundled_lm):
    """Lesson 11's table gave one ms/step a policy (2.8, 3.6, 3.2…) where the runs spread wider than the gaps
    between policies. Each cell now holds the median of the steps timed after the warm-up and their quartiles,
    read here off the steps themselves."""
    from topics.budget.draw import MS_STEP, policy_table

    rows = compare_policies(bundled_lm, ("full", "window"), 16, context=48, new_tokens=8)
    for short in (False, True):
        table = policy_table(rows, short=short)
        for row, cell in zip(rows, table[MS_STEP]):
            timed = row.greedy.step_ms[row.greedy.warmup_steps:]
            q1, _, q3 = statistics.quantiles(timed, n=4)
            assert cell == f"{statistics.median(timed):.1f} ({q1:.1f}–{q3:.1f})", (cell, timed)


# ---------------------------------------------------------------- evicting at a quarter of the context


@pytest.mark.slow  # 48: ~1.4 s, 96: ~2.6 s
@pytest.mark.parametrize("context", [48, 96])
def test_at_a_quarter_of_the_context_the_eviction_policies_are_measured_and_ranked(bundled_lm, context):
    """96 tokens of held-out text (48 in the fast tier), half prefilled and half teacher-forced, every eviction
    policy at a budget of a quarter (24), against hand_evict's rules on transformers' own model: each policy's
    agreement and mean KL equal the ones recomputed here by hand from the reference's log-probs and transformers'
    own full forward pass, the bytes are a quarter of transformers' DynamicCache's (snap: its budget of prompt
    positions plus every decoded one), and the ranking (most agreement first, ties the lower KL) is the one these
    hand figures give."""
    half, budget = context // 2, context // 4
    ids = held_out_ids(bundled_lm, context)
    rows = compare_policies(bundled_lm, ("full", *EVICTING), budget=budget, context=context, new_tokens=2)
    by = {r.policy: r for r in rows}
    with torch.inference_mode():
        full = torch.log_softmax(their_model()(torch.tensor([ids])).logits[0, half:].float(), -1)  # after half..
    full_bytes = dynamic_cache_bytes(ids)
    assert by["full"].cache.bytes_held == full_bytes and by["full"].forced.agreement == 1.0
    hand = {}
    for policy in EVICTING:
        logp = hand_evict(policy, ids, half, budget).logp[1:]  # the decode steps' (the prefill's is the full's)
        agree = [int(a) == int(b) for a, b in zip(logp.argmax(-1), full.argmax(-1))]
        kl = [float((p.exp() * (p - q)).sum()) for p, q in zip(full, logp)]
        hand[policy] = (sum(agree) / len(agree), sum(kl) / len(kl))
        r = by[policy]
        assert len(r.forced.agree) == half
        assert r.forced.agreement == hand[policy][0], policy
        assert r.forced.kl_mean == pytest.approx(hand[policy][1], rel=1e-3, abs=1e-6), policy
        assert r.cache.bytes_held * context == full_bytes * (budget + half if policy == "snap" else budget), policy
    by_hand = sorted(CAPPED, key=lambda p: (-hand[p][0], hand[p][1]))
    assert ranking(rows) == by_hand
    assert len({hand[p] for p in CAPPED}) == len(CAPPED)  # no two policies tie: the order is the figures'


def test_the_recorded_charts_hold_every_policy_and_say_what_this_code_measures(bundled_lm):
    """The page's first screen draws a recording (assets/budget_sweep_default.json): it holds every policy at every
    budget the page offers, both heavy scores and both SnapKVs drawn as lines of their own, and a point measured now
    (heavy-avg at 64, teacher-forced, against transformers' own full pass) is the recorded one."""
    from topics.budget.draw import divergence_fig
    from topics.budget.measure import SWEEP_BUDGETS, recorded_sweep

    recorded = recorded_sweep(bundled_lm)
    assert recorded is not None and recorded.context == 256 and recorded.command.startswith("python -m engine budget")
    assert {(p.policy, p.budget) for p in recorded.points} == {(p, b) for p in POLICIES if p != "full"
                                                                for b in SWEEP_BUDGETS}
    fig = divergence_fig(recorded.points)
    named = {t.name for t in fig.data}
    assert {"heavy", "heavy-avg", "snap", "snap-capped"} <= named
    # policies that measure alike draw one line over the other (window under snap-capped): each keeps a shape of
    # its own, so its points still show and the legend tells them apart
    shapes = {t.name: t.marker.symbol for t in fig.data if t.showlegend is not False}
    assert len(set(shapes.values())) == len(shapes) == len(named), shapes
    ids = held_out_ids(bundled_lm, 256)
    with torch.inference_mode():
        full = torch.log_softmax(their_model()(torch.tensor([ids])).logits[0, 128:].float(), -1)
    logp, _ = forced_logprobs(bundled_lm, "heavy-avg", 64, ids, 128)
    point = next(p for p in recorded.points if (p.policy, p.budget) == ("heavy-avg", 64))
    assert point.agreement == float((logp.argmax(-1) == full.argmax(-1)).float().mean())
    assert point.kl_mean == pytest.approx(float((full.exp() * (full - logp)).sum(-1).mean()), rel=1e-3)


# ---------------------------------------------------------------- the free run starts where the text does


def test_the_free_run_starts_from_the_held_out_texts_first_half_with_one_start_token(bundled_lm):
    rows = compare_policies(bundled_lm, ("full", "window"), 16, context=48, new_tokens=2)
    ids = held_out_ids(bundled_lm, 48)
    assert ids[0] == bundled_lm.tokenizer.bos_token_id and ids[1] != ids[0]  # the text has it once
    for r in rows:
        assert r.greedy.prompt_ids == tuple(ids[:24]), r.policy


# ---------------------------------------------------------------- the attention sink


def test_the_sink_is_measured_per_layer_and_per_head_from_the_models_own_attention(bundled_lm):
    from topics.budget.draw import sink_words

    rows = sink_mass(bundled_lm, context=128, from_pos=32)
    assert [r.layer for r in rows] == list(range(bundled_lm.spec.layers))
    ids = held_out_ids(bundled_lm, 128)
    with torch.inference_mode():
        attentions = their_model()(torch.tensor([ids]), output_attentions=True).attentions
    uniform = sum(1 / (q + 1) for q in range(32, 128)) / 96
    strongest = (0.0, None, None)
    for r, a in zip(rows, attentions):
        assert r.mass == pytest.approx(a[0, :, 32:, 0].float().mean().item(), rel=1e-4)
        assert r.uniform == pytest.approx(uniform)
        assert r.rows == 96
        heads = [a[0, h, 32:, 0].float().mean().item() for h in range(a.shape[1])]
        assert r.head_mass == pytest.approx(heads, rel=1e-4)
        for h, m in enumerate(heads):
            strongest = max(strongest, (m / uniform, r.layer, h), key=lambda t: t[0])
    said = sink_words(rows)
    ratio, layer, head = strongest
    assert f"the strongest single head (layer {layer}, head {head}) ×{ratio:.1f}" in said
    lows = [a[0, :, 32:, 0].float().mean().item() / uniform for a in attentions]
    assert f"×{min(lows):.1f} to ×{max(lows):.1f}" in said


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


@pytest.mark.slow  # the whole budget command over two stories in two dtypes: ~3 s
def test_the_cli_prints_the_numbers_and_writes_them(capsys, tmp_path):
    """`--policy all` prints a line for every policy, the same figures `--json` writes (bytes over the full cache's
    recomputed from the written bytes), and ranks the policies that hold B positions as the written figures do."""
    import json

    from commands.main import main

    assert main(["budget", "--policy", "window", "--budget", "100000"]) == 2  # over this model's 512 positions
    assert "context window (512 positions)" in capsys.readouterr().err
    out = tmp_path / "b.json"
    assert main(["budget", "--policy", "all", "--budget", "8", "--context", "24", "--new-tokens", "2",
                 "--stories", "2", "--json", str(out)]) == 0  # two stories: the same code as eight, in seconds
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    rows = {r["policy"]: r for r in doc["rows"]}
    assert list(rows) == list(POLICIES)
    old = {"policy", "budget", "bytes_held", "bytes_full", "bytes_ratio", "agreement", "kl_mean", "steps_compared",
           "parting_step", "ms_per_step", "ms_p25", "ms_p75", "timed_steps", "text", "full_text"}
    assert all(old <= set(r) for r in rows.values())  # what it always wrote, and more
    table = text.split("\n\n")[0].splitlines()[1:]  # under the header, up to the first blank line
    lines = {line.split()[0]: line for line in table}
    assert set(lines) == set(POLICIES) and "of fp32" in text and "at bf16" in text
    for name, r in rows.items():
        assert f"{r['bytes_held'] / r['bytes_full']:.1%}" in lines[name] and f"{r['agreement']:.1%}" in lines[name]
    by_hand = sorted(CAPPED, key=lambda p: (-rows[p]["agreement"], rows[p]["kl_mean"]))
    words = by_hand[0]  # '=' between two whose agreement reads the same in the table above, '>' else
    for a, b in zip(by_hand, by_hand[1:]):
        words += (" = " if f"{rows[a]['agreement']:.1%}" == f"{rows[b]['agreement']:.1%}" else " > ") + b
    assert f"by agreement (=: the same agreement, the lower KL first): {words}" in text
    assert doc["ranking"] == by_hand
    spread = doc["stories"]  # then every policy over the stories asked for, fp32 and bf16, with intervals
    assert spread["stories"] == 2 and {r["dtype"] for r in spread["rows"]} == {"float32", "bfloat16",
                                                                               "bfloat16 vs float32"}
    assert "every story: 2 held-out stories" in text and "fp8 saturation, fp32:" in text
    for dtype, short in (("float32", "fp32"), ("bfloat16", "bf16")):
        ranked = [r for r in spread["rows"] if r["dtype"] == dtype and r["policy"] in CAPPED]
        ranked.sort(key=lambda r: (-r["agreement"], r["kl_mean"]))
        words = ""
        for a, b in zip(ranked, ranked[1:]):  # ≈ exactly where the written intervals overlap
            x, y = a["agreement_ci"], b["agreement_ci"]
            words += a["policy"] + (" ≈ " if x["low"] <= y["high"] and y["low"] <= x["high"] else " > ")
        assert f"{short}, by pooled agreement: {words + ranked[-1]['policy']} (≈: tied" in text


# ---------------------------------------------------------------- the pictures say what the record says


def picture_cells(svg: str, layers: int, positions: int) -> list[list[tuple[str, float]]]:
    """Each layer's cells as the SVG draws them: (state, opacity) per position, read off its rectangles' runs."""
    cells = []
    for attrs, state, start, length in re.findall(
            r'<rect ([^>]*)data-state="(\w+)" data-start="(\d+)" data-length="(\d+)"', svg):
        if int(start) == 0:
            cells.append([])
        opacity = re.search(r'fill-opacity="([\d.]+)"', attrs)
        cells[-1].extend([(state, float(opacity.group(1)) if opacity else 1.0)] * int(length))
    assert len(cells) == layers and all(len(row) == positions for row in cells)
    return cells


def test_the_cache_picture_greys_what_was_evicted_and_hatches_what_was_quantized(bundled_lm):
    """96 positions (64 prefilled) at a budget of 32. The picture's cells say, position by position, what the rules
    say independently of the cache: the window drops 0..63; heavy hitters drop what hand_evict's H2O drops, and a
    position only one of the two kv_heads holds is drawn pale; int8 (KIVI, 16-position key groups) has rounded
    0..63. Its title's bytes are the tensors' own (counted here) and transformers' DynamicCache's."""
    from physics.units import human_bytes
    from topics.budget.draw import COLUMN_W, PHONE_W, cache_svg
    from topics.budget.measure import cache_map

    ids = held_out_ids(bundled_lm, 96)
    full = dynamic_cache_bytes(ids)
    layers, kv_heads = bundled_lm.spec.layers, bundled_lm.spec.kv_heads
    hand = hand_evict("heavy", ids, 64, 32).held[-1]
    expected = {
        "window": [[("evicted" if p < 64 else "held", kv_heads) for p in range(96)]] * layers,
        "heavy": [[("held", n) if (n := sum(p in h for h in layer)) else ("evicted", 0) for p in range(96)]
                  for layer in hand],
        "int8": [[("quantized" if p < (96 - 32) // GROUP * GROUP else "held", kv_heads) for p in range(96)]] * layers,
    }
    assert any(n == 1 for layer in expected["heavy"] for _, n in layer)  # some positions held by one kv_head only
    for policy, want in expected.items():
        _, cache = forced_logprobs(bundled_lm, policy, 32, ids, 64)
        cmap = cache_map(bundled_lm, cache, policy, 32, 96, full, 64)
        held = sum(tensor_bytes(layer) for layer in cache.layers)
        title = f"{human_bytes(held)} held of the fp32 cache's {human_bytes(full)} ({held / full:.0%})"
        for svg in (cache_svg(cmap), cache_svg(cmap, width=COLUMN_W), cache_svg(cmap, width=PHONE_W)):  # one record
            drawn = picture_cells(svg, layers, 96)
            for layer, (row, wanted) in enumerate(zip(drawn, want)):
                assert [state for state, _ in row] == [state for state, _ in wanted], f"{policy}, layer {layer}"
                for (state, opacity), (_, n) in zip(row, wanted):
                    if state != "evicted":
                        assert opacity == pytest.approx(0.35 + 0.65 * n / kv_heads, abs=0.006), (policy, layer)
            words = " ".join(re.findall(r'font-weight="bold"[^>]*>([^<]*)</text>', html.unescape(svg)))
            assert title in words, policy  # whole, on one line or wrapped onto two


@pytest.mark.slow
def test_the_page_measures_a_scenario_and_refuses_bad_input_without_losing_the_session(bundled_lm):
    from ui.apptest import app_test, page

    at = app_test()  # the whole app, as a visitor opens it: its sidebar, its pages (the budget page links to Scale)
    at.run()
    at.switch_page(page("budget")).run(timeout=300)
    assert not at.exception and not at.error
    assert at.session_state["lm"].spec.parameters == bundled_lm.spec.parameters  # the bundled model, the default
    at.button(key="budget_scenario_a window drops the start").click().run()
    said = next(m.value for m in at.markdown if m.value.startswith("Holds "))
    assert "Holds **128.0 KiB** of the full fp32 cache's 512.0 KiB (**25%**, measured)" in said
    assert "a bf16 server would hold 64.0 KiB of 256.0 KiB (25%" in said and "texts part at step" in said
    charts = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert any("Damage against the budget" in c for c in charts)  # on the first screen, before any button
    at.selectbox(key="budget_policy").set_value("sinks")
    at.slider(key="budget_budget").set_value(3).run()
    assert not at.exception and "at least 5" in at.error[0].value
    at.slider(key="budget_budget").set_value(64).run()
    assert not at.error and any(m.value.startswith("Holds ") for m in at.markdown)
    # every story, recorded: the chart of intervals, the ranking with its ties, the table in both dtypes
    assert any(s.value.startswith("Every story: 8 held-out stories") for s in at.subheader)
    assert any("Every policy over 8 stories" in c for c in (str(c.proto.spec) for c in at.get("plotly_chart")))
    # the one-text ranking under the chart: '=' where two agree on as many tokens (by hand, from the recording)
    import json

    doc = json.loads((ASSETS / "budget_sweep_default.json").read_text())
    at64 = sorted((p for p in doc["points"] if p["budget"] == 64 and p["policy"] in CAPPED),
                  key=lambda p: (-p["agreement"], p["kl_mean"]))
    one_text = at64[0]["policy"] + "".join((" = " if a["agreement"] == b["agreement"] else " > ") + b["policy"]
                                           for a, b in zip(at64, at64[1:]))
    assert " = " in one_text and any(one_text in c.value for c in at.caption), one_text
    words = next(m.value for m in at.markdown if "their intervals:" in m.value)
    assert "**heavy**" not in words.split("their intervals:")[1].split(">")[0]  # nothing is set apart below heavy
    assert "bf16" in words and "saturate at ±448" in words
    # bf16's own cost is not a floor under the bf16 rows: they are measured against the bf16 full cache (stories.py)
    assert "Each bf16 row is measured against the bf16 full cache" in words and "floor" not in words
    table = at.dataframe[-1].value
    assert {"fp32 agreement [95 %]", "bf16 agreement [95 %]"} <= set(table.columns) and len(table) == 9


# ---------------------------------------------------------------- every story, with its spread (topics/budget/stories.py)


def spread_of(intervals: dict[str, tuple[float, float, float]]):
    """A StorySpread whose fp32 rows have these (agreement, low, high): one story each, agreement out of 1000 steps."""
    from topics.budget.records import Interval, PolicySpread, StoryScore, StorySpread

    rows = tuple(PolicySpread(p, 64, "float32", (StoryScore(0, 2000, 1000, round(a * 1000), 0.0, None),),
                              Interval(lo, hi), Interval(0.0, 0.0)) for p, (a, lo, hi) in intervals.items())
    return StorySpread("m", "cpu", 64, 1, 256, 8, 100, 0, rows)


def test_the_ranking_says_tied_exactly_where_the_intervals_overlap():
    """Neighbours in the ranking (most agreement first) are 'tied' (≈) when their intervals overlap, '>' when the
    upper one's low end is above the lower one's high end, written out here by hand for each pair."""
    spread = spread_of({"a": (0.93, 0.90, 0.96), "b": (0.92, 0.89, 0.95), "c": (0.85, 0.82, 0.88),
                        "d": (0.84, 0.80, 0.86), "e": (0.70, 0.60, 0.79)})
    ranks = spread.ranking("float32", "abcde")
    assert [r.policy for r in ranks] == list("abcde")
    assert [r.tied_with_next for r in ranks] == [True, False, True, False, None]  # 0.89 <= 0.96; 0.88 < 0.89; ...
    assert spread.ranking_words("float32", "abcde") == "a ≈ b > c ≈ d > e"
    apart = {(x, y) for x in "abcde" for y in "abcde" if x < y}  # every pair, minus the four that overlap
    assert set(spread.apart("float32", "abcde")) == apart - {("a", "b"), ("c", "d")}
    chain = spread_of({"a": (0.92, 0.90, 0.94), "b": (0.89, 0.86, 0.91), "c": (0.86, 0.83, 0.88)})
    assert chain.ranking_sentence("float32", "abc") == (  # a chain of ties: a and c still apart, and said so
        "a ≈ b ≈ c (≈: tied with the next, their 95 % intervals overlap; ties do not chain); set apart by their "
        "intervals: a > c")


def test_the_recorded_spread_holds_every_policy_over_eight_stories_in_fp32_and_bf16():
    """assets/budget_stories_default.json, what the page shows: ≥ 8 stories, every policy in both dtypes, intervals
    around the pooled figures, the ranking's ties exactly where the recorded intervals overlap, fp8's saturation
    counted in both dtypes, and the command that remakes it."""
    import json

    from topics.budget.records import StorySpread

    spread = StorySpread.from_dict(json.loads((ASSETS / "budget_stories_default.json").read_text()))
    assert spread.stories >= 8 and spread.command.startswith("python -m engine budget --policy all")
    assert spread.dtypes == ("float32", "bfloat16")
    for dtype in spread.dtypes:
        for p in POLICIES:
            if p == "full":
                continue
            r = spread.row(p, dtype)
            assert len(r.stories) == spread.stories, (p, dtype)
            assert r.agreement_ci.low <= r.agreement <= r.agreement_ci.high, (p, dtype)
            assert r.kl_ci.low <= r.kl_mean <= r.kl_ci.high, (p, dtype)
            assert r.agreement == sum(s.agreeing for s in r.stories) / sum(s.steps for s in r.stories)
        ranks = spread.ranking(dtype, CAPPED)
        for upper, lower in zip(ranks, ranks[1:]):
            overlap = upper.interval.low <= lower.interval.high and lower.interval.low <= upper.interval.high
            assert upper.tied_with_next == overlap and upper.agreement >= lower.agreement
        for a, b in spread.apart(dtype, CAPPED):
            x, y = spread.row(a, dtype).agreement_ci, spread.row(b, dtype).agreement_ci
            assert x.low > y.high  # set apart: the higher one's interval wholly above
        sat = spread.row("fp8", dtype).saturation
        assert sat is not None and sat.decoded > 0 and 0 <= sat.share < 0.01 and sat.worst > 0
    assert spread.row("full", "bfloat16 vs float32") is not None  # what bf16 alone does


@pytest.fixture(scope="module")
def small_spread(bundled_lm):
    from topics.budget.stories import measure_stories

    return measure_stories(bundled_lm, ("window", "fp8"), budget=12, stories=3, context=32, free_tokens=4,
                           resamples=200)


def test_each_storys_damage_is_the_hand_written_rule_on_transformers_own_model(bundled_lm, small_spread):
    """Three stories of 32 tokens, a window of 12: each story's agreeing steps and KL are the hand-written window's
    on transformers' own model against its own full forward pass; the intervals are the percentile bootstrap of
    those per-story counts, recomputed here with the same seeded resamples."""
    import numpy as np

    from topics.budget.stories import story_ids

    stories = story_ids(bundled_lm, 3, 32, 32)
    row = small_spread.row("window", "float32")
    for story, ids in zip(row.stories, stories):
        half = len(ids) // 2
        with torch.inference_mode():
            full = torch.log_softmax(their_model()(torch.tensor([ids])).logits[0, half:].float(), -1)
        logp = hand_evict("window", ids, half, 12).logp[1:]
        assert story.steps == len(ids) - half == len(logp)
        assert story.agreeing == sum(int(a) == int(b) for a, b in zip(logp.argmax(-1), full.argmax(-1)))
        assert story.kl_sum == pytest.approx(float((full.exp() * (full - logp)).sum(-1).sum()), rel=1e-3, abs=1e-5)
    picks = np.random.default_rng(0).integers(0, 3, size=(200, 3))
    agree = np.array([s.agreeing for s in row.stories]) / 1.0
    steps = np.array([s.steps for s in row.stories]) / 1.0
    boot = agree[picks].sum(1) / steps[picks].sum(1)
    assert row.agreement_ci.low == pytest.approx(np.percentile(boot, 2.5))
    assert row.agreement_ci.high == pytest.approx(np.percentile(boot, 97.5))


def test_the_bf16_rows_run_the_model_and_the_cache_in_bf16(bundled_lm, small_spread):
    """The bf16 rows are measured, not counted: a copy of the weights in bf16 (the shared model stays fp32), its
    cache's rows in bf16, and its full cache differs from fp32's by a measurable KL."""
    from topics.budget.stories import in_dtype

    half = in_dtype(bundled_lm, torch.bfloat16)
    assert half.model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert bundled_lm.model.model.embed_tokens.weight.dtype == torch.float32
    _, cache = forced_logprobs(half, "window", 8, held_out_ids(half, 24), 12)
    assert all(layer.keys.dtype == torch.bfloat16 for layer in cache.layers)
    assert small_spread.dtypes == ("float32", "bfloat16")
    both = small_spread.row("full", "bfloat16 vs float32")
    assert both.kl_mean > 0 and both.steps == small_spread.row("window", "float32").steps


def test_fp8_counts_the_decoded_numbers_past_its_frozen_scale():
    """A prompt whose largest |number| is 2.0 freezes fp8's scale at 2/448; decoded rows holding 2.5, -3.0 and 1.0:
    two of the eight numbers a row pair brings are past ±2.0, the worst 1.5x the range, and they saturate at ±2.0
    when packed (the codec's round trip, against the hand count)."""
    layer = QuantizedLayer("fp8", budget=1)
    prompt = torch.zeros(1, 1, 4, 2)
    prompt[0, 0, 0, 0] = 2.0
    layer.update(prompt, prompt.clone(), 0)
    row = torch.tensor([[[[2.5, 1.0]]]])
    layer.update(row, -1.2 * row.clone(), 0)  # keys 2.5 and 1.0; values -3.0 and -1.2
    assert layer.decoded_numel == 4 and layer.past_range == 2
    assert layer.worst_over == pytest.approx(1.5)
    packed = layer.codec.pack(row, keys=True)
    assert float(layer.codec.unpack(packed, torch.float32).max()) == pytest.approx(2.0)  # saturated at the range
    int8 = QuantizedLayer("int8", budget=1)
    int8.update(prompt, prompt.clone(), 0)
    int8.update(row, row.clone(), 0)
    assert int8.decoded_numel == 0  # KIVI sets its range per group: nothing frozen to pass


def test_the_two_heavy_hitter_scores_gap_on_one_story_is_called_a_rule_only_where_the_stories_set_them_apart():
    """Lesson 11 said "which positions count as heavy depends on how you score them" from one story's 86 % against
    91 %, beside a recording where the two scores' intervals over 8 stories overlap. Now the words follow the
    intervals: overlapping, tied; apart, the rule, naming the score ahead; no recording, one draw."""
    from types import SimpleNamespace

    from topics.budget.draw import scores_words

    def row(policy, agreement):
        return SimpleNamespace(policy=policy, budget=64, forced=SimpleNamespace(agreement=agreement),
                               cache=SimpleNamespace(dtype="float32"))

    heavy, avg = row("heavy", 0.86), row("heavy-avg", 0.91)
    tied = scores_words(heavy, avg, spread_of({"heavy": (0.864, 0.830, 0.898), "heavy-avg": (0.906, 0.871, 0.934)}))
    assert "**86.0%** of next tokens when they are scored by H2O's plain sum" in tied
    assert "and on **91.0%** when each position's sum is divided by the queries that could see it" in tied
    assert "tied (86.4% [83.0%–89.8%] and 90.6% [87.1%–93.4%]" in tied and "depends on how" not in tied
    apart = scores_words(heavy, avg, spread_of({"heavy": (0.80, 0.78, 0.82), "heavy-avg": (0.90, 0.88, 0.92)}))
    assert "the per-query sum stays ahead" in apart and "depends on how you score them" in apart
    reverse = scores_words(heavy, avg, spread_of({"heavy": (0.95, 0.93, 0.97), "heavy-avg": (0.90, 0.88, 0.92)}))
    assert "the plain sum stays ahead" in reverse
    for none in (None, spread_of({"heavy": (0.80, 0.78, 0.82)})):  # no recording, or one without both scores
        said = scores_words(heavy, avg, none)
        assert "one story is one draw" in said and "tied" not in said and "depends on how" not in said


@pytest.mark.slow
def test_the_budget_page_in_bf16_never_shows_the_fp32_recording_as_this_models_damage():
    """With the sidebar's dtype at bfloat16, the page drew assets/budget_sweep_default.json (recorded in float32)
    beside its own bf16 measurement (fp8 99.2 % on the chart, 97.7 % measured live) and called the recording
    machine-independent. A recording of another dtype is not this model's: the page offers to measure instead."""
    import json

    from engine.paths import ASSETS
    from ui.apptest import app_test, page

    recorded = json.loads((ASSETS / "budget_sweep_default.json").read_text())["dtype"]
    at = app_test()
    at.run()
    at.switch_page(page("budget")).run(timeout=300)
    captions = " ".join(c.value for c in at.caption)
    from topics.budget.records import SHORT_DTYPE

    assert f"recorded in {SHORT_DTYPE.get(recorded, recorded)} on " in captions  # fp32: the recording's own
    at.sidebar.selectbox(key="side_dtype").set_value("bfloat16").run(timeout=300)
    assert not at.exception and at.session_state["lm"].dtype_name == "bfloat16" != recorded
    assert "recorded in" not in " ".join(c.value for c in at.caption)
    assert any(b.key == "budget_sweep_go" and b.label.startswith("Measure every policy") for b in at.button)


@pytest.mark.slow
def test_a_dtype_switched_after_a_measurement_measures_again_and_the_heavy_note_names_no_missing_chart():
    """fp8 measured in float32, then the sidebar set to bfloat16: the page kept "Holds 224.0 KiB of the full fp32
    cache's 512.0 KiB (44%)" beside a caption reading bfloat16 (the kept measurement was keyed by the model alone).
    In bf16 the full cache is bf16's; and "two heavy scores" said "The chart holds both lines" where no chart is
    drawn (no bf16 recording, nothing measured yet)."""
    from ui.apptest import app_test, page

    at = app_test()
    at.run()
    at.switch_page(page("budget")).run(timeout=300)
    at.button(key="budget_scenario_two heavy scores").click().run(timeout=300)  # fp32: the recording draws the chart
    assert any("The chart *Damage against the budget* holds both lines" in i.value for i in at.info)
    at.button(key="budget_scenario_fp8 forgets nothing").click().run(timeout=300)
    holds = next(m.value for m in at.markdown if m.value.startswith("Holds "))
    assert "of the full fp32 cache's" in holds
    at.sidebar.selectbox(key="side_dtype").set_value("bfloat16").run(timeout=300)  # the click after the change
    assert not at.exception and at.session_state["lm"].dtype_name == "bfloat16"
    holds = next(m.value for m in at.markdown if m.value.startswith("Holds "))
    assert "of the full bf16 cache's" in holds and "fp32" not in holds.split(" · ")[0]
    at.button(key="budget_scenario_two heavy scores").click().run(timeout=300)
    note = next(i.value for i in at.info if "H2O's plain sum" in i.value)
    assert not at.get("plotly_chart") or all("budget_divergence" not in str(c.proto) for c in at.get("plotly_chart"))
    assert "The chart *Damage against the budget* holds both lines" not in note and "to draw both lines" in note


@pytest.mark.slow
def test_on_gpt2_the_budget_page_names_its_learned_positions_and_points_at_no_missing_section():
    """With tinystories-gpt2 the page said a held key "keeps the RoPE rotation" (GPT-2 adds a learned position table
    at its input, and has no RoPE) and pointed "every story, with its spread, below" at a section no recording
    draws for it."""
    from topics.budget.stories import recorded_stories
    from ui.apptest import app_test, page

    at = app_test()
    at.run()
    at.sidebar.selectbox(key="side_model").set_value("tinystories-gpt2").run(timeout=300)
    at.switch_page(page("budget")).run(timeout=300)
    assert not at.exception and not at.error
    lm = at.session_state["lm"]
    assert lm.spec.position_table > 0 and recorded_stories(lm) is None  # the facts the words follow
    said = " ".join(m.value for m in at.markdown)
    assert "learned position embedding" in said and "RoPE rotation of the position" not in said
    at.button(key="budget_sweep_go").click().run(timeout=600)  # no recording for gpt2: measured here, then ranked
    assert not at.exception
    ranking = next(c.value for c in at.caption if c.value.startswith("Eviction policies holding"))
    assert "(one text, no interval;" in ranking and "below" not in ranking
    assert not any(s.value.startswith("Every story") for s in at.subheader)


def test_the_ranking_under_the_chart_names_the_budget_it_ranks_beside_the_sliders():
    """At budget 129 the caption ranked the policies "holding 64 positions" with nothing to say why: the sweep
    measured 8, 16, 32, 64 and 128 only. It now ranks at the sweep's budget nearest the slider's, and says so."""
    from ui.apptest import app_test, page

    at = app_test().run()
    at.switch_page(page("budget")).run(timeout=300)
    for budget, ranked in ((129, 128), (64, 64), (40, 32)):
        at.slider(key="budget_budget").set_value(budget).run(timeout=300)
        assert not at.exception, [e.value for e in at.exception]
        said = next(c.value for c in at.caption if c.value.startswith("Eviction policies holding"))
        assert said.startswith(f"Eviction policies holding {ranked} positions"), said
        assert (f"nearest the slider's {budget}" in said) == (budget != ranked)
