"""A paged KV cache: keys and values in fixed-size blocks of real tensors, and one pass over many requests.

    pool     per layer, keys and values [num_blocks * page_size + 1, kv_head, head_dim]; position p of a request
             lives in slot  block_table[p // page_size] * page_size + p % page_size; the last slot is the null
             slot (vLLM's null block): always zero, what a padded read reads
    a pass   the fed tokens of every scheduled request laid end to end: input_ids [batch=1, T],
             T = Σ q_len (1 per decoding request, a whole chunk per prefilling one); position_ids [1, T]
             count each request's own positions, so RoPE and learned positions see what they would alone
    update   each layer writes the T new keys and values into their slots, then reads every request's keys
             through its block table in ONE gather: [batch, kv_head, key_pos, head_dim], batch = the requests of
             the pass, key_pos up to the longest request's kv_len (a shorter request's tail reads the null slot)
    attend   ONE call of the layer's own eager attention for every request at once (its scaling, soft-capping,
             GQA): the queries laid out the same way, [batch, head, query_pos, head_dim] (query_pos up to the
             longest q_len), against those keys, under a mask built from the block tables: request i's query at
             position p sees key_pos k only if k ≤ p (its own causal range, inside the layer's sliding window)
             and k < its kv_len (no padding). The outputs are laid end to end again: [1, T, head, head_dim].

No per-request Python loop runs inside the pass: the index tensors and the mask are built once per pass and
shared by every layer. The work is batch · max q_len · max kv_len scores per head and layer: a decode step of B
requests at one context scores B · (context + 1), linear in the batch, every score needed; a prefill chunk beside
decodes pads every decode's queries to the chunk's length, scores computed and dropped (`scored` against `needed`,
counted per pass; `attention_work` measures a decode step).

Which kernel: this padded one-call eager attention, because it was the faster one on the 2-core CPU the app is
timed on, and it keeps every family's own eager attention (Gemma's soft-capping, GPT-2's scaling) with no score_mod
per family. One layer's attention for a decode step of 8 requests at 65 keys (8 heads of 32, one thread): 0.21 ms
padded eager against 0.27 ms for FlexAttention with a paged block mask over the pool, compiled by inductor (30 s of
compiling per new shape; uncompiled, FlexAttention scores every query against every slot of the pool).
`python -m engine bench` times a whole serving run with this pass against attention called request by request.

The model is the loaded one, unchanged. Its layers call `update` as they would a DynamicCache's, and
their attention goes through engine.forward.capture, which hands it to `attend` here while a paged pass
runs (`capture.paged_pass`). Which block holds what is bookkeeping, not tensors: engine/generate/serving/blocks.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.forward import capture
from engine.forward.run import Pass, run_pass


class PagedKV:
    """The pool's tensors: every layer's keys and values, slot by slot (a block is page_size slots), and the null
    slot after the last block."""

    def __init__(self, lm, num_blocks: int, page_size: int):
        s = lm.spec
        self.num_blocks, self.page_size = num_blocks, page_size
        self.null_slot = num_blocks * page_size  # read by padding, never written: zeros
        shape = (num_blocks * page_size + 1, s.kv_heads, s.head_dim)  # [slot, kv_head, head_dim]
        self.keys = [torch.zeros(shape, dtype=lm.dtype, device=lm.device) for _ in range(s.layers)]
        self.values = [torch.zeros(shape, dtype=lm.dtype, device=lm.device) for _ in range(s.layers)]

    @property
    def bytes_per_block(self) -> int:
        """Keys and values of page_size positions in every layer: what one block id stands for."""
        per_slot = sum(k[0].numel() * k.element_size() * 2 for k in self.keys)
        return per_slot * self.page_size

    @property
    def bytes(self) -> int:
        return self.bytes_per_block * self.num_blocks


@dataclass(frozen=True)
class Row:
    """One request's part of a paged pass: its fed tokens, where they go, and which slots it reads."""

    token_ids: tuple[int, ...]  # fed this pass: q_len of them
    start: int  # position of the first fed token (positions before it are already in the pool)
    slots: tuple[int, ...]  # the slot of every position 0 .. start + q_len - 1, from the block table
    emits: bool  # its last fed token's logits choose the next token (a decode, or a prefill's last chunk)

    @property
    def q_len(self) -> int:
        return len(self.token_ids)

    @property
    def kv_len(self) -> int:
        return self.start + len(self.token_ids)


class PagedPass:
    """One forward pass over many requests on the pool: what the model's layers see as their cache."""

    is_compileable = False

    def __init__(self, kv: PagedKV, rows: list[Row]):
        self.kv = kv
        self.rows = rows
        device = kv.keys[0].device
        batch, max_q, max_kv = len(rows), max(r.q_len for r in rows), max(r.kv_len for r in rows)
        self.shape = (batch, max_q, max_kv)
        q_pos, write, read, out_rows = [], [], [], []
        for i, r in enumerate(rows):  # index lists, once per pass (the layers below run no loop over requests)
            q_pos += range(r.start, r.kv_len)
            write += r.slots[r.start:r.kv_len]
            read += r.slots[:r.kv_len] + (kv.null_slot,) * (max_kv - r.kv_len)  # [batch, key_pos], padded
            out_rows += range(i * max_q, i * max_q + r.q_len)  # row i's queries in the [batch, query_pos] layout

        def tensor(x):
            return torch.tensor(x, dtype=torch.long, device=device)

        self.q_pos, self.write, self.read = tensor(q_pos), tensor(write), tensor(read)
        if max_q == 1:  # every request feeds one token: the fed tokens are already the [batch, query_pos] layout
            self.in_rows = self.out_rows = None
        else:
            self.in_rows = tensor(self._in_rows())  # [batch * max_q] -> its fed token (padding: the row's first)
            self.out_rows = tensor(out_rows)  # [T]: where each fed token sits in [batch * max_q]
        self.needed_per_layer = sum(r.q_len * r.kv_len for r in rows)
        self._masks: dict = {}
        self.scored = 0  # (query, key) scores the attention computed, per head, all layers: counted off the tensors
        self.needed = 0  # of them, those a query may see (Σ q_len_i · kv_len_i per layer): the rest is padding

    def _in_rows(self) -> list[int]:
        out, t = [], 0
        _, max_q, _ = self.shape
        for r in self.rows:
            out += list(range(t, t + r.q_len)) + [t] * (max_q - r.q_len)  # a padded query repeats the row's first: dropped after
            t += r.q_len
        return out

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        """keys/values [1, kv_head, T, head_dim] of the fed tokens -> written to their slots; returns what the layer
        attends to, read through every block table at once: [batch, kv_head, key_pos, head_dim]."""
        pool_k, pool_v = self.kv.keys[layer_idx], self.kv.values[layer_idx]
        pool_k.index_copy_(0, self.write, keys[0].transpose(0, 1).to(pool_k.dtype))
        pool_v.index_copy_(0, self.write, values[0].transpose(0, 1).to(pool_v.dtype))
        batch, _, max_kv = self.shape
        return (pool_k.index_select(0, self.read).view(batch, max_kv, *pool_k.shape[1:]).transpose(1, 2),
                pool_v.index_select(0, self.read).view(batch, max_kv, *pool_v.shape[1:]).transpose(1, 2))

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # position_ids are always given: nothing asks the cache where a sequence starts

    def attend(self, eager, module, query, key, value, **kwargs):
        """Every request's queries against its own keys, in one call of the layer's own eager attention: query
        [1, head, T, head_dim] laid out as [batch, head, query_pos, head_dim]; key/value [batch, kv_head, key_pos,
        head_dim] from `update`; out [batch, query_pos, head, head_dim], its real rows laid end to end again as
        [1, T, head, head_dim]."""
        batch, max_q, max_kv = self.shape
        heads, head_dim = query.shape[1], query.shape[3]
        if self.in_rows is None:  # every request feeds one token: T = batch, already in order
            q = query[0].transpose(0, 1)[:, :, None]
        else:
            q = query[0].index_select(1, self.in_rows).view(heads, batch, max_q, head_dim).transpose(0, 1)
        mask = self.mask(kwargs.get("sliding_window"), query.dtype)
        out, _ = eager(module, q, key, value, mask, **kwargs)
        self.scored += batch * max_q * max_kv
        self.needed += self.needed_per_layer
        out = out.reshape(batch * max_q, heads, out.shape[-1])
        if self.in_rows is not None:
            out = out.index_select(0, self.out_rows)
        return out[None], None

    def mask(self, window: int | None, dtype: torch.dtype) -> torch.Tensor | None:
        """[batch, 1, query_pos, key_pos], built from the rows' positions: 0 where request i's query may look (key
        k ≤ its position, k < its kv_len, inside the window), the dtype's lowest value where it may not. None when
        every request decodes one token at the same kv_len outside any window: each sees every key it read."""
        key = (window, dtype)
        if key not in self._masks:
            batch, max_q, max_kv = self.shape
            uniform = max_q == 1 and all(r.kv_len == max_kv for r in self.rows)
            if uniform and (window is None or window >= max_kv):
                self._masks[key] = None
                return None
            device = self.read.device
            starts = torch.tensor([r.start for r in self.rows], device=device)
            kv_lens = torch.tensor([r.kv_len for r in self.rows], device=device)
            q_pos = starts[:, None] + torch.arange(max_q, device=device)  # [batch, query_pos]
            k_pos = torch.arange(max_kv, device=device)  # [key_pos]
            allowed = (k_pos[None, None, :] <= q_pos[:, :, None]) & (k_pos[None, None, :] < kv_lens[:, None, None])
            if window is not None:
                allowed &= (q_pos[:, :, None] - k_pos[None, None, :]) < window
            blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
            self._masks[key] = blocked.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
        return self._masks[key]


def run_paged(lm, kv: PagedKV, rows: list[Row]) -> Pass:
    """One forward pass for every row at once: [batch=1, T] in; logits of each emitting row's last fed token out,
    in row order [1, emitting rows, vocab]. Timed like every pass (engine.forward.run.run_pass), once."""
    return run_paged_pass(lm, PagedPass(kv, rows))


def run_paged_pass(lm, p: PagedPass) -> Pass:
    """run_paged for a PagedPass already built: its `scored` then counts what the pass's attention computed."""
    ids, ends, t = [], [], 0
    for r in p.rows:
        ids += r.token_ids
        t += r.q_len
        if r.emits:
            ends.append(t - 1)  # each emitting row's last fed token
    ends = torch.tensor(ends, dtype=torch.long, device=lm.device)
    placeholder = torch.zeros(1, 1, 1, 1, device=lm.device)  # 4D: the model uses it as is; p.attend masks per request
    with capture.paged_pass(p):
        return run_pass(lm, torch.tensor([ids], dtype=torch.long), p, attention_mask=placeholder,
                        position_ids=p.q_pos[None], logits_to_keep=ends, trim=False)


@dataclass(frozen=True)
class AttentionWork:
    """One decode pass of `batch` requests at `context` positions each, measured (see `attention_work`)."""

    batch: int
    context: int
    scores: int  # (query, key) scores its attention computed, per head, all layers (counted off the tensors)
    needed: int  # of them, those some query may see: the rest is padding (0 when every request is as long)
    flops: int  # 2 · head · (K width + V width) per score computed
    forward_ms: float  # the pass, one run after a warm-up run


def attention_work(lm, batch: int, context: int, page_size: int = 16) -> AttentionWork:
    """Measured: one decode pass for `batch` requests, each at `context` positions, on a fresh pool (its keys are
    zeros: timing and counting only, no tokens to keep), timed once after a warm-up run (perf_counter around a
    device sync).

    Each request scores its own context + 1 keys in every layer, so at a fixed context the work is linear in the
    batch: scores = batch · layers · (context + 1)."""
    s = lm.spec
    per = -(-(context + 1) // page_size)  # blocks each request holds
    kv = PagedKV(lm, batch * per, page_size)
    rows = [Row((0,), context, tuple(range(i * per * page_size, i * per * page_size + context + 1)), True)
            for i in range(batch)]  # request i's blocks: i·per .. i·per + per - 1, in order
    p = PagedPass(kv, rows)
    run_paged_pass(lm, p)  # warm-up: one-off costs (allocations, the masks) excluded from the time
    p.scored = p.needed = 0
    result = run_paged_pass(lm, p)  # the same pass again: it writes the same keys to the same slots
    return AttentionWork(batch=batch, context=context, scores=p.scored, needed=p.needed,
                         flops=2 * s.heads * (s.k_dim + s.v_dim) * p.scored, forward_ms=result.timing.forward_ms)
