"""transformers' own continuous batching, `generate_batch`: the reference our serving run is checked and timed against.

Every call to its API is here, pinned to the transformers version in requirements.txt (5.23): it is young
and its options move (what it does not make public, its logger and its request ids, is read through
engine/transformers_internals.py). Why the engine has its own scheduler and block manager instead of stepping this one:
it cannot run the shared model as loaded (it refuses the engine's attention, which reads Q/K/V and masks
paged passes: it wants its own 'paged|sdpa'), it preempts by copying blocks to CPU memory rather than
recomputing, and it schedules from a background loop whose state is not meant to be read between steps.
So it runs here on a copy of the model, with the same sizing, and gives the tokens and the time to beat.
"""

from __future__ import annotations

import copy
import logging

from engine.load.loaded import LoadedModel
from engine.timing import span

ATTENTION = "sdpa"  # generate_batch switches it to its paged variant itself


def generate_batch(lm: LoadedModel, prompts: list[list[int]], new_tokens: int, *, page_size: int, num_blocks: int,
                   max_batch_tokens: int, model=None) -> tuple[list[list[int]], float]:
    """Greedy, exactly `new_tokens` per request (end-of-text an ordinary token). Returns the tokens of each request,
    in order, and the wall time in ms of the whole call (its setup included: that is what a caller pays).

    `model`: a copy made by `reference_model`, to time several calls without copying each time."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from engine.transformers_internals import BATCH_LOGGER, batch_tokens

    model = model or reference_model(lm)
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1,
                              pad_token_id=lm.tokenizer.eos_token_id or 0)
    cb = ContinuousBatchingConfig(page_size=page_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens)
    quiet = logging.getLogger(BATCH_LOGGER)
    level, quiet.level = quiet.level, logging.CRITICAL  # it logs that psutil is missing, on every call
    try:
        with lm.turn():
            with span(lm.device) as took:
                out = model.generate_batch(prompts, generation_config=config, continuous_batching_config=cb,
                                           max_new_tokens=new_tokens)
            ms = took.ms
    finally:
        quiet.level = level
    return batch_tokens(out), ms


def reference_model(lm: LoadedModel):
    """A copy of the loaded model with the attention generate_batch accepts (the shared one stays as it is)."""
    model = copy.deepcopy(lm.model)
    model.set_attn_implementation(ATTENTION)
    return model
