"""The reference for "same tokens and logits as transformers": a second copy of the model, never the engine's.

The engine loads a model with its own registered attention (`decode_lab`, engine/forward/capture.py) so it can
read Q, K and V; `lm.model.generate` then runs through that same function, so a bug there would change the
engine and such a reference alike. The reference here is another model object, built by transformers from the
same weights file with transformers' own eager attention, and checked to be so (`assert_independent`): its
config asks for "eager", "eager" resolves to the function in the model's own modeling file (nothing registered
over it), no hook sits on any of its modules, and a pass of it under the engine's recording records nothing.

    model(path)                             -> that copy (loaded once, checked)
    greedy(path, prompt_ids, n, use_cache)  -> Reference(tokens, logits): transformers' greedy `generate` on that
                                               copy; logits[i] [vocab] are the raw scores that chose tokens[i]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache

import torch

# How close the engine's logits must be, as a share of the row's largest |logit|. A pass of the same shape as the
# reference's runs the same float32 CPU kernels in the same order: measured equal to the last bit, on every tiny
# family and the bundled models, cache on and off. A pass of another shape (a speculative verify of k+1 rows, a
# paged serving pass of many requests) sums in another order: measured up to 6e-7 of the largest logit. A 1%
# error in the attention temperature moves logits by 8e-6 (tiny GPT-2) to 4e-3 (the bundled models) of it.
LOGIT_TOLERANCE = 4e-6


@dataclass(frozen=True)
class Reference:
    tokens: list[int]  # the new tokens, greedy
    logits: list[torch.Tensor]  # per new token: [vocab] float32 raw logits of the pass that chose it


@cache
def model(path: str):
    """transformers' own copy of the model in `path`: float32 on the CPU, eager attention, no engine in it, and
    no generation settings stored with the model (a repetition penalty, an end token, a length) to change them."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    m = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32,
                                             use_safetensors=True).eval()
    m.generation_config = GenerationConfig()
    assert_independent(m)
    return m


def assert_independent(m) -> None:
    """The copy attends with transformers' eager function and nothing of the engine's can run inside it."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from engine.forward import capture

    assert m.config._attn_implementation == "eager"
    modeling = sys.modules[type(m).__module__]
    own = getattr(modeling, "eager_attention_forward", None)
    assert ALL_ATTENTION_FUNCTIONS.get_interface("eager", own) is own, "something is registered over 'eager'"
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules()), "a hook on the reference"
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode(), capture.recording() as captured:  # the engine's attention would note each layer
        m(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert captured == [], "the reference ran through the engine's attention function"


def greedy(path, prompt_ids: torch.Tensor, new_tokens: int, use_cache: bool = True, **assist) -> Reference:
    """transformers' greedy generate on its own copy: `new_tokens` tokens, EOS an ordinary token, and the raw
    logits of every step (output_logits: before any processor). `assist` passes assisted-generation arguments
    through (assistant_model=another copy, prompt_lookup_num_tokens=...)."""
    m = model(str(path))
    ids = prompt_ids.cpu()
    with torch.inference_mode():
        out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         do_sample=False, use_cache=use_cache, eos_token_id=None, pad_token_id=0,
                         output_logits=True, return_dict_in_generate=True, **assist)
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    return Reference(tokens, [row[0].float() for row in out.logits])


def assert_logits_close(mine: torch.Tensor, theirs: torch.Tensor, what: str = "") -> None:
    """mine [vocab] equals theirs [vocab] to LOGIT_TOLERANCE of the row's largest |logit|."""
    theirs = theirs.float().cpu()
    torch.testing.assert_close(mine.float().cpu(), theirs, rtol=0, atol=LOGIT_TOLERANCE * float(theirs.abs().max()),
                               msg=lambda m: f"logits differ from transformers' ({what}): {m}")
