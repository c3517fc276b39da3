"""The Serving page's scenarios, in one click each: the requests, the pool, and what to look at.

Each is a plain dict: a title, why it is worth watching, the requests (prompt, max new tokens, arrival
step), and the sizing (page size, blocks, token budget, prefix sharing, chunked prefill, and where it
matters the preemption policy: "newest" or "most_blocks", or the batch slots and how a freed one is refilled:
"continuous" or "static", knobs a page can switch to compare them). The
page and `python -m engine serve --scenario NAME` run them as they are.
"""

from __future__ import annotations

from engine.generate.serving.requests import RequestSpec

SYSTEM = ("You are a kind storyteller for little children. You tell short, happy stories about animals, friends "
          "and family, and every story has a happy ending. Here is the story you asked for. ")
LONG = ("Once upon a time, in a small house near the woods, there lived a little boy named Sam. Sam loved to explore. "
        "Every morning he put on his green hat and walked to the river to look for frogs. One sunny day, he found "
        "something strange by the water. It was a big blue box with a red bow. Sam looked at the box and wondered "
        "what was inside. He called his friend Mia and they opened it together. Inside the box was a small brown "
        "puppy with big eyes. The puppy was cold and hungry. Sam and Mia took the puppy home and gave it some warm "
        "milk. Sam's mom smiled and said they could keep the puppy if they took good care of it. Sam and Mia were "
        "so happy. They named the puppy Max. Every day after that, Sam, Mia and Max")
SHORT = ["Once upon a time", "Tom had a red ball. He", "The sun was hot and the dog", "Lily and Max went to the park",
         "One day, a little girl named Amy found a baby bird.", "Ben wanted a cookie, so he"]

QUEUE = ["Once upon a time", "Tom had a red ball. He", "The sun was hot and the dog", "Lily and Max went to the park",
         "One day, a little girl named Amy found a baby bird.", "Ben wanted a cookie, so he",
         "The little cat was sad because", "Mia shared her cake with her friends.", "A big fish lived in the pond.",
         "Sam and his dad built a boat.", "The old owl looked down at the", "It was raining, so Anna stayed"]
QUEUE_LENGTHS = [64, 16, 8, 8, 64, 12, 8, 8, 48, 8, 12, 8]  # each four in a row: one long, three short
QUEUE_ARRIVALS = [0, 0, 0, 0, 2, 4, 6, 8, 10, 12, 14, 16]  # a full first batch, then one request every other step

SCENARIOS: dict[str, dict] = {
    "arrivals": {
        "title": "1. Requests arriving over time",
        "why": "Six requests arrive two steps apart. Each joins the very next pass: its prompt is prefilled in "
               "the same forward pass as everyone else's decode token, its blocks are taken from the free pool "
               "as it grows, and given back the step it finishes.",
        "requests": [RequestSpec(p, n, 2 * i) for i, (p, n) in enumerate(zip(SHORT, [28, 20, 32, 16, 24, 20]))],
        "sizing": {"page_size": 8, "num_blocks": 48, "max_batch_tokens": 64, "prefix_sharing": True,
                   "chunking": True},
    },
    "shared_prefix": {
        "title": "2. A shared system prompt",
        "why": "Four requests start with the same system prompt. The first computes its blocks; every later one "
               "finds the same full blocks already held (by a hash of the whole prefix), adds itself to their "
               "reference count, and prefills only what is its own.",
        "requests": [RequestSpec(SYSTEM + q, 20, 3 * i) for i, q in enumerate(
            ["A cat named Tom", "Lily and her red ball", "The big brown bear", "Two little birds"])],
        "sizing": {"page_size": 8, "num_blocks": 48, "max_batch_tokens": 64, "prefix_sharing": True,
                   "chunking": True},
    },
    "long_prompt": {
        "title": "3. A long prompt: chunked prefill",
        "why": "Three short requests are decoding when a long prompt arrives. With chunked prefill the long "
               "prompt is cut into pieces that fit the token budget beside the decodes, so every decoding row "
               "keeps getting a token each step. Switch chunking off: one pass takes the whole prompt and every "
               "decode waits.",
        "requests": [RequestSpec(SHORT[0], 40, 0), RequestSpec(SHORT[1], 40, 0), RequestSpec(SHORT[2], 40, 1),
                     RequestSpec(LONG, 16, 6)],
        "sizing": {"page_size": 8, "num_blocks": 64, "max_batch_tokens": 48, "prefix_sharing": True,
                   "chunking": True},
    },
    "preemption": {
        "title": "4. A pool too small: preemption",
        "why": "Five requests want more blocks than the pool has. When a running request needs a block and none "
               "is free, one running request is preempted: its blocks are freed and it goes back to the "
               "front of the queue. When there is room again its keys and values are recomputed from its tokens "
               "(red), and it goes on exactly where it was. Which one goes is the preemption policy: 'newest goes' "
               "(vLLM's: the last admitted, so the oldest always progress) or 'most blocks go' (the one holding "
               "the most blocks: the most room freed at once). Switch it and compare.",
        "requests": [RequestSpec(p, 32, i) for i, p in enumerate(SHORT[:5])],
        "sizing": {"page_size": 8, "num_blocks": 14, "max_batch_tokens": 64, "prefix_sharing": True,
                   "chunking": True, "preemption": "newest"},
    },
    "prefix_cache": {
        "title": "5. Later requests: the prefix cache",
        "why": "Three requests share a system prompt but never overlap: each arrives after the one before has "
               "finished. Its full blocks are not dropped when it ends: they stay cached (free to evict), and the "
               "next request takes them back by their prefix hash and prefills only its own words. Cached blocks "
               "are evicted, least recently used first, only when the pool needs room.",
        "requests": [RequestSpec(SYSTEM + q, 8, 12 * i) for i, q in enumerate(
            ["A cat named Tom", "The big brown bear", "Two little birds"])],
        "sizing": {"page_size": 8, "num_blocks": 48, "max_batch_tokens": 64, "prefix_sharing": True,
                   "chunking": True},
    },
    "queue": {
        "title": "6. A queue: too few batch slots",
        "why": "Twelve requests asking for 8 to 64 new tokens each arrive over time for 4 batch slots, so a queue "
               "forms. Continuous batching gives a slot back the pass its request finishes: the next in the queue "
               "is prefilled in the very next pass, beside the decodes. Switch to static batching: a batch starts "
               "only when the one before has finished, so its short requests' rows are padding (hatched: computed "
               "and thrown away) until its longest member is done, while the queue waits. Compare both: the same "
               "tokens, measured side by side.",
        "requests": [RequestSpec(p, n, a) for p, n, a in zip(QUEUE, QUEUE_LENGTHS, QUEUE_ARRIVALS)],
        "sizing": {"page_size": 8, "num_blocks": 48, "max_batch_tokens": 64, "prefix_sharing": True,
                   "chunking": True, "max_seqs": 4, "batching": "continuous"},
    },
}


def scenario(name: str) -> dict:
    if name not in SCENARIOS:
        from engine.errors import StepError

        raise StepError(f"No scenario named '{name[:40]}': choose one of {', '.join(SCENARIOS)}.")
    return SCENARIOS[name]
