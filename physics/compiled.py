"""transformers' recipe, for timing: the model you have, compiled (a static KV cache, SDPA attention, torch.compile).

This is not the lean pass (engine/forward/lean.py, gpt-fast's Llama written out): it compiles transformers' own
modeling code, for every family, the lean pass's Llama included.

Students step through the readable path (the Stepper through run_pass: eager attention that can be recorded,
a cache that grows). On a GPU that path is launch-bound: Python and hundreds of small kernels per step. The
ecosystem's recipe removes that cost without a second model (gpt-fast; transformers documents the same one):

    static cache    every K/V tensor keeps its size and address (transformers' StaticCache), so a step has
                    one shape and can be captured
    SDPA            torch's fused attention kernel instead of the eager matmul-softmax-matmul
    torch.compile   inductor fuses the elementwise work (RMSNorm, RoPE, SiLU, residual adds); the decode step
                    with mode="reduce-overhead" is replayed as CUDA graphs: one launch a step

The passes, in the shape vocabulary of engine/__init__.py:

    prefill  input_ids [batch=1, s]  cache_position 0 .. s-1   fills the static cache   not compiled (set-up)
    decode   input_ids [batch=1, 1]  cache_position [pos]      one new position         compiled per cache size
    full     input_ids [batch=1, s]  no cache                  every position at once   compiled once for every s

`full` is the compiled prefill that is timed (the ladder's, the prefill sweep's) and the race's cache-off step:
the prefill's matmuls and attention (causal SDPA, the flash kernel on a GPU) with no cache to fill. The K/V it
would write are a fraction of a percent of a prefill's bytes; what it saves is a compile per cache size (a
prefill on a static cache attends over the whole cache, masked, so its graph depends on the cache's length).
The cache that a decode step reads is filled by `prefill`, uncompiled, as transformers' generate does
("prefill should never be compiled", cache_utils.StaticLayer).

"Compile the model you have": the passes run `sdpa_view(model)`, the very modules and weights students step
through (the parameters are shared, not copied), with the attention dispatch set to SDPA on the view's own
config, so the readable model keeps its recording attention. Tests check the compiled tokens and logits against
the Stepper's.

Compile time is measured and kept apart (`CompiledRecipe.compile_ms`): the first call of each pass compiles (and, with
CUDA graphs, the next one records the graph); those warm-up calls are never a step's time. On a CPU the same
code runs, compiled only when asked (`compile=True`: inductor takes tens of seconds on a small CPU; the eager
static-cache pass gives the same tokens, and that is what a CPU checks). Greedy tokens only: timing needs no
more. Every pass holds the model's lock, as run_pass does.
"""

from __future__ import annotations

import copy
import weakref

import torch

from engine import torch_internals, transformers_internals
from engine.timing import Timing, span, timed

DECODE_MODE = "reduce-overhead"  # inductor + CUDA graphs on a GPU (on a CPU: inductor alone)
FULL_MODE = "reduce-overhead"  # one CUDA graph per prompt length, recorded on its first calls
GRAPH_WARMUPS = 3  # calls before a CUDA-graph step is timed: compile, record, first replay
EAGER_WARMUPS = 1

_views: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()
_compiled: dict = {}


def default_compile(device: torch.device) -> bool:
    """Compile on a GPU (that is where it pays); on a CPU only when asked (compiling takes tens of seconds)."""
    return device.type == "cuda"


# ---------------------------------------------------------------- the model you have, on SDPA


def sdpa_view(model: torch.nn.Module) -> torch.nn.Module:
    """The same modules and weights as `model`, its attention dispatched to SDPA on a config of its own.

    A deep copy whose every parameter and buffer *is* the model's (no weight is copied): the readable model
    keeps its recording attention (engine.forward.capture), the view runs torch's fused kernel. A family
    without SDPA support keeps its own attention. One view per model, kept while the model lives.
    """
    view = _views.get(model)
    if view is None:
        shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
        view = copy.deepcopy(model, shared)
        if transformers_internals.supports_sdpa(view):
            view.set_attn_implementation("sdpa")
        view.eval()
        _views[model] = view
    return view


def attention_of(view) -> str:
    return transformers_internals.attn_implementation(view.config)


# ---------------------------------------------------------------- the three passes (compiled or not)


def _cached_pass(model, cache, ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """ids [batch=1, q_len] at cache positions where [q_len], on the static cache; logits [batch, vocab]. The
    prefill (q_len = s, run as it is) and the decode step (q_len = 1, compiled)."""
    out = model(input_ids=ids, cache_position=where, position_ids=where.unsqueeze(0), past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def _every_position(model, ids: torch.Tensor) -> torch.Tensor:
    """Every position of ids [batch=1, s] at once, nothing kept; logits [batch, vocab]."""
    return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1]


# The one body above, entered two ways: torch.compile keeps its graphs (and its recompile limit) per entry function,
# and the two are compiled in different modes: the prefill with a CUDA graph per length, the cache off (a race's
# step, a new length every step) with none.


def _full_pass(model, ids: torch.Tensor) -> torch.Tensor:
    return _every_position(model, ids)


def _recompute_pass(model, ids: torch.Tensor) -> torch.Tensor:
    return _every_position(model, ids)


PASSES = {"decode": (_cached_pass, DECODE_MODE, False), "full": (_full_pass, FULL_MODE, True),
          "recompute": (_recompute_pass, None, True)}
# name -> (function, mode, dynamic in s); the cache-filling prefill (the same _cached_pass) is never compiled


def compiled(name: str):
    """One torch.compile wrapper per pass, shared by every model (torch keeps a compiled graph per shape)."""
    fn = _compiled.get(name)
    if fn is None:
        torch_internals.allow_recompiles()  # torch's default (8) is per function: a ladder's shapes need more
        function, mode, dynamic = PASSES[name]
        fn = _compiled[name] = torch.compile(function, mode=mode, fullgraph=True, dynamic=dynamic)
    return fn


# ---------------------------------------------------------------- one sequence on the compiled recipe


class CompiledRecipe:
    """One sequence on a static cache of `max_len` positions, on the model's SDPA view; greedy tokens only."""

    def __init__(self, lm, max_len: int, compile: bool | None = None):
        from transformers import StaticCache

        self.lm = lm
        self.compile = default_compile(lm.device) if compile is None else bool(compile)
        self.graphs = self.compile and lm.device.type == "cuda"  # CUDA graphs come with reduce-overhead on CUDA
        self.view = sdpa_view(lm.model)
        self.max_len = max_len
        self.cache = StaticCache(config=self.view.config, max_cache_len=max_len)
        kv_heads, head_dim = kv_shape(self.view.config)
        # allocated here, outside any compiled region, so each K/V tensor is marked as a fixed address
        transformers_internals.allocate_static(self.cache, 1, kv_heads, head_dim, lm.dtype, lm.device)
        self.pos = 0  # positions written so far
        self.ids = torch.zeros(1, 1, dtype=torch.long, device=lm.device)  # the decode step's input, [batch, 1]
        self.where = torch.zeros(1, dtype=torch.long, device=lm.device)  # its cache position, [1]
        self.compile_ms: dict[str, float] = {}  # pass -> its first warm-up (compile, graph recording), apart
        self.warm_ms: dict[tuple, float] = {}  # (pass, shape) -> its warm-up calls, apart from every timing
        self.graph_skipped: dict[str, bool] = {}  # pass -> inductor declined its CUDA graphs while it warmed

    @property
    def how(self) -> str:
        """Which path the decode step ran, in words, for the UI and the ladder's record."""
        return self.describe("decode")

    def describe(self, name: str) -> str:
        """Which path a pass ran: 'decode' (static cache), 'full' (the compiled prefill), 'recompute' (cache off)."""
        attention = attention_of(self.view).upper()
        base = {"decode": f"static cache + {attention}", "full": f"every position at once, {attention}",
                "recompute": f"no cache, every position again, {attention}"}[name]
        if not self.compile:
            return f"{base}, not compiled"
        if self.lm.device.type != "cuda":
            return f"{base}, torch.compile (inductor; CUDA graphs need a GPU)"
        if PASSES[name][1] is None:
            return f"{base}, torch.compile (no CUDA graph: each step a new length)"
        if self.graph_skipped.get(name):
            return f"{base}, torch.compile (CUDA graphs skipped: TORCH_LOGS=perf_hints says why)"
        return f"{base}, torch.compile (reduce-overhead: CUDA graphs)"

    @property
    def graph_captured(self) -> bool | None:
        """The decode step warmed with CUDA graphs and inductor declined none (None where none were asked for)."""
        if not self.graphs or "decode" not in self.graph_skipped:
            return None
        return not self.graph_skipped["decode"]

    def _call(self, name: str, *args) -> torch.Tensor:
        fn = compiled(name) if self.compile else PASSES[name][0]
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()  # each call a new step: its outputs are read before the next
        return fn(self.view, self.cache, *args) if name == "decode" else fn(self.view, *args)

    def _warm(self, key: tuple, run) -> None:
        """A pass's first calls at a shape (compile; with CUDA graphs, warm-up and recording), timed apart.

        The first shape's warm-up of each pass is its compile time (`compile_ms[pass]`); a new prompt length of
        the dynamic `full` pass warms again (`warm_ms[key]`): no timed run ever compiles or records.
        """
        if key in self.warm_ms:
            return
        skips = torch_internals.graph_skips()
        calls = GRAPH_WARMUPS if self.graphs and PASSES[key[0]][1] else EAGER_WARMUPS
        self.warm_ms[key] = sum(timed(run, self.lm.device, repeats=calls, warmup=0).samples_ms)
        self.graph_skipped[key[0]] = self.graph_skipped.get(key[0], False) or torch_internals.graph_skips() > skips
        self.compile_ms.setdefault(key[0], self.warm_ms[key])

    # every pass below runs under the caller's turn on the model (greedy, time_*: lm.turn())

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> int:
        """Every prompt position at once, [batch=1, s], into the static cache (uncompiled); the greedy next token."""
        s = ids.shape[1]
        if s + 1 > self.max_len:
            raise ValueError(f"a {s}-token prompt and one step do not fit a {self.max_len}-position static cache")
        rewind(self.cache, 0)
        logits = _cached_pass(self.view, self.cache, ids.to(self.lm.device), torch.arange(s, device=self.lm.device))
        self.pos = s
        return int(logits.argmax(-1))

    @torch.no_grad()
    def step(self, token: int) -> torch.Tensor:
        """Feed `token` at position `pos` without advancing (so a timed step can be repeated): its logits."""
        if self.pos >= self.max_len:
            raise ValueError("the static cache is full")

        def run():
            self.ids.fill_(token)
            self.where.fill_(self.pos)
            rewind(self.cache, self.pos)
            return self._call("decode", self.ids, self.where)

        self._warm(("decode",), run)
        return run().clone()

    def decode(self, token: int) -> int:
        """One cached step: the greedy token after `token`."""
        logits = self.step(token)
        self.pos += 1
        return int(logits.argmax(-1))

    @torch.no_grad()
    def recompute(self, ids: torch.Tensor) -> torch.Tensor:
        """The cache off: the logits after ids [batch=1, n], every position again (compiled once for every n)."""
        ids = ids.to(self.lm.device)
        self._warm(("recompute",), lambda: self._call("recompute", ids))
        return self._call("recompute", ids).clone()

    @torch.no_grad()
    def full(self, ids: torch.Tensor) -> torch.Tensor:
        """The compiled prefill, and the cache off: the logits after ids [batch=1, s], every position computed,
        nothing kept."""
        ids = ids.to(self.lm.device)
        self._warm(("full", ids.shape[1]), lambda: self._call("full", ids))
        return self._call("full", ids).clone()


def kv_shape(config) -> tuple[int, int]:
    """(kv_head, head_dim) of every layer, read as transformers reads them (GPT-2's names via attribute_map)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim


def rewind(cache, pos: int) -> None:
    """Set where the static cache writes next to `pos`, so the same step can run again (every pass here also
    passes `cache_position`, which older transformers wrote at)."""
    transformers_internals.set_write_position(cache, pos)


# ---------------------------------------------------------------- what the ladder, the race and the tests call


def greedy(lm, ids: torch.Tensor, new_tokens: int, compile: bool | None = None) -> list[int]:
    """`new_tokens` greedy tokens after the prompt ids [batch=1, s] on the compiled recipe (the first from the prefill)."""
    run = CompiledRecipe(lm, ids.shape[1] + new_tokens, compile)
    with lm.turn():
        out = [run.prefill(ids)]
        while len(out) < new_tokens:
            out.append(run.decode(out[-1]))
    return out


def time_decode(lm, ids: torch.Tensor, repeats: int = 5, compile: bool | None = None,
                run: "CompiledRecipe | None" = None) -> tuple[Timing, "CompiledRecipe"]:
    """A cached decode step at context s = ids.shape[1] on the compiled recipe, timed like every step here.

    Prefill once (untimed), then the same step at the same position: its compile and graph recording are in
    `run.compile_ms`, then one more warm-up run (reported apart), then `repeats` timed runs (engine.timing).
    Returns the timing and the CompiledRecipe (its `how` and `compile_ms`).
    """
    run = run or CompiledRecipe(lm, ids.shape[1] + 2, compile)
    with lm.turn():
        token = run.prefill(ids)
        timing = timed(lambda: run.step(token), lm.device, repeats)
    return timing, run


def time_prefill(lm, ids: torch.Tensor, repeats: int = 5, compile: bool | None = None,
                 run: "CompiledRecipe | None" = None) -> tuple[Timing, "CompiledRecipe"]:
    """The compiled prefill of ids [batch=1, s] (the `full` pass), timed like `time_decode` (compile apart)."""
    run = run or CompiledRecipe(lm, ids.shape[1] + 2, compile)
    with lm.turn():
        timing = timed(lambda: run.full(ids), lm.device, repeats)
    return timing, run


def time_recipe(lm, ids: torch.Tensor, steps: int = 32, repeats: int = 5) -> tuple[Timing, float, str]:
    """transformers' own recipe as a user runs it: `generate(cache_implementation="static")` on the SDPA
    view, which compiles the decode forward itself on a GPU (mode "reduce-overhead", its CompileConfig).

    A decode step's time is (a run of 1 + steps new tokens − a run of 1) / steps: the prefill cancels, and
    generate's own work between steps (logits processors, stopping checks) is in it, as a user running the
    recipe gets. Every run reuses one static cache (reset before each, as a server keeps its cache), so the
    CUDA graphs recorded in the warm-ups are replayed, never recorded again inside a timed run. Returns the timing
    per step (medians of `repeats` pairs), the warm-up (compile, recording) ms apart, and in words whether
    generate compiled.
    """
    from transformers import GenerationConfig, StaticCache

    view = sdpa_view(lm.model)
    ids = ids.to(lm.device)
    mask = torch.ones_like(ids)
    cache = StaticCache(config=view.config, max_cache_len=ids.shape[1] + steps + 2)

    def gen(n: int) -> float:
        # a config of its own: exactly n tokens (no end-of-text stop), whatever the model's generation_config says
        config = GenerationConfig(max_new_tokens=n, do_sample=False, pad_token_id=0, eos_token_id=None)
        cache.reset()
        return timed(lambda: view.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                           past_key_values=cache), lm.device, repeats=1, warmup=0).forward_ms

    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate's note that max_new_tokens overrides the model's max_length
    try:
        with lm.turn(), torch.no_grad():
            timing, warm_ms = _recipe_runs(gen, steps, repeats)
    finally:
        hf_logging.set_verbosity(verbosity)
    compiled_by_generate = transformers_internals.compiled_by_generate(view)
    how = (f"transformers' recipe: generate on one reused StaticCache + {attention_of(view).upper()}, "
           + ("auto-compiled (torch.compile, reduce-overhead)" if compiled_by_generate else "not compiled here"))
    return timing, warm_ms, how


def _recipe_runs(gen, steps: int, repeats: int) -> tuple[Timing, float]:
    """Warm-ups (generate compiles on its first decode steps), then `repeats` + 1 pairs of runs, 1 + steps and 1."""
    with span() as warming:  # each gen() syncs the device itself before it returns
        for _ in range(GRAPH_WARMUPS):
            gen(1 + steps)
    warm_ms = warming.ms
    per_step = []
    for _ in range(repeats + 1):
        long, short = gen(1 + steps), gen(1)
        per_step.append(max(0.0, long - short) / steps)
    return Timing(samples_ms=tuple(per_step[1:]), warmup_ms=per_step[0]), warm_ms
