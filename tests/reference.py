"""The reference for "same tokens and logits as transformers": a second copy of the model, never the engine's.

The engine loads a model with its own registered attention (`decode_lab`, engine/forward/capture.py) so it can
read Q, K and V; `lm.model.generate` then runs through that same function, so a bug there would change the
engine and such a reference alike. The reference here is another model object, built by transformers from the
same weights file with transformers' own eager attention, and checked to be so (`assert_independent`): its
config asks for "eager", "eager" resolves to the function in the model's own modeling file (nothing registered
over it), no hook sits on any of its modules, and a pass of it under the engine's recording records nothing.

    greedy(path, prompt_ids, n, use_cache)  -> Reference(tokens, logits): transformers' greedy `generate` on that
                                               copy; logits[i] [vocab] are the raw scores that chose tokens[i]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache

import torch

# The engine and this copy run the same float32 CPU kernels in the same order: their logits were measured equal to
# the last bit, on every tiny family and both bundled models, cache on and off. A 1% error in the attention
# temperature moves them by 5e-6 (tiny GPT-2, logits ~0.5) to 6e-2 (the bundled models, logits ~15): above this.
LOGIT_ATOL = 1e-6
LOGIT_RTOL = 1e-6


@dataclass(frozen=True)
class Reference:
    tokens: list[int]  # the new tokens, greedy
    logits: list[torch.Tensor]  # per new token: [vocab] float32 raw logits of the pass that chose it


@lru_cache(maxsize=None)
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


def greedy(path: str, prompt_ids: torch.Tensor, new_tokens: int, use_cache: bool = True) -> Reference:
    """transformers' greedy generate on its own copy: `new_tokens` tokens, EOS an ordinary token, and the raw
    logits of every step (output_logits: before any processor)."""
    m = model(str(path))
    ids = prompt_ids.cpu()
    with torch.inference_mode():
        out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         do_sample=False, use_cache=use_cache, eos_token_id=None, pad_token_id=0,
                         output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    return Reference(tokens, [row[0].float() for row in out.logits])


def assert_logits_close(mine: torch.Tensor, theirs: torch.Tensor, what: str = "") -> None:
    torch.testing.assert_close(mine.float().cpu(), theirs.float().cpu(), atol=LOGIT_ATOL, rtol=LOGIT_RTOL,
                               msg=lambda m: f"logits differ from transformers' {what}: {m}")
