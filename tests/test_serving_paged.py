"""One paged pass, one attention call per layer: every request of a step attends in the same call, reading its keys
and values through its own block table, and gets the tokens transformers' own generate gives its prompt alone.

The reference is transformers' greedy `generate` on its own copy of the model (tests/reference.py), never the
engine; the block-table test plants values in every slot a request does not own and holds its logits unchanged.
"""

from __future__ import annotations

import pytest
import torch

from engine.forward import capture
from engine.forward.paged import PagedKV, PagedPass, Row, run_paged
from engine.generate.serving import ServingRun
from engine.load.load import MODELS_DIR
from tests import reference
from topics.serving.scenarios import SCENARIOS


@pytest.fixture
def attention_calls(monkeypatch):
    """Per paged pass: how many times the layers' attention was called (a spy on PagedPass.attend)."""
    calls: list[int] = []
    attend = PagedPass.attend

    def spy(self, *args, **kwargs):
        if not calls or calls[-1][0] is not self:
            calls.append([self, 0])
        calls[-1][1] += 1
        return attend(self, *args, **kwargs)

    monkeypatch.setattr(PagedPass, "attend", spy)
    return calls


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_gives_each_request_transformers_own_greedy_tokens_alone(bundled_lm, name, attention_calls):
    """Every scenario of the Serving page (arrivals, a shared prefix, chunked prefill, preemption, the prefix cache,
    a queue), fp32 and greedy: each request's tokens are transformers' generate for its prompt alone; and every
    pass called attention once per layer, however many requests it held."""
    sc = SCENARIOS[name]
    run = ServingRun(bundled_lm, sc["requests"], stop_on_eos=False, record=True, **sc["sizing"])
    run.run()
    assert str(bundled_lm.dtype) == "torch.float32"
    for r in run.requests:
        theirs = reference.greedy(MODELS_DIR / "tinystories-llama", r.ids[:, :r.prompt_len], r.max_new_tokens)
        assert r.generated_ids == theirs.tokens, (name, r.id)
    passes = [s for s in run.records if s.rows]
    assert len(attention_calls) == len(passes)
    assert {n for _, n in attention_calls} == {bundled_lm.spec.layers}  # one call per layer, every pass
    if name != "prefix_cache":  # (its requests never overlap: each comes after the one before has finished)
        assert max(len(s.rows) for s in passes) > 1  # passes with several requests in them
    if name == "preemption":
        assert run.preemptions > 0
    if name in ("shared_prefix", "prefix_cache"):
        assert run.prefix_hit_tokens > 0
    if name == "long_prompt":
        assert max(r.chunks for r in run.requests) > 1


def mixed_rows(page_size: int = 4) -> list[Row]:
    """A prefill chunk of 5 tokens at position 3 (blocks 0-1), a decode at position 10 (blocks 3-5, not in order of
    the pool) and one at position 20 (blocks 6-11): a pass whose requests differ in q_len and kv_len."""
    def slots(blocks, n):
        return tuple(b * page_size + i for b in blocks for i in range(page_size))[:n]

    return [Row((1, 2, 3, 4, 5), 3, slots([0, 1], 8), True),
            Row((6,), 10, slots([5, 3, 4], 11), True),
            Row((7,), 20, slots([6, 7, 8, 9, 10, 11], 21), True)]


def decode_rows(page_size: int = 4) -> list[Row]:
    """Three decodes at 5, 10 and 20 positions: one token each, three kv_lens (the shorter ones' keys padded)."""
    return [Row((8,), 4, tuple(range(12 * page_size, 12 * page_size + 5)), True), *mixed_rows(page_size)[1:]]


@pytest.mark.parametrize("rows", [mixed_rows(), decode_rows()], ids=["prefill chunk and decodes", "decodes"])
def test_a_request_reads_no_block_outside_its_own_table(bundled_lm, rows):
    """Values planted in every slot a request's table does not hold (the other requests' blocks, free blocks and the
    null slot padding reads) leave its logits exactly as they were; planted in its own blocks, they change them."""
    torch.manual_seed(0)
    base = PagedKV(bundled_lm, num_blocks=16, page_size=4)
    for t in base.keys + base.values:  # what earlier passes left: keys and values of every position
        t[:-1].normal_()

    def logits(plant_outside: int | None = None, plant_inside: int | None = None) -> torch.Tensor:
        kv = PagedKV(bundled_lm, num_blocks=16, page_size=4)
        kv.keys, kv.values = [t.clone() for t in base.keys], [t.clone() for t in base.values]
        for i, inside in ((plant_outside, False), (plant_inside, True)):
            if i is None:
                continue
            own = torch.zeros(kv.keys[0].shape[0], dtype=torch.bool)
            own[list(rows[i].slots[:rows[i].start])] = True  # the positions it reads and this pass does not write
            where = own if inside else ~own
            where[list(rows[i].slots[rows[i].start:])] = False  # the pass writes these itself
            for t in kv.keys + kv.values:
                t[where] = 1e3 * torch.randn_like(t[where])
        return run_paged(bundled_lm, kv, rows).logits[0]

    clean = logits()
    for i in range(len(rows)):
        assert torch.equal(logits(plant_outside=i)[i], clean[i]), f"request {i} read a slot outside its table"
        assert not torch.allclose(logits(plant_inside=i)[i], clean[i]), "the plant did not reach the pass"


def test_the_mask_lets_each_query_see_its_own_causal_range_and_nothing_else(bundled_lm):
    """The mask of a mixed pass, against the rule written out by hand: request i's query at position p sees key_pos
    k iff k <= p (and p - k < the window); its padded keys and padded queries see nothing of another request."""
    rows = mixed_rows()
    p = PagedPass(PagedKV(bundled_lm, num_blocks=16, page_size=4), rows)
    assert p.shape == (3, 5, 21)
    for window in (None, 4):
        mask = p.mask(window, torch.float32)
        assert mask.shape == (3, 1, 5, 21)
        for i, r in enumerate(rows):
            for j in range(r.q_len):
                pos = r.start + j
                seen = [k for k in range(21) if mask[i, 0, j, k] == 0]
                assert seen == [k for k in range(pos + 1) if window is None or pos - k < window], (i, j, window)
    decodes = PagedPass(p.kv, [Row((1,), 7, tuple(range(8)), True), Row((2,), 7, tuple(range(8, 16)), True)])
    assert decodes.mask(None, torch.float32) is None  # equal decodes see every key they read: nothing to add
    read = p.read.view(3, 21)
    for i, r in enumerate(rows):  # the gather reads its own table's slots, then the null slot
        assert read[i, :r.kv_len].tolist() == list(r.slots[:r.kv_len])
        assert set(read[i, r.kv_len:].tolist()) <= {p.kv.null_slot}


def test_a_mixed_pass_is_one_attention_call_per_layer(bundled_lm, attention_calls):
    run_paged(bundled_lm, PagedKV(bundled_lm, num_blocks=16, page_size=4), mixed_rows())
    assert [n for _, n in attention_calls] == [bundled_lm.spec.layers]
    assert capture._paged.get() is None  # the pass is over: nothing is paged any more
