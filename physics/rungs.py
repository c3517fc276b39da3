"""Rungs of a size ladder: the loaded model's own family and shape, grown to a chosen parameter count.

A forward pass costs the same whatever numbers the weights hold, so timing a bigger model needs only
its shape: a rung is the loaded model's config with more layers and a wider d_model, built from that
config with seeded random weights (no download, nothing saved). What a rung keeps from the model:

    family      the same config class and model class (Llama stays Llama, GPT-2 stays GPT-2)
    head_dim    the same width of one head; head = d_model / head_dim
    GQA ratio   head / kv_head stays the model's (4 query heads per K/V head stays 4)
    d_ff ratio  the MLP's width over d_model
    aspect      d_model / layers, traded against the size asked for (d_model moves in whole heads)
    vocab       the model's own, so its tokenizer still reads and writes a rung's tokens

A rung can also take a published model's shape by name ("Llama-3-8B": physics/shapes.py): its own family,
figures and vocabulary, random weights, labelled with the model whose shape it is. A GPU's default rungs are
real shapes; a grown shape keeps a CPU's ladder comparable with its recorded figures.

Check, then commit: every rung's exact parameter count comes from a build on the meta device (no memory),
and a rung that would not fit (`engine.device.available_bytes`, which `DECODE_LAB_MEMORY_LIMIT` caps)
is refused before any weight is allocated.
"""

from __future__ import annotations

import copy
import math
import re
import threading
from dataclasses import dataclass, replace

import torch

from engine import device as dev
from engine.errors import StepError, TooLarge
from engine.load.checks import MAX_LAYERS, MAX_WIDTH, MEMORY_HEADROOM, estimate_parameters
from engine.load.loaded import MAX_WAITING, LoadedModel
from physics.shapes import lookup, shape_config, weights_words
from physics.units import human_bytes

RANDOM_WEIGHTS = "random weights: for timing only, their tokens are noise"
TRAINED_WEIGHTS = "the model itself: its trained weights"
OWN = "own"  # a size that names the loaded model itself
OWN_TOLERANCE = 0.25  # a requested size this close to the model's own count is the model itself
SIZE_TOLERANCE = 0.03  # a rung's count may stray this share from the size asked for (scored against the aspect)
ASPECT_TOLERANCE = 1.5  # ... and its d_model / layers this factor from the model's
FF_FIELDS = ("intermediate_size", "n_inner", "ffn_dim")
CPU_SIZES = (OWN, "25M", "50M", "110M", "220M")
# real shapes on a GPU (physics/shapes.py): ~1 B and ~8 B beside the model itself, so the whole ladder,
# compiling the lean path at every rung (~20-40 s each on a GPU host), stays within four minutes
GPU_SIZES = (OWN, "TinyLlama-1.1B", "Llama-3-8B")


@dataclass(frozen=True)
class Shape:
    """A rung's figures in the project's words (`layers` counts, `layer` indexes)."""

    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int | None  # None: the family's own rule (GPT-2 with n_inner unset: 4 x d_model)


@dataclass(frozen=True)
class Rung:
    """One size of the ladder, planned: its exact parameter count, before any weight exists."""

    size: str  # as asked: "own", "25M", "1.1B"
    parameters: int  # exact (a meta-device build)
    shape: Shape
    own: bool  # the loaded model itself, measured as it is
    config: object = None  # the grown config (None for the model itself)
    shape_of: str | None = None  # the published model whose shape this is ("Llama-3-8B"), None for a grown one

    @property
    def weights(self) -> str:
        if self.shape_of:
            return weights_words(self.shape_of)
        return TRAINED_WEIGHTS if self.own else RANDOM_WEIGHTS

    def weight_bytes(self, dtype: torch.dtype) -> int:
        return self.parameters * (torch.finfo(dtype).bits // 8)

    @property
    def label(self) -> str:
        """'4.1M' or '111M': the exact count, short; a real shape's model name ('Llama-3-8B')."""
        return self.shape_of or short_count(self.parameters)



def timing_dtype(lm: LoadedModel) -> torch.dtype:
    """The dtype a rung is timed in: on a GPU the device's fast one (bf16: the physics the lessons are about,
    whatever dtype the bundled model was loaded in for exactness); elsewhere the model's own."""
    return dev.pick_dtype(lm.device) if lm.device.type == "cuda" else lm.dtype

def short_count(n: float) -> str:
    """4065536 -> '4.1M', 110_700_000 -> '111M', 1.1e9 -> '1.1B'."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            v = n / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(int(n))


def parse_size(text: str) -> int | None:
    """'25M' -> 25_000_000, '1.1B' -> 1_100_000_000, '500k', '25000000'; 'own' -> None (the model itself)."""
    t = str(text).strip().lower().replace("_", "").replace(",", "")
    if t in (OWN, "model", "bundled"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmb]?)", t)
    if not m:
        raise StepError(f"Size {str(text)[:20]!r} is not a size: write it like 25M, 110M or 1.1B (or 'own'), "
                        "or name a published shape such as Llama-3-8B.")
    n = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)]
    if n < 1e5:
        raise StepError(f"Size {text!r} is too small for a ladder rung: the smallest is 100k parameters.")
    return int(n)


def model_name(lm: LoadedModel) -> str:
    """The model's name as a person knows it ('default' is the bundled default model's alias)."""
    from engine.load.load import DEFAULT_MODEL

    return DEFAULT_MODEL if lm.spec.name == "default" else lm.spec.name


def default_sizes(device: torch.device) -> tuple[str, ...]:
    return GPU_SIZES if device.type == "cuda" else CPU_SIZES


# ---------------------------------------------------------------- the model's own shape


def own_shape(config) -> Shape:
    """The loaded model's figures, read the way transformers reads them (attribute_map covers GPT-2's names)."""
    d = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    ff = next((getattr(config, f) for f in FF_FIELDS if getattr(config, f, None)), None)
    return Shape(layers=config.num_hidden_layers, d_model=d, heads=heads,
                 kv_heads=getattr(config, "num_key_value_heads", None) or heads, head_dim=head_dim, d_ff=ff)


def grown_config(config, shape: Shape, max_positions: int):
    """The model's config with `shape`'s figures: every other field (norms, RoPE, activation) is the model's."""
    c = copy.deepcopy(config)
    c.num_hidden_layers, c.hidden_size, c.num_attention_heads = shape.layers, shape.d_model, shape.heads
    if hasattr(c, "num_key_value_heads"):
        c.num_key_value_heads = shape.kv_heads
    if getattr(c, "head_dim", None):
        c.head_dim = shape.head_dim
    for f in FF_FIELDS:
        if getattr(c, f, None):
            setattr(c, f, shape.d_ff)
    pattern = getattr(c, "layer_types", None)
    if isinstance(pattern, list) and pattern:  # sliding/full pattern of the model, repeated to the new depth
        c.layer_types = [pattern[layer % len(pattern)] for layer in range(shape.layers)]
    if (getattr(c, "max_position_embeddings", None) or 0) < max_positions:
        c.max_position_embeddings = max_positions
    return c


def shape_at(own: Shape, layers: int, d_model: int) -> Shape:
    """A shape of `layers` x `d_model` with the model's head_dim, GQA ratio and d_ff ratio."""
    heads = d_model // own.head_dim
    ff = None if own.d_ff is None else _round_ff(own.d_ff / own.d_model * d_model)
    return Shape(layers, d_model, heads, heads * own.kv_heads // own.heads, own.head_dim, ff)


def _round_ff(x: float) -> int:
    return int(round(x)) if abs(x - round(x)) < 1e-6 else int(round(x / 16)) * 16


# ---------------------------------------------------------------- choosing a rung's shape


class _Counter:
    """Parameters as a function of (layers, d_model), fitted from four meta builds of the model's own family:

        parameters = layers * (a * d_model^2 + b * d_model) + c * d_model + e

    (each layer's matrices grow with d_model^2 when the ratios are kept; embeddings with d_model). The search
    uses the formula; every chosen rung is then counted exactly.
    """

    def __init__(self, config, own: Shape, max_positions: int):
        self.config, self.own, self.max_positions = config, own, max_positions
        d0, d1, l0 = own.d_model, 2 * own.d_model, own.layers
        p = {(layers, d): self.exact(shape_at(own, layers, d)) for layers in (l0, 2 * l0) for d in (d0, d1)}
        per_layer = [(p[(2 * l0, d)] - p[(l0, d)]) / l0 for d in (d0, d1)]
        self.b = (per_layer[1] * d0**2 - per_layer[0] * d1**2) / (d1 * d0**2 - d0 * d1**2)
        self.a = (per_layer[0] - self.b * d0) / d0**2
        rest = [p[(l0, d)] - l0 * per for d, per in zip((d0, d1), per_layer)]
        self.c = (rest[1] - rest[0]) / (d1 - d0)
        self.e = rest[0] - self.c * d0

    def approx(self, layers: int, d_model: int) -> float:
        return layers * (self.a * d_model**2 + self.b * d_model) + self.c * d_model + self.e

    def exact(self, shape: Shape) -> int:
        return estimate_parameters(grown_config(self.config, shape, self.max_positions))

    def best(self, target: int) -> Shape:
        """The shape that best keeps both the size asked for and the model's aspect (d_model / layers).

        Each is scored by how far it strays, in units of what is tolerable (SIZE_TOLERANCE for the count, a factor
        of ASPECT_TOLERANCE for the aspect): d_model moves in steps of whole heads, so the two trade off.
        """
        own = self.own
        unit = own.head_dim * own.heads // own.kv_heads  # d_model steps that keep whole heads and the GQA ratio
        aspect = own.d_model / own.layers
        best = None
        for layers in range(1, MAX_LAYERS + 1):
            a = layers * self.a
            b = layers * self.b + self.c
            d = (-b + math.sqrt(b * b + 4 * a * max(1.0, target - self.e))) / (2 * a)
            for k in {max(1, math.floor(d / unit)), max(1, math.ceil(d / unit))}:
                width = k * unit
                if width > MAX_WIDTH:
                    continue
                size_off = math.log(self.approx(layers, width) / target) / math.log1p(SIZE_TOLERANCE)
                aspect_off = math.log(width / layers / aspect) / math.log(ASPECT_TOLERANCE)
                score = size_off**2 + aspect_off**2
                if best is None or score < best[0]:
                    best = (score, layers, width)
        return shape_at(own, best[1], best[2])


# ---------------------------------------------------------------- planning the ladder


def plan(lm: LoadedModel, sizes=None, tokens: int = 128, dtype: torch.dtype | None = None
         ) -> tuple[list[Rung], list[str]]:
    """Every rung, exactly counted and checked against free memory in `dtype` (default lm's), before anything
    is built.

    A size is 'own', a parameter count ('110M': the model's shape grown) or a published shape's name
    ('Llama-3-8B'). Returns (rungs, left_out). Sizes asked for by name that would not fit raise one TooLarge
    naming them all; default sizes that would not fit are left out (a GPU's ladder goes as high as its memory
    allows).
    """
    dtype = dtype or lm.dtype
    asked = sizes is not None and len(sizes) > 0
    sizes = list(sizes) if asked else list(default_sizes(lm.device))
    own = own_shape(lm.config)
    positions = tokens + 2  # the prompt, the decode step's position, one spare
    rungs, counter = [], None
    for size in map(str, sizes):
        if not _reads(parse_size, size) and _reads(lookup, size):
            name = lookup(size)
            config = shape_config(name, min_positions=positions)
            rungs.append(Rung(size, estimate_parameters(config), own_shape(config), own=False, config=config,
                              shape_of=name))
            continue
        target = parse_size(size)
        if target is None or abs(target / lm.spec.parameters - 1) <= OWN_TOLERANCE:
            if positions > lm.spec.max_positions:
                raise StepError(f"{tokens} tokens do not fit the model itself ({lm.spec.max_positions} positions): "
                                "choose fewer tokens.")
            rungs.append(Rung(size, int(lm.spec.parameters), own, own=True))
            continue
        counter = counter or _Counter(lm.config, own, positions)
        shape = counter.best(target)
        config = grown_config(lm.config, shape, positions)
        rungs.append(Rung(size, estimate_parameters(config), shape, own=False, config=config))
    rungs = sorted({(r.own, r.parameters): r for r in rungs}.values(), key=lambda r: r.parameters)
    too_big = [r for r in rungs if not fits(r, lm, dtype)]
    if too_big and asked:
        raise TooLarge(refusal(too_big, lm, dtype))
    return [r for r in rungs if r not in too_big], [r.size for r in too_big]


def _reads(parse, size: str) -> bool:
    """Does `parse` (parse_size: a count like '110M'; lookup: a published model's name) accept `size`?"""
    try:
        parse(size)
        return True
    except StepError:
        return False


def need_bytes(rung: Rung, dtype: torch.dtype) -> float:
    """Weights x MEMORY_HEADROOM (activations and the cache need room too), as the loader asks of any model."""
    return rung.weight_bytes(dtype) * MEMORY_HEADROOM


def fits(rung: Rung, lm: LoadedModel, dtype: torch.dtype | None = None) -> bool:
    dtype = dtype or lm.dtype
    if rung.own and dtype == lm.dtype:
        return True
    return need_bytes(rung, dtype) <= dev.available_bytes(lm.device)


def refusal(rungs: list[Rung], lm: LoadedModel, dtype: torch.dtype | None = None) -> str:
    """One plain message for every rung that would not fit."""
    dtype = dtype or lm.dtype
    name = str(dtype).removeprefix("torch.")
    have = dev.available_bytes(lm.device)
    names = ", ".join(f"{r.size} ({short_count(r.parameters)} parameters, {human_bytes(r.weight_bytes(dtype))} of "
                      f"{name} weights)" for r in rungs)
    return (f"The ladder cannot build {names}: with room for activations each needs "
            f"{human_bytes(need_bytes(rungs[0], dtype))} or more, and {human_bytes(have)} is free on "
            f"{lm.device.type} (DECODE_LAB_MEMORY_LIMIT caps it where it is set). Choose smaller sizes.")


# ---------------------------------------------------------------- building one rung


def build(rung: Rung, lm: LoadedModel, seed: int = 0, dtype: torch.dtype | None = None) -> LoadedModel:
    """The rung as a LoadedModel on lm's device in `dtype` (default lm's), sharing lm's tokenizer; free memory
    checked again first.

    The model itself comes back as it is, with a lock of its own (the ladder holds lm's lock around each
    rung, so students' passes never run beside its timing); in another dtype, as a converted copy (a small
    model: the bundled ones are a few MB). A real shape's vocabulary may be larger than the tokenizer's: its
    random tokens above the tokenizer's read as nothing, and the prompt's tokens are the tokenizer's own.
    """
    dtype = dtype or lm.dtype
    if rung.own and dtype == lm.dtype:
        return replace(lm, lock=threading.Lock(), slots=threading.Semaphore(MAX_WAITING))
    if rung.own:
        model = copy.deepcopy(lm.model).to(dtype)
        return replace(lm, model=model, dtype=dtype, lock=threading.Lock(), slots=threading.Semaphore(MAX_WAITING))
    if not fits(rung, lm, dtype):  # memory taken since the plan was made
        raise TooLarge(refusal([rung], lm, dtype))
    from transformers import AutoModelForCausalLM

    from engine import transformers_internals
    from engine.forward import capture
    from engine.forward.spec import from_config

    captures = lm.captures if rung.shape_of is None else capture.supports(rung.config)
    if captures:
        capture.register()
    attention = transformers_internals.attn_implementation(lm.config) if rung.shape_of is None else \
        (capture.IMPLEMENTATION if captures else "eager")
    torch.manual_seed(seed)
    with torch.device(lm.device):
        model = AutoModelForCausalLM.from_config(rung.config, dtype=dtype, attn_implementation=attention)
    model.eval()  # weights stored [out, in], as every checkpoint stores them: the lean pass streams them so
    name = f"{rung.shape_of}'s shape" if rung.shape_of else f"{model_name(lm)} grown to {rung.label}"
    spec = from_config(model.config, name, rung.parameters, rung.weights if rung.shape_of else RANDOM_WEIGHTS)
    if (spec.layers, spec.d_model, spec.heads, spec.kv_heads) != (rung.shape.layers, rung.shape.d_model,
                                                                  rung.shape.heads, rung.shape.kv_heads):
        raise StepError(f"The ladder cannot grow a {spec.architecture}: its config did not take the new shape.")
    return LoadedModel(model=model, tokenizer=lm.tokenizer, spec=spec, device=lm.device, dtype=dtype,
                       captures=captures)


def rung_model(lm: LoadedModel, size: str, seed: int = 0, dtype: torch.dtype | None = None) -> LoadedModel:
    """One rung as a LoadedModel of its own, with the model's own context length (the race at a real size).

    `size` is a count ('110M') or a published shape ('TinyLlama-1.1B'); 'own' (or a size within OWN_TOLERANCE
    of the model's) is lm itself. Refused like any rung: one TooLarge. The caller holds the only reference:
    dropping it (then machine.release_memory()) gives the memory back.
    """
    (rung,), _ = plan(lm, [size], tokens=lm.spec.max_positions - 2, dtype=dtype)
    return lm if rung.own and (dtype is None or dtype == lm.dtype) else build(rung, lm, seed, dtype)
