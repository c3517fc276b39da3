"""Serving: many requests on one model, continuous batching over a paged KV cache, one step at a time.

    requests.py   a request: it holds a Sequence of the one generation loop; its Status, its block table
    blocks.py     the block manager: ref counts, prefix hashes, the free list and the cached blocks a finished
                  request leaves (free to evict, least recently used first); checks (cached_prefix,
                  can_allocate, can_grow) apart from commits (allocate, grow, free)
    scheduler.py  what shares the next pass (a Plan of Phases: prefill, decode, recompute): arrivals,
                  decodes, prefill chunks, preemption (by a named policy), prefix sharing; and the
                  postprocess after the pass
    run.py        ServingRun.step(): schedule -> one paged pass -> postprocess, then the record
    record.py     the frozen record of one step (what the Serving page draws)
"""

from engine.generate.serving.requests import RequestSpec  # noqa: F401
from engine.generate.serving.run import DEFAULTS, ServingRun  # noqa: F401
