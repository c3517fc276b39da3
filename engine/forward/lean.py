"""The lean pass: gpt-fast's Llama in about 150 lines, over the very weights students step through.

The readable path (run_pass) records Q, K, V and attention through transformers' own modules; it is the one
the class reads. A serving engine runs something else: a short forward, compiled whole, over a static KV cache
written in place. This is that forward, written the way gpt-fast writes it (`model.py`: Transformer, Attention,
FeedForward, RMSNorm, a KVCache written with `index_copy_`), for the Llama family:

    x        = embed[ids]                                   [batch, n, d_model]
    per layer:
      q, k, v = split(wqkv · rmsnorm(x))                    one fused matrix: [(head + 2·kv_head)·head_dim, d_model]
      q, k    = rope(q, k at input_pos)                     transformers' rotate-half convention, its own inv_freq
      cache[layer][:, :, input_pos] = k, v                  written in place: [batch, kv_head, max_len, head_dim]
      x      += wo · sdpa(q, cache k, cache v, mask)        GQA without repeating K/V (enable_gqa)
      x      += w2 · (silu(w1 · h) * w3 · h), h = rmsnorm(x)  w1 and w3 fused: [2·d_ff, d_model]
    logits   = lm_head · rmsnorm(x)[:, -1]                  [batch, vocab]

One pass over n rows: `forward(ids [batch, n], input_pos [n])`. A prefill of n tokens is batch = 1 with
input_pos = 0 .. n-1 (a pass over several tokens is always a prompt from position 0: it attends over its own
keys with the causal kernel, where gpt-fast masks the whole static cache; on an H200 the masked kernel over a
4,097-position cache made a 2-token prefill take ×1.9 a decode step); a decode step over a batch of n sequences
is batch = n, n = 1, every sequence at the same position (equal contexts: the batched step of a static batch).
Either way every weight is read once and the arithmetic is 2 · parameters · rows FLOPs: the experiment that shows
the roofline (topics/ladder/curve.py).

Shared, not copied: the fused matrices are made once, and the readable model's own q/k/v and gate/up
Parameters are then re-pointed to slices of them (same values, same memory), so the lean pass and the readable
one read one set of weights. (On a CPU a pass over several rows reads a packed copy of each matrix, made once:
oneDNN's layout, what a compiled CPU engine pays in memory for a multi-row kernel that reads each weight once.)

Families it covers: Llama-style decoders (`supports`): RMSNorm, RoPE (default or Llama-3 scaling, read from the
model's own inv_freq), GQA, SiLU-gated MLP, no biases. Others keep engine.forward.compiled (transformers' own
code compiled), and the ladder says which ran. Tests hold its logits to the readable path's.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from engine import device as dev
from engine import torch_internals


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


def _fuse(*linears: torch.nn.Linear) -> torch.Tensor:
    """One [sum of outs, in] matrix over these Linears' weights, shared, not copied: made once (a concatenation),
    then each Linear's weight Parameter is pointed at its slice of it (the same object, its storage moved). Asked again, the slices are found adjacent in one
    storage and the same matrix is handed back."""
    weights = [lin.weight for lin in linears]
    first = weights[0]
    rows = sum(w.shape[0] for w in weights)
    offsets = [first.storage_offset() + sum(w.numel() for w in weights[:i]) for i in range(len(weights))]
    if all(w.is_contiguous() and w.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
           and w.storage_offset() == o for w, o in zip(weights, offsets)):
        return first.detach().as_strided((rows, first.shape[1]), (first.shape[1], 1))
    with torch.no_grad():
        fused = torch.cat([w.detach() for w in weights], dim=0).contiguous()
        start = 0
        for lin in linears:  # the same Parameter objects (every holder of one sees the change), on the new storage
            n = lin.weight.shape[0]
            lin.weight.data = fused[start:start + n]
            start += n
    return fused


def _row_major(weight: torch.nn.Parameter) -> torch.nn.Parameter:
    """The weight laid out [out, in] in memory, each output's row contiguous (a ladder rung on a CPU stores its
    weights [in, out] for the readable path's matmuls, and a one-row product reads a row at a time): the same
    Parameter, its storage moved if it must be, so the readable model reads the same weights as the lean pass."""
    if not weight.is_contiguous():
        with torch.no_grad():
            weight.data = weight.data.contiguous()
    return weight


class LeanLlama(torch.nn.Module):
    """gpt-fast's forward over a transformers Llama's weights, with a static KV cache of its own."""

    def __init__(self, model, max_batch: int, max_len: int, one_row_kernel: bool = True):
        """`one_row_kernel` False: a one-row pass on a CPU uses the multi-row kernel too (padded), as a pass over n
        rows timed across n must, so that the row count is the only thing that moves (topics/ladder/curve.py)."""
        super().__init__()
        why = supports(model)
        if why:
            raise ValueError(why)
        self.one_row_kernel = one_row_kernel
        c, inner = model.config, model.model
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.eps = c.rms_norm_eps
        weight = inner.embed_tokens.weight

        def shared(t):
            return t if isinstance(t, torch.nn.Parameter) else torch.nn.Parameter(t, requires_grad=False)

        def params(ts):
            return torch.nn.ParameterList([shared(t) for t in ts])

        # the readable model's own Parameters (the same objects), and the fused matrices its q/k/v and gate/up are
        # slices of: module attributes, so a compiler sees them as the model's weights
        self.embed = shared(weight)
        self.lm_head = shared(_row_major(model.get_output_embeddings().weight))
        self.norm = shared(inner.norm.weight)
        blocks = list(inner.layers)
        self.wqkv = params(_fuse(b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj) for b in blocks)
        self.w13 = params(_fuse(b.mlp.gate_proj, b.mlp.up_proj) for b in blocks)
        self.wo = params(_row_major(b.self_attn.o_proj.weight) for b in blocks)
        self.w2 = params(_row_major(b.mlp.down_proj.weight) for b in blocks)
        self.attn_norm = params(b.input_layernorm.weight for b in blocks)
        self.mlp_norm = params(b.post_attention_layernorm.weight for b in blocks)
        self.d_ff = self.w2[0].shape[1]
        # on a CPU, every matrix also in oneDNN's packed layout (a copy): the kernel a pass over several rows needs
        self.packed: dict[int, int] = {}  # id(weight) -> its packed copy's key (engine.torch_internals)
        if weight.device.type == "cpu":
            for w in (*self.wqkv, *self.wo, *self.w13, *self.w2, self.lm_head):
                self.packed[id(w)] = torch_internals.pack_weight(w)
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
            self.register_buffer(f"k_cache_{layer}", torch.zeros(shape, dtype=weight.dtype, device=weight.device),
                                 persistent=False)
            self.register_buffer(f"v_cache_{layer}", torch.zeros(shape, dtype=weight.dtype, device=weight.device),
                                 persistent=False)
        self.k_cache = [getattr(self, f"k_cache_{layer}") for layer in range(len(blocks))]
        self.v_cache = [getattr(self, f"v_cache_{layer}") for layer in range(len(blocks))]

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x [..., in] · wᵀ, w [out, in], with the kernel that reads w best here:

            GPU                the matrix multiply (cuBLAS)
            CPU, one row       one dot product per output row of w, which inductor compiles to a single loop that
                               streams w once at ~85 % of the read rate (oneDNN's and MKL's one-row kernels reach
                               about half of it); with one_row_kernel False, the multi-row kernel below
            CPU, several rows  oneDNN's multiply on w's packed copy: w read once for all the rows (at about half the
                               read rate for a few rows, on the EPYC VM)
        """
        if x.device.type != "cpu":
            return F.linear(x, w)
        if self.one_row_kernel and x.shape[:-1].numel() == 1:
            return (w * x.reshape(1, -1)).sum(-1).view(*x.shape[:-1], w.shape[0])
        return torch_internals.packed_linear(x, self.packed[id(w)], w.shape[0])

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """softmax(q·kᵀ / √head_dim, masked)·v for q [batch, head, n, head_dim] against k, v [batch, kv_head, key_pos,
        head_dim], each kv_head serving head / kv_head query heads (GQA) without repeating K/V. torch's fused kernel
        (SDPA), except for one query row per sequence on a CPU (a decode step, alone or batched): the same arithmetic
        written out, which the compiler fuses into the step's own loops (the fused kernel's set-up costs a one-row
        step more than its arithmetic; a long prefill's scores are better never materialized)."""
        if mask is None:  # a prefill over its own keys: the fused causal kernel (flash attention on a GPU)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if q.device.type != "cpu" or q.shape[2] != 1 or q.shape[0] != 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        batch, heads, n, hd = q.shape
        kv_heads = k.shape[1]
        qg = q.reshape(batch, kv_heads, heads // kv_heads, n, hd)  # [batch, kv_head, group, n, head_dim]
        scores = torch.einsum("bkgnd,bkld->bkgnl", qg, k) * hd ** -0.5  # [batch, kv_head, group, n, key_pos]
        scores = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        return torch.einsum("bkgnl,bkld->bkgnd", scores, v).reshape(batch, heads, n, hd)

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """transformers' LlamaRMSNorm: in float32, then back to x's dtype, times the weight."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * h.to(x.dtype)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [batch, head, n, head_dim] rotated by its positions' angles (transformers' rotate_half)."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(self, ids: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """One pass: ids [batch, n] at positions input_pos [n] (the same for every sequence); logits of the last
        row of each sequence, [batch, vocab]."""
        batch, n = ids.shape
        hd, q_size, kv_size = self.head_dim, self.heads * self.head_dim, self.kv_heads * self.head_dim
        x = F.embedding(ids, self.embed)  # [batch, n, d_model]
        cos, sin = self.cos[input_pos], self.sin[input_pos]  # [n, head_dim]
        mask = self.causal[input_pos]  # [n, key_pos]: each row sees the positions up to its own
        for layer in range(len(self.wqkv)):
            h = self.rms(x, self.attn_norm[layer])
            q, k, v = self.linear(h, self.wqkv[layer]).split([q_size, kv_size, kv_size], dim=-1)
            q = self.rope(q.view(batch, n, self.heads, hd).transpose(1, 2), cos, sin)  # [batch, head, n, head_dim]
            k = self.rope(k.view(batch, n, self.kv_heads, hd).transpose(1, 2), cos, sin)  # [batch, kv_head, n, hd]
            v = v.view(batch, n, self.kv_heads, hd).transpose(1, 2)
            # written in place into the module's own whole buffers (a compiler then writes them where they lie, and sees
            # fixed addresses: CUDA graphs); a write through a slice would be copied whole, layer by layer
            k_cache, v_cache = getattr(self, f"k_cache_{layer}"), getattr(self, f"v_cache_{layer}")
            where = (torch.arange(batch, device=x.device)[:, None, None],
                     torch.arange(self.kv_heads, device=x.device)[None, :, None], input_pos[None, None, :])
            k_cache.index_put_(where, k)
            v_cache.index_put_(where, v)
            if n > 1:  # a prefill: the prompt's own keys, causal (the cache's empty rest is never read)
                y = self.attend(q, k, v, None)
            else:  # a decode step: every position the cache holds, up to its own
                y = self.attend(q, k_cache[:batch], v_cache[:batch], mask)
            x = x + self.linear(y.transpose(1, 2).reshape(batch, n, q_size), self.wo[layer])
            h = self.rms(x, self.mlp_norm[layer])
            gate, up = self.linear(h, self.w13[layer]).split([self.d_ff, self.d_ff], dim=-1)
            x = x + self.linear(F.silu(gate) * up, self.w2[layer])
        return self.linear(self.rms(x[:, -1], self.norm), self.lm_head)  # [batch, vocab]

    def __del__(self):
        if torch_internals is not None:  # None at interpreter exit, when module globals are gone first
            torch_internals.unpack(getattr(self, "packed", {}).values())


# ---------------------------------------------------------------- compiled, and timed


def compile_settings(device: torch.device) -> dict:
    """How the pass is compiled on this device (gpt-fast's settings): inductor's options and the words a page shows.

    GPU: CUDA graphs (what `mode="reduce-overhead"` turns on: one launch a step); the matrix products are cuBLAS's.
    CPU: frozen weights (`freezing`: the weights become constants the compiled loops read directly); the
    multi-row products call oneDNN on packed copies made once (`LeanLlama.linear`). The options go to this
    compile only (torch.compile's `options`), never to inductor's global config.
    """
    if device.type == "cuda":
        return {"options": {"triton.cudagraphs": True},
                "words": "gpt-fast's Llama, torch.compile whole (CUDA graphs)"}
    return {"options": {"freezing": True},
            "words": "gpt-fast's Llama, torch.compile whole (inductor, frozen weights; several rows: oneDNN on "
                     "packed weights)"}


def compiled_pass(lean: LeanLlama):
    """The lean forward compiled whole (fullgraph), with this device's settings: one graph per shape, or one for
    every n ≥ 2 once the caller marks that dimension dynamic (torch_internals.mark_dynamic)."""
    torch_internals.allow_recompiles()
    return torch.compile(lean, fullgraph=True, options=compile_settings(lean.embed.device)["options"])


def run_once(fn, ids: torch.Tensor, input_pos: torch.Tensor) -> float:
    """One call of fn(ids, input_pos), perf_counter around a device sync: its milliseconds. (The first call of a
    new graph compiles: its time is a warm-up, never a pass's.)"""
    device = ids.device
    with torch.no_grad():
        _mark_step(device)
        dev.sync(device)
        t0 = time.perf_counter()
        fn(ids, input_pos)
        dev.sync(device)
        return (time.perf_counter() - t0) * 1e3


def _mark_step(device: torch.device) -> None:
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()
