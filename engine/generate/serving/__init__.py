"""Serving: many requests on one model, continuous batching over a paged KV cache, one step at a time.

    requests.py   a request: a sequence of the one generation loop, plus its place in the server
    blocks.py     the block manager: block tables, ref counts, prefix hashes, the free list
    scheduler.py  what shares the next pass: decodes, prefill chunks, preemption, prefix sharing
    run.py        ServingRun.step(): arrivals -> schedule -> one paged pass -> tokens -> the record
    record.py     the frozen record of one step (what the Serving page draws)
    scenarios.py  the page's four scenarios in one click
    reference.py  transformers' own continuous batching (generate_batch), to check tokens and time against
"""

from engine.generate.serving.requests import RequestSpec  # noqa: F401
from engine.generate.serving.run import DEFAULTS, ServingRun  # noqa: F401
