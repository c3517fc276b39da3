"""Decode Lab engine: load a causal LM and step it through prefill and decode.

Everything that thinks lives here; nothing here imports streamlit.

Shape vocabulary (used in code comments, trace field names and UI labels alike):

    batch     sequences processed together (1 on the step-through page)
    pos       token positions: `q_len` new positions computed this step,
              `kv_len` positions attended to (prompt + generated so far)
    head      query heads (`num_attention_heads`)
    kv_head   key/value heads (`num_key_value_heads`): == head for MHA,
              fewer for GQA, 1 for MQA
    head_dim  width of one head (usually d_model / head)
    d_model   width of the residual stream (`hidden_size`)
    vocab     number of tokens the model can emit
    layer     transformer block index

Public API (see README):

    lm = load_model("default")                    # -> LoadedModel (lm.spec: its figures)
    s = Stepper(lm, "Once upon a time", use_cache=True, sampling=Sampling())
    s.prefill(); s.decode(); s.run(20)            # -> StepTrace records in s.traces
    report = compare(lm, "Once upon a time", new_tokens=20)
"""

from engine.errors import DecodeLabError, ModelLoadError, StepError  # noqa: F401
from engine.load.load import bundled_models, load_model  # noqa: F401
from engine.load.loaded import LoadedModel  # noqa: F401
from engine.forward.sampling import Sampling  # noqa: F401
from engine.generate.stepper import Stepper  # noqa: F401
from engine.forward.trace import StepTrace  # noqa: F401
from engine.generate.compare import compare  # noqa: F401
