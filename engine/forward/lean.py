"""The lean pass: gpt-fast's Llama, over the very weights students step through.

The readable path (run_pass) records Q, K, V and attention through transformers' own modules; it is the one the
class reads. A serving engine runs something else: a short forward, compiled whole, over a static KV cache
written in place. This is that forward as gpt-fast writes it (`model.py`), for the Llama family:

    x        = embed[ids]                                   [batch, n, d_model]
    per layer:
      q, k, v = wq·h, wk·h, wv·h,  h = rmsnorm(x)
      q, k    = rope(q, k at input_pos)                     transformers' rotate-half, the model's own inv_freq
      cache[layer][:, :, input_pos] = k, v                  written in place: [batch, kv_head, max_len, head_dim]
      x      += wo · attention(q, cache k, cache v)         a prefill: sdpa, causal; a decode step: every cached
                                                            position up to its own (GQA: K/V never repeated)
      x      += w2 · (silu(w1·h) * w3·h),  h = rmsnorm(x)
    logits   = lm_head · rmsnorm(x)[:, -1]                  [batch, vocab]

One pass over n rows: `forward(ids [batch, n], input_pos [n])`. A prefill of n tokens is batch = 1 at positions
0 .. n-1 (it attends over its own keys, causal); a decode step for n sequences is batch = n, n = 1, every
sequence at the same position. Either way every weight is read once and the arithmetic is 2 · parameters · rows
FLOPs: the experiment that shows the roofline (topics/ladder/curve.py).

Shared, not copied: the module holds the readable model's own Parameter objects, as they lie, and changes none
of them (tests/test_lean.py checks every one's storage). Its products are `F.linear`, except a one-row product
on a CPU (engine/forward/streamed.py); `kernel` says which ran. A decode step's attention is SDPA's, except on
a CPU over an fp32 cache (engine/forward/flash_decode.py); `attention` says which. Families it covers
(`supports`): RMSNorm, RoPE (default or Llama-3 scaling), GQA, a SiLU-gated MLP, no biases; others keep
physics.compiled (transformers' own code compiled), and the ladder says which ran. Tests hold its logits to
transformers'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine import torch_internals
from engine.forward import flash_decode, streamed
from engine.timing import timed


def supports(model) -> str | None:
    """None when the lean pass runs this model exactly; otherwise why not, in words."""
    c = model.config
    if getattr(c, "model_type", None) != "llama":
        return f"the lean pass is written for the Llama family; this is {getattr(c, 'model_type', '?')}"
    if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
        return "the lean pass has no biases, and this Llama has some"
    if getattr(c, "hidden_act", "silu") != "silu":
        return f"the lean pass's MLP is SiLU-gated; this one uses {c.hidden_act}"
    rope = getattr(c, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in ("default", "llama3"):
        return f"the lean pass takes default or Llama-3 RoPE; this model's is {rope.get('rope_type')}"
    return None


class LeanLlama(torch.nn.Module):
    """gpt-fast's forward over a transformers Llama's weights (the same Parameters), with a static KV cache."""

    def __init__(self, model, max_batch: int, max_len: int, one_row_kernel: bool = True):
        """`one_row_kernel` False: a one-row pass uses `F.linear` too, as a pass over n rows timed across n must,
        so that the row count is the only thing that moves (topics/ladder/curve.py)."""
        super().__init__()
        why = supports(model)
        if why:
            raise ValueError(why)
        c, inner = model.config, model.model
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.eps = c.rms_norm_eps
        weight = inner.embed_tokens.weight
        self.one_row = one_row_kernel
        self.streams = streamed.STREAMS  # blocks of rows a one-row product reads at once (benchmarks/lean_kernel.py: 1)
        self.kernel = streamed.name(weight.device, one_row_kernel)
        self.flash_decode = flash_decode.why_not(weight.device, weight.dtype, self.head_dim,
                                                 self.heads // self.kv_heads) is None
        self.attention = flash_decode.NAME if self.flash_decode else flash_decode.SDPA
        blocks = list(inner.layers)

        def params(get):  # the readable model's own Parameters, held (a ParameterList keeps the same objects)
            return torch.nn.ParameterList([get(b) for b in blocks])

        self.embed, self.norm = weight, inner.norm.weight
        self.lm_head = model.get_output_embeddings().weight
        self.wq = params(lambda b: b.self_attn.q_proj.weight)
        self.wk = params(lambda b: b.self_attn.k_proj.weight)
        self.wv = params(lambda b: b.self_attn.v_proj.weight)
        self.wo = params(lambda b: b.self_attn.o_proj.weight)
        self.w1 = params(lambda b: b.mlp.gate_proj.weight)
        self.w3 = params(lambda b: b.mlp.up_proj.weight)
        self.w2 = params(lambda b: b.mlp.down_proj.weight)
        self.attn_norm = params(lambda b: b.input_layernorm.weight)
        self.mlp_norm = params(lambda b: b.post_attention_layernorm.weight)
        rotary = inner.rotary_emb  # the model's own inv_freq (Llama-3 scaling included) and attention_scaling
        pos = torch.arange(max_len, device=weight.device, dtype=torch.float32)
        freqs = torch.outer(pos, rotary.inv_freq.to(weight.device, torch.float32))
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.register_buffer("cos", (emb.cos() * scale).to(weight.dtype), persistent=False)  # [pos, head_dim]
        self.register_buffer("sin", (emb.sin() * scale).to(weight.dtype), persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool,
                                                             device=weight.device)), persistent=False)
        shape = (max_batch, self.kv_heads, max_len, self.head_dim)  # [batch, kv_head, key_pos, head_dim]
        for layer in range(len(blocks)):
            for kv in ("k", "v"):
                self.register_buffer(f"{kv}_cache_{layer}", torch.zeros(shape, dtype=weight.dtype,
                                                                        device=weight.device), persistent=False)
        self.k_cache = [getattr(self, f"k_cache_{layer}") for layer in range(len(blocks))]
        self.v_cache = [getattr(self, f"v_cache_{layer}") for layer in range(len(blocks))]

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x [..., in] · wᵀ, w [out, in]: `F.linear`, or the streamed one-row kernel (engine/forward/streamed.py)."""
        return streamed.product(x, w, self.one_row, self.streams)

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """transformers' LlamaRMSNorm: in float32, then back to x's dtype, times the weight."""
        h = x.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [batch, head, n, head_dim] rotated by its positions' angles (transformers' rotate_half)."""
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, ids: torch.Tensor, input_pos: torch.Tensor, kv_len: int | None = None) -> torch.Tensor:
        """One pass: ids [batch, n] at positions input_pos [n] (the same for every sequence); logits of the last
        row of each sequence, [batch, vocab]. `kv_len`: a decode step reads only the cache's first kv_len positions
        (default all it holds): the context's bytes (topics/bytes/)."""
        batch, n = ids.shape
        hd = self.head_dim
        x = F.embedding(ids, self.embed)  # [batch, n, d_model]
        cos, sin = self.cos[input_pos], self.sin[input_pos]  # [n, head_dim]
        mask = self.causal[input_pos]  # [n, key_pos]: each row sees the positions up to its own
        where = (torch.arange(batch, device=x.device)[:, None, None],
                 torch.arange(self.kv_heads, device=x.device)[None, :, None], input_pos[None, None, :])
        for layer in range(len(self.wq)):
            h = self.rms(x, self.attn_norm[layer])
            q = self.linear(h, self.wq[layer]).view(batch, n, self.heads, hd).transpose(1, 2)  # [batch, head, n, hd]
            k = self.linear(h, self.wk[layer]).view(batch, n, self.kv_heads, hd).transpose(1, 2)
            v = self.linear(h, self.wv[layer]).view(batch, n, self.kv_heads, hd).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            # the module's own buffers, by name: a compiler sees fixed addresses (CUDA graphs) written in place
            k_cache, v_cache = getattr(self, f"k_cache_{layer}"), getattr(self, f"v_cache_{layer}")
            k_cache.index_put_(where, k)
            v_cache.index_put_(where, v)
            if n > 1:  # a prefill: the prompt's own keys, causal (the cache's empty rest is never read)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            elif self.flash_decode:  # a decode step on a CPU: the positions up to its own, each read once
                y = flash_decode.attend(q, k_cache[:batch], v_cache[:batch], input_pos, kv_len or 0)
            else:  # a decode step: every position the cache holds (or its first kv_len), masked past its own
                y = F.scaled_dot_product_attention(q, k_cache[:batch, :, :kv_len], v_cache[:batch, :, :kv_len],
                                                   attn_mask=mask[:, :kv_len], enable_gqa=True)
            x = x + self.linear(y.transpose(1, 2).reshape(batch, n, self.heads * hd), self.wo[layer])
            h = self.rms(x, self.mlp_norm[layer])
            x = x + self.linear(F.silu(self.linear(h, self.w1[layer])) * self.linear(h, self.w3[layer]),
                                self.w2[layer])
        return self.linear(self.rms(x[:, -1], self.norm), self.lm_head)  # [batch, vocab]


# ---------------------------------------------------------------- compiled, and timed


@dataclass(frozen=True)
class CompileSettings:
    """How the pass is compiled on a device (gpt-fast's settings). The options go to this compile only
    (torch.compile's `options`), never to inductor's global config. (Inductor's `freezing` is not among them: given
    here it changed no line of the code inductor wrote, for dynamo reads it from the global config only, so the
    weights were never constants; tests/test_lean.py holds the words to the code.)"""

    options: dict  # inductor's: CUDA graphs on a GPU (one launch a step); none on a CPU
    words: str  # what a page says ran


def compile_settings(device: torch.device) -> CompileSettings:
    """This device's CompileSettings."""
    if device.type == "cuda":
        return CompileSettings({"triton.cudagraphs": True}, "gpt-fast's Llama, torch.compile whole (CUDA graphs)")
    return CompileSettings({}, "gpt-fast's Llama, torch.compile whole (inductor)")


def compiled_pass(lean: LeanLlama, kernels_profiled: bool = False):
    """The lean forward compiled whole (fullgraph), with this device's settings: one graph per shape, or one for
    every n ≥ 2 once the caller marks that dimension dynamic (torch_internals.mark_dynamic). `kernels_profiled`: on
    a CPU, each of inductor's C++ kernels is an event torch.profiler records (topics/bytes/ times them apart)."""
    torch_internals.allow_recompiles()
    options = compile_settings(lean.embed.device).options
    if kernels_profiled and lean.embed.device.type == "cpu":
        options = {**options, "cpp.enable_kernel_profile": True}
    return torch.compile(lean, fullgraph=True, options=options)


def run_once(fn, ids: torch.Tensor, input_pos: torch.Tensor, *more) -> float:
    """One call of fn(ids, input_pos, *more), timed (engine.timing): its milliseconds. (The first call of a new graph
    compiles: its time is a warm-up, never a pass's.)"""
    device = ids.device

    def one():
        if device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        fn(ids, input_pos, *more)

    with torch.no_grad():
        return timed(one, device, repeats=1, warmup=0).forward_ms
