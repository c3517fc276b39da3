"""Every order, not the best one: the queue scenario's requests dealt into random orders, each scheduled with
continuous and with static batching by the real scheduler, no pass run.

The step counts need no model pass because every request makes all its tokens: the tests hold the schedule-only
count to a real run's (the bundled model deciding every token), and the spread to what a class must read off it."""

from __future__ import annotations

import numpy as np
import pytest

from engine.generate.serving import ServingRun
from topics.serving.orders import ORDERS, order_spread, schedule_steps, shuffled
from topics.serving.scenarios import SCENARIOS

QUEUE = SCENARIOS["queue"]

# One worker runs every test that reads the queue's spread (pytest.ini's --dist loadgroup; the Serving page's queue
# test in tests/test_serving_page.py too): 200 orders scheduled both ways, ~2 s, once a run, in the page's own cache.
pytestmark = pytest.mark.xdist_group("queue")


# A random order is the same claim on other arrivals, ~0.5 s a way: slow. In the fast tier the shipped order holds a
# real run to the schedule, and 30 random orders hold the schedule to the rules written by hand (below).
@pytest.mark.parametrize("seed", [None, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_the_schedule_alone_counts_the_steps_a_real_run_takes(bundled_lm, seed, batching):
    """The shipped order (72 and 176 steps, as an independent simulation reproduced them) and a random one: the
    real run, the bundled model choosing every token, takes exactly the steps the schedule alone counts."""
    specs = QUEUE["requests"] if seed is None else shuffled(QUEUE["requests"],
                                                            np.random.default_rng(seed).permutation(12))
    run = ServingRun(bundled_lm, specs, stop_on_eos=False, record=False, **{**QUEUE["sizing"], "batching": batching})
    run.run()
    assert schedule_steps(bundled_lm, specs, QUEUE["sizing"], batching) == run.step_index
    if seed is None:
        assert run.step_index == {"continuous": 72, "static": 176}[batching]


def test_random_orders_deal_the_same_requests_into_the_same_arrivals():
    order = np.random.default_rng(0).permutation(12)
    specs = shuffled(QUEUE["requests"], order)
    assert [s.arrive for s in specs] == [s.arrive for s in QUEUE["requests"]]
    key = sorted((s.prompt, s.max_new_tokens) for s in specs)
    assert key == sorted((s.prompt, s.max_new_tokens) for s in QUEUE["requests"])
    assert specs != QUEUE["requests"]


@pytest.fixture(scope="module")
def spread():
    """The spread the Serving page shows for the queue: the page's model and cache, so the page tests on this worker
    read it without scheduling it again."""
    from engine.load.load import DEFAULT_MODEL
    from topics.serving.page import queue_spread
    from ui.model import get_model

    return queue_spread(get_model(DEFAULT_MODEL, "auto", "auto"), QUEUE["requests"], QUEUE["sizing"])


def test_the_shipped_order_is_the_most_favourable_and_the_median_order_still_wins(spread):
    """200 seeded orders: the shipped one gives x2.44 (176 / 72), no random order gives more; the median order
    still gives continuous batching at least x1.5 fewer steps, and p10 < median < p90 < shipped."""
    assert spread.orders == len(spread.ratios) == ORDERS >= 200
    assert spread.shipped == pytest.approx(176 / 72) and spread.shipped_steps == (72, 176)
    assert spread.shipped_is_most_favourable and spread.shipped >= max(spread.ratios)
    assert spread.at_or_above_shipped < 0.05  # the shipped order is the exception, not the rule
    assert 1.5 <= spread.median < spread.shipped
    assert 1.0 < spread.p10 < spread.median < spread.p90 < spread.shipped
    assert len(set(spread.ratios)) > 10  # the orders really differ
    assert spread.median == pytest.approx(float(np.median(spread.ratios)))


def test_the_same_seed_gives_the_same_orders(bundled_lm, spread):
    again = order_spread(bundled_lm, QUEUE["requests"], QUEUE["sizing"], orders=20)
    assert again.ratios == spread.ratios[:20]


def test_the_histogram_marks_the_shipped_order_and_the_spread(spread):
    from topics.serving import draw

    fig = draw.order_figure(spread)
    (hist,) = [t for t in fig.data if t.type == "histogram"]
    assert list(hist.x) == list(spread.ratios)
    # drawn as it is said: no random order gives more than the shipped one, so no bar reaches past its line (the
    # bins' edges are numpy's, from the figure's own start, end and size)
    b = hist.xbins
    edges = np.arange(b.start, b.end + b.size / 2, b.size)
    counts, _ = np.histogram(spread.ratios, edges)
    assert counts.sum() == len(spread.ratios)
    assert max(right for right, n in zip(edges[1:], counts) if n) <= spread.shipped + 1e-6
    notes = [a.text for a in fig.layout.annotations]
    assert f"shipped order: most favourable ×{spread.shipped:.2f}" in notes
    assert {"median", "p10", "p90"} <= set(notes) and f"median ×{spread.median:.2f}" in fig.layout.title.text
    lines = {s.line.dash: s.x0 for s in fig.layout.shapes}  # the median dashed, the shipped order a plain line
    assert lines["dash"] == spread.median and lines[None] == spread.shipped
    said = draw.order_sentence(spread)
    assert "the most favourable" in said and f"median of x{spread.median:.2f}" in said
    assert f"p10 x{spread.p10:.2f}, p90 x{spread.p90:.2f}" in said


def test_the_queue_page_shows_every_order():
    from tests.test_serving_page import serving_page

    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(QUEUE["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    assert not at.exception and not at.error
    assert any(s.value == "The same requests in every order" for s in at.subheader)
    assert any("the most favourable to continuous batching" in m.value for m in at.markdown)


def steps_by_hand(prompt_lens: list[int], new_tokens: list[int], arrivals: list[int], slots: int, budget: int,
                  batching: str) -> int:
    """The queue scenario's rules written out with plain numbers, no scheduler, no blocks (the pool is big enough):
    each step, arrivals join the queue; running requests in admission order feed 1 token (decoding) or the next
    chunk of their prompt, while the token budget lasts; then the queue's front is admitted while a slot and budget
    are free. A request makes a token in the pass that computes its last prompt token, then one a pass. Static: a
    batch is the queue's front when the last batch is all done, and only its members take slots."""
    n = len(prompt_lens)
    computed, made, admitted = [0] * n, [0] * n, []
    waiting, batch, step = [], [], 0
    done = lambda i: made[i] == new_tokens[i]  # noqa: E731
    while not all(done(i) for i in range(n)):
        waiting += [i for i in range(n) if arrivals[i] == step]
        if batching == "static" and all(done(i) for i in batch):
            batch = waiting[:slots]
        left = budget
        fed = {}
        for i in admitted:
            if not done(i) and left > 0:
                need = 1 if computed[i] >= prompt_lens[i] else prompt_lens[i] - computed[i]
                fed[i] = min(need, left)
                left -= fed[i]
        while waiting and left > 0:
            i = waiting[0]
            running = sum(not done(j) for j in admitted)
            if (batching == "static" and i not in batch) or (batching == "continuous" and running >= slots):
                break
            waiting.pop(0)
            admitted.append(i)
            fed[i] = min(prompt_lens[i], left)
            left -= fed[i]
        for i, k in fed.items():
            computed[i] += k
            if computed[i] >= prompt_lens[i]:
                made[i] += 1
        step += 1
        assert step < 10_000
    return step


def test_the_scheduler_counts_the_steps_the_rules_written_by_hand_count(bundled_lm):
    """The shipped order and 30 random ones (seed 1): the real scheduler's engine steps, both ways, are the steps the
    rules written out above count on plain numbers (the shipped order: 72 and 176, as an independent simulation
    reproduced them)."""
    sizing = QUEUE["sizing"]
    rng = np.random.default_rng(1)
    orders = [QUEUE["requests"]] + [shuffled(QUEUE["requests"], rng.permutation(12)) for _ in range(30)]
    for specs in orders:
        lens = [len(bundled_lm.tokenizer(s.prompt)["input_ids"]) for s in specs]
        for batching in ("continuous", "static"):
            hand = steps_by_hand(lens, [s.max_new_tokens for s in specs], [s.arrive for s in specs],
                                 sizing["max_seqs"], sizing["max_batch_tokens"], batching)
            assert schedule_steps(bundled_lm, specs, sizing, batching) == hand, (batching, specs)
    lens = [len(bundled_lm.tokenizer(s.prompt)["input_ids"]) for s in QUEUE["requests"]]
    assert [steps_by_hand(lens, [s.max_new_tokens for s in QUEUE["requests"]], [s.arrive for s in QUEUE["requests"]],
                          4, 64, b) for b in ("continuous", "static")] == [72, 176]
