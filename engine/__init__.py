"""Decode Lab's core: load a causal LM and step it through prefill and decode, one request or many.

The core thinks; nothing here imports streamlit, and nothing here imports a topic (topics/), the classroom
(classroom/) or a page. One folder per step of the story:

    load/       get a model: load_model, the checks before any weight is read, the allow-list
    forward/    run one pass: run_pass (the readable pass), the compiled lean pass, Q/K/V capture, the KV
                cache, the paged pool, sampling, the StepTrace record, a model's figures (ModelSpec),
                FLOPs/bytes estimates
    generate/   generate: the one loop (loop.py: Sequence, Run), the Stepper (prefill, decode), speculative
                rounds, padded batches, cache on vs off, serving (continuous batching over a paged cache)

What the passes cost on a device is physics/ (one layer up): the roofline probed here and its verdicts, the KV
cache's bytes for real models, the model grown until the hardware sets the time (the rungs), one request timed.
The core draws nothing: drawing/ (one layer up again) turns its records into pictures and reads what a head does
off the weights a pass recorded, and each topic keeps its own measuring, drawing and page in one folder
(topics/ladder, serving, speculative, race, budget), its scenarios among them.
The command line (commands/, `python -m commands ...` or its other name `python -m engine ...`) sits above them
all; engine/__main__.py hands over to it without importing it.

Layers: a module imports only from its own layer or the ones before it (tests/test_layers.py checks it):

    errors, paths, device, timing, pins,
    torch_internals, transformers_internals  <  forward  <  load  <  generate  <  __main__

forward runs a pass on whatever model it is given, so it never imports load (load imports forward: it
builds a model's spec and warms it up); the device helpers it needs live below both, in device.py, and the one
clock every time is read from in timing.py (`timed`: perf_counter around a device sync, warm-up apart).

Shape vocabulary (used in code comments, trace field names and UI labels alike):

    batch     sequences processed together (1 on the step-through page)
    pos       token positions: `q_len` new positions computed this step,
              `kv_len` positions attended to (prompt + generated so far)
    past      positions already in the KV cache before a pass (= the position of the first fed token)
    query_pos / key_pos   the two axes of attention: the fed rows, and the positions they look at
    head      query heads (`num_attention_heads`)
    kv_head   key/value heads (`num_key_value_heads`): == head for MHA,
              fewer for GQA, 1 for MQA
    head_dim  width of one head (usually d_model / head)
    d_model   width of the residual stream (`hidden_size`)
    vocab     number of tokens the model can emit
    layer     transformer block index (`layers` counts them)
    new_tokens  tokens a run adds after its prompt (the prefill's choice is the first)
    block, page_size, block table   serving: the pool holds keys and values in blocks of page_size
              positions; a request's block table lists its blocks in order

Public API (see README):

    lm = load_model("default")                    # -> LoadedModel (lm.spec: its figures)
    stepper = Stepper(lm, "Once upon a time", use_cache=True, sampling=Sampling())
    stepper.prefill(); stepper.decode(); stepper.run(20)   # -> StepTrace records in stepper.records
    report = compare(lm, "Once upon a time", new_tokens=20)
    run = ServingRun(lm, [RequestSpec("Once upon a time", 32, arrive=0), ...]); run.step()   # -> run.records

Every run that steps (Stepper, Speculator, ServingRun) has the same five: records, step(), done, run(n), free().
"""

from engine.errors import DecodeLabError, ModelLoadError, StepError  # noqa: F401
from engine.forward.sampling import Sampling  # noqa: F401
from engine.forward.trace import StepTrace  # noqa: F401
from engine.generate.compare import compare  # noqa: F401
from engine.generate.serving import RequestSpec, ServingRun  # noqa: F401
from engine.generate.stepper import Stepper  # noqa: F401
from engine.load.load import bundled_models, load_model  # noqa: F401
from engine.load.loaded import LoadedModel  # noqa: F401
