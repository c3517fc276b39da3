"""The pool over time: a prefix cache that outlives its request, eviction under pressure, and named preemption
policies. Every request still gets exactly the tokens it gets alone.

    cached     a finished request's full blocks keep their prefix hash (free to evict): a later request with the
               same prefix takes them back, a prefix hit across time
    evicted    only when the pool has no free block left, least recently used first
    policy     which running request is preempted: "newest" (vLLM's) or "most_blocks"
"""

from __future__ import annotations

import json

import pytest

from engine.generate.serving import RequestSpec, ServingRun
from engine.generate.serving.blocks import BlockManager, BlockState
from tests.test_serving import alone
from tests.test_serving import serve as serve_checked
from topics.serving.scenarios import SCENARIOS, SYSTEM

LONG = "Once upon a time, in a small house near the woods, there lived a little boy named Sam."


def serve(lm, specs, **kw) -> ServingRun:
    return serve_checked(lm, specs, check=check_states, **kw)


def check_states(step, run) -> None:
    """Every block is in one state, and the counts a picture draws are those states counted."""
    states = step.block_states
    assert len(states) == run.num_blocks
    assert step.blocks_used == sum(s in (BlockState.IN_USE, BlockState.SHARED) for s in states)
    assert step.blocks_shared == states.count(BlockState.SHARED)
    assert step.blocks_cached == states.count(BlockState.CACHED) <= step.blocks_free
    assert step.blocks_free == states.count(BlockState.FREE) + states.count(BlockState.CACHED)
    for block, refs in enumerate(step.ref_counts):
        assert (refs > 0) == (states[block] in (BlockState.IN_USE, BlockState.SHARED))


def common_prefix(lm, prompts: list[str]) -> int:
    ids = [lm.tokenizer(p)["input_ids"] for p in prompts]
    return next(i for i in range(min(map(len, ids))) if len({tuple(x[: i + 1]) for x in ids}) > 1)


# ---------------------------------------------------------------- a prefix cache that outlives its request


def test_a_request_after_an_identical_prefix_finished_takes_its_blocks_back(bundled_lm):
    """r0 and r1 share SYSTEM (L tokens in common) and never overlap: r1 arrives 12 steps after r0 finished. With
    page P, r1 skips floor(L / P) x P prompt tokens, from blocks r0 left cached; its tokens are those it gets alone."""
    page = 8
    prompts = [SYSTEM + "A cat named Tom", SYSTEM + "The big brown bear"]
    run = serve(bundled_lm, [RequestSpec(prompts[0], 6, 0), RequestSpec(prompts[1], 6, 20)], page_size=page,
                num_blocks=32, max_batch_tokens=64)
    r0, r1 = run.requests
    assert r0.finish_step < r1.arrive  # r0 was done: nobody held its blocks when r1 came
    hits = common_prefix(bundled_lm, prompts) // page * page
    assert hits >= 5 * page and r1.prefix_hit_tokens == hits and r0.prefix_hit_tokens == 0
    before = run.records[r1.arrive - 1]
    assert before.blocks_used == 0 and before.blocks_cached >= hits // page  # r0's full blocks, kept
    taken = dict(run.records[r1.arrive].tables)["r1"][: hits // page]
    assert all(before.block_states[b] == BlockState.CACHED for b in taken)  # taken back from the cache
    assert run.records[r1.arrive].prefix_hits == (("r1", hits),) and run.report()["blocks_evicted"] == 0
    for r in run.requests:
        assert r.generated_ids == alone(bundled_lm, r.prompt, 6)
    off = serve(bundled_lm, [RequestSpec(prompts[0], 6, 0), RequestSpec(prompts[1], 6, 20)], page_size=page,
                num_blocks=32, max_batch_tokens=64, prefix_sharing=False)
    assert off.prefix_hit_tokens == 0 and all(s.blocks_cached == 0 for s in off.records)
    assert sum(s.tokens for s in off.records) - sum(s.tokens for s in run.records) == hits  # computed once, not twice


def test_the_same_prompt_again_later_reuses_every_full_block_of_it(bundled_lm):
    """An identical prompt of n tokens: (n - 1) // P full blocks come back (one token is always left to compute)."""
    n = len(bundled_lm.tokenizer(LONG)["input_ids"])
    run = serve(bundled_lm, [RequestSpec(LONG, 4, 0), RequestSpec(LONG, 4, 10)], page_size=4, num_blocks=24)
    assert run.requests[1].prefix_hit_tokens == (n - 1) // 4 * 4
    assert run.requests[0].generated_ids == run.requests[1].generated_ids == alone(bundled_lm, LONG, 4)


def test_cli_serve_requests_counts_hits_across_time(tmp_path, bundled_lm):
    """The same two requests through `python -m engine serve --requests FILE --json`."""
    from commands.main import main

    prompts = [SYSTEM + "A cat named Tom", SYSTEM + "The big brown bear"]
    path, out = tmp_path / "requests.json", tmp_path / "run.json"
    path.write_text(json.dumps([{"prompt": prompts[0], "max_new_tokens": 6, "arrive": 0},
                                {"prompt": prompts[1], "max_new_tokens": 6, "arrive": 20}]))
    assert main(["serve", "--requests", str(path), "--page-size", "8", "--blocks", "32", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    r0, r1 = doc["requests"]
    assert r0["finish_step"] < r1["arrive"] and r0["prefix_hit_tokens"] == 0
    assert r1["prefix_hit_tokens"] == doc["prefix_hit_tokens"] == common_prefix(bundled_lm, prompts) // 8 * 8
    assert "cached" in doc["steps"][r1["arrive"] - 1]["block_states"]
    for r, prompt in zip(doc["requests"], prompts):  # the CLI stops at end-of-text: compare what it made
        assert r["generated_ids"] == alone(bundled_lm, prompt, 6)[:len(r["generated_ids"])] and r["generated_ids"]


def test_the_prefix_cache_scenario_shows_cached_blocks_and_hits(bundled_lm):
    sc = SCENARIOS["prefix_cache"]
    run = serve(bundled_lm, sc["requests"], **sc["sizing"])
    first, *later = run.requests
    assert all(a.finish_step < b.arrive for a, b in zip(run.requests, later))  # never two at once
    assert first.prefix_hit_tokens == 0 and all(r.prefix_hit_tokens >= 40 for r in later)
    assert any(s.blocks_cached for s in run.records)
    for r in run.requests:
        assert r.generated_ids == alone(bundled_lm, r.prompt, r.max_new_tokens)


# ---------------------------------------------------------------- eviction under pressure


def test_cached_blocks_are_evicted_least_recently_used_first_and_tail_first():
    """Page 4, 6 blocks. A (8 tokens) then B (8 tokens) finish: 4 blocks cached, A's older. A new table of 3 blocks
    takes the 2 free ones, then evicts A's last block (the least recently used, a request's tail first)."""
    bm = BlockManager(num_blocks=6, page_size=4)
    a_ids, b_ids = list(range(100, 109)), list(range(200, 209))  # 9 tokens: 2 full blocks each, 1 to compute
    a, b, c = [], [], []
    for table, ids in ((a, a_ids), (b, b_ids)):
        bm.grow(table, 8)
        bm.register_full(table, ids, computed=8)
    assert (a, b) == ([0, 1], [2, 3])
    bm.free(a)
    bm.free(b)
    assert bm.num_free == 6 and bm.num_cached == 4 and bm.states()[:4] == (BlockState.CACHED,) * 4
    assert bm.cached_prefix(a_ids) == 8 and bm.cached_prefix(b_ids) == 8
    assert bm.can_allocate(list(range(300, 309)), 12) == 3
    bm.allocate(c, list(range(300, 309)), 12)
    assert c == [4, 5, 1] and bm.evicted == 1  # the two free blocks, then A's tail
    assert bm.cached_prefix(a_ids) == 4 and bm.cached_prefix(b_ids) == 8  # A keeps its first block, B both


def test_taking_cached_blocks_back_counts_them_against_the_free_ones():
    """Check, then commit: 4 blocks of 4, A's 12 tokens cached in 3 of them, 1 free. The same 12 tokens + 4 more need
    4 blocks: 3 taken back from the cache and 1 new, all 4 of the pool; + 8 more would need 5: refused."""
    bm = BlockManager(num_blocks=4, page_size=4)
    ids = list(range(17))
    a = []
    bm.grow(a, 12)
    bm.register_full(a, ids, computed=12)
    bm.free(a)
    assert (bm.num_free, bm.num_cached) == (4, 3)
    cached = bm.cached_prefix(ids[:16])
    assert cached == 12
    assert bm.can_allocate(ids[:16], 16, cached) == 4  # 1 new + 3 taken back: every block of the pool
    assert bm.can_allocate(ids[:16], 20, cached) == -1  # would need 5
    assert bm.ref_counts() == (0, 0, 0, 0) and bm.num_cached == 3  # the checks touched nothing
    b = []
    bm.allocate(b, ids[:16], 16, cached)
    assert b == [0, 1, 2, 3] and bm.num_free == 0 and bm.evicted == 0


def test_a_pool_too_small_evicts_and_still_serves_every_token(bundled_lm):
    """Five different prompts one after another, then the first again, in 12 blocks of 4: the cache fills and is
    evicted under pressure; every request gets exactly its own tokens."""
    prompts = [LONG, "Tom had a red ball. He", "The sun was hot and the dog", "Lily and Max went to the park",
               "One day, a little girl named Amy found a baby bird.", LONG]
    specs = [RequestSpec(p, 8, 10 * i) for i, p in enumerate(prompts)]
    run = serve(bundled_lm, specs, page_size=4, num_blocks=12, max_batch_tokens=32)
    assert run.report()["blocks_evicted"] > 0 and any(s.blocks_evicted for s in run.records)
    for r in run.requests:
        assert r.generated_ids == alone(bundled_lm, r.prompt, 8), r.id


# ---------------------------------------------------------------- preemption policies


@pytest.mark.parametrize("policy, victim", [("newest", "r1"), ("most_blocks", "r0")])
def test_each_preemption_policy_picks_its_victim_and_tokens_stay_exact(bundled_lm, policy, victim):
    """r0 (a 22-token prompt) and r1 (7 tokens, one step later), 16 new tokens each, 10 blocks of 4. At step 7 r0
    needs its 8th block and none is free (r0 holds 7, r1 3): 'newest' preempts r1, the last admitted; 'most_blocks'
    preempts r0 itself, the one holding the most."""
    specs = [RequestSpec(LONG, 16, 0), RequestSpec("Tom had a red ball.", 16, 1)]
    run = serve(bundled_lm, specs, page_size=4, num_blocks=10, max_batch_tokens=64, preemption=policy)
    first = next(s for s in run.records if s.preempted)
    held = {rid: len(t) for rid, t in run.records[first.step - 1].tables}
    assert (first.step, held) == (7, {"r0": 7, "r1": 3}) and first.preempted == (victim,)
    assert run.report()["preemption"] == policy
    for r in run.requests:
        assert r.generated_ids == alone(bundled_lm, r.prompt, 16), (policy, r.id)


@pytest.mark.parametrize("policy", ["newest", "most_blocks"])
@pytest.mark.slow  # the fast tier: tests/test_serving_page.py's preemption knob serves it under both, held to alone
def test_the_preemption_scenario_runs_under_either_policy(bundled_lm, policy):
    sc = SCENARIOS["preemption"]
    assert sc["sizing"]["preemption"] == "newest"  # the knob a page switches
    run = serve(bundled_lm, sc["requests"], **{**sc["sizing"], "preemption": policy})
    assert run.preemptions > 0
    for r in run.requests:
        assert r.generated_ids == alone(bundled_lm, r.prompt, r.max_new_tokens)


def test_an_unknown_policy_is_refused_in_one_sentence(bundled_lm):
    from engine import StepError

    with pytest.raises(StepError, match="newest, most_blocks"):
        ServingRun(bundled_lm, [RequestSpec("Tom", 4, 0)], preemption="oldest")


@pytest.mark.parametrize("held, most_blocks", [((2, 3, 3), "r2"), ((3, 3, 2), "r1"), ((4, 1, 1), "r0")])
def test_most_blocks_breaks_a_tie_toward_the_newest_and_newest_is_the_last_admitted(held, most_blocks):
    """Three running requests, admitted r0, r1, r2, holding `held` blocks, none in this pass's plan yet: 'newest'
    (vLLM's: recompute the last to arrive) preempts r2 whatever they hold; 'most_blocks' the one holding the most,
    and among equals the newest (the one vLLM would pick of them)."""
    from types import SimpleNamespace

    from engine.generate.serving.scheduler import Plan, Scheduler

    running = [SimpleNamespace(id=f"r{i}", table=list(range(n))) for i, n in enumerate(held)]
    for policy, victim in (("newest", "r2"), ("most_blocks", most_blocks)):
        s = Scheduler(BlockManager(16, 4), [], 64, preemption=policy)
        s.running.extend(running)
        assert s.victim(Plan()).id == victim, policy
