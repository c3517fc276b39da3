"""Each request's attention reads its own blocks: the paged pass's attention work grows linearly with the batch.

Scoring every query of the pass against every request's keys and masking the other requests' would be T x Σ kv_len
scores per head and layer, batch² at a fixed context. The one call per layer lays the requests out as a batch, each
against its own keys: batch x max q_len x max kv_len scores (engine.forward.paged.attention_work counts them off
the tensors), of which Σ q_len_i x kv_len_i are needed; for equal decodes every score is needed.
"""

from __future__ import annotations

from engine.forward.paged import PagedKV, PagedPass, Row, attention_work, run_paged, run_paged_pass
from engine.generate.serving import RequestSpec, ServingRun


def test_decode_attention_work_is_linear_in_the_batch(bundled_lm):
    """The bundled model: 4 layers, 8 heads of 32 (K and V). B requests at 64 positions each score 65 keys (the 64
    cached and their own) in each of 4 layers: 260 B scores per head, 2 x 8 x (32 + 32) = 1,024 FLOPs a score."""
    s = bundled_lm.spec
    assert (s.layers, s.heads, s.k_dim, s.v_dim) == (4, 8, 32, 32)
    work = {b: attention_work(bundled_lm, b, 64) for b in (1, 2, 8, 32)}
    for b, w in work.items():
        assert w.scores == w.needed == b * 4 * 65
        assert w.flops == w.scores * 2 * 8 * (32 + 32)
        assert w.forward_ms > 0
    assert work[32].flops == 8_519_680  # 8.5 MFLOP at batch 32 (scoring every request's keys: 32 x that)
    assert work[32].scores == 32 * work[1].scores  # linear, not 32² = 1,024 x


def test_a_mixed_pass_scores_each_requests_own_keys_only(bundled_lm):
    """A prefill chunk of 5 tokens at position 3 beside two decodes at 10 and 20 positions: 5 x 8 + 11 + 21 scores a
    layer are needed; the one call computes the padded 3 x 5 x 21 (every request's queries up to the longest q_len,
    against its keys up to the longest kv_len)."""
    kv = PagedKV(bundled_lm, num_blocks=12, page_size=4)
    rows = [Row((1, 2, 3, 4, 5), 3, tuple(range(8)), True),
            Row((6,), 10, tuple(range(8, 19)), True),
            Row((7,), 20, tuple(range(20, 41)), True)]
    p = PagedPass(kv, rows)
    run_paged_pass(bundled_lm, p)
    assert p.needed == bundled_lm.spec.layers * (5 * 8 + 11 + 21)
    assert p.scored == bundled_lm.spec.layers * 3 * 5 * 21
    assert run_paged(bundled_lm, kv, rows).logits.shape[1] == 3  # one row of logits per emitting request


def test_a_batch_of_32_serves_each_request_its_own_tokens(bundled_lm):
    """The same prompt 32 times, all at once: every request gets the tokens of the first, and of the Stepper alone."""
    from engine import Stepper

    prompt = "Once upon a time"
    run = ServingRun(bundled_lm, [RequestSpec(prompt, 8, 0)] * 32, stop_on_eos=False, prefix_sharing=False)
    run.run()
    alone = Stepper(bundled_lm, prompt, max_new_tokens=8, stop_on_eos=False, record=False, repeats=1)
    alone.run()
    assert all(r.generated_ids == alone.generated_ids for r in run.requests)
    assert max(len(s.rows) for s in run.records) == 32
