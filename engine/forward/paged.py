"""A paged KV cache: keys and values in fixed-size blocks of real tensors, and one pass over many requests.

    pool     per layer, keys and values [num_blocks * page_size, kv_head, head_dim]; position p of a request
             lives in slot  block_table[p // page_size] * page_size + p % page_size
    a pass   the fed tokens of every scheduled request laid end to end: input_ids [batch=1, T],
             T = Σ q_len (1 per decoding request, a whole chunk per prefilling one); position_ids [1, T]
             count each request's own positions, so RoPE and learned positions see what they would alone
    update   each layer writes the T new keys and values into their slots, then gathers, request after
             request, the slots of its block table: [1, kv_head, Σ kv_len, head_dim]
    attend   each request's queries against ITS OWN keys only, as paged attention does: request i's
             [1, head, q_len_i, head_dim] · its [1, kv_head, kv_len_i, head_dim], causal (and inside the
             layer's sliding window): [1, 1, q_len_i, kv_len_i]. The work is Σ q_len_i · kv_len_i, so at a fixed
             context it grows linearly with the batch (one query block against every request's keys, then
             masked, would grow as batch²: 32 requests at 64 positions, 277 MFLOP where 8.6 are needed).

The model is the loaded one, unchanged. Its layers call `update` as they would a DynamicCache's, and
their attention goes through engine.forward.capture, which hands it to `attend` here while a paged pass
runs (`capture.paged_pass`): every family keeps its own eager attention (scaling, soft-capping, GQA), called
once per request. `attention_work` measures what that costs at a batch size: the scores the pass computed.
Which block holds what is bookkeeping, not tensors: engine/generate/serving/blocks.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from engine.forward import capture
from engine.forward.run import Pass, run_pass


class PagedKV:
    """The pool's tensors: every layer's keys and values, slot by slot (a block is page_size slots)."""

    def __init__(self, lm, num_blocks: int, page_size: int):
        s = lm.spec
        self.num_blocks, self.page_size = num_blocks, page_size
        shape = (num_blocks * page_size, s.kv_heads, s.head_dim)  # [slot, kv_head, head_dim]
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


class PagedPass:
    """One forward pass over many requests on the pool: what the model's layers see as their cache."""

    is_compileable = False

    def __init__(self, kv: PagedKV, rows: list[Row]):
        self.kv = kv
        device = kv.keys[0].device
        self.rows = rows
        q_pos, write, read = [], [], []
        self.spans = []  # per request: (its fed rows in the pass, its keys in what `update` returns)
        for r in rows:
            n = r.start + len(r.token_ids)
            self.spans.append((slice(len(q_pos), len(q_pos) + len(r.token_ids)), slice(len(read), len(read) + n)))
            q_pos += range(r.start, n)
            write += r.slots[r.start:n]
            read += r.slots[:n]  # its block table's slots, in position order: the blocks it gathers

        def tensor(x):
            return torch.tensor(x, dtype=torch.long, device=device)

        self.q_pos, self.write, self.read = tensor(q_pos), tensor(write), tensor(read)
        self._masks: dict = {}
        self.scored = 0  # (query, key) scores the attention computed, per head, all layers: counted off the tensors

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        """keys/values [1, kv_head, T, head_dim] of the fed tokens -> written to their slots; returns what the
        layer attends to, [1, kv_head, Σ kv_len, head_dim], request after request."""
        pool_k, pool_v = self.kv.keys[layer_idx], self.kv.values[layer_idx]
        pool_k.index_copy_(0, self.write, keys[0].transpose(0, 1).to(pool_k.dtype))
        pool_v.index_copy_(0, self.write, values[0].transpose(0, 1).to(pool_v.dtype))
        return (pool_k.index_select(0, self.read).transpose(0, 1)[None],
                pool_v.index_select(0, self.read).transpose(0, 1)[None])

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # position_ids are always given: nothing asks the cache where a sequence starts

    def attend(self, eager, module, query, key, value, **kwargs):
        """Each request's queries against its own keys only, with the layer's own eager attention (its scaling,
        soft-capping, GQA): query [1, head, T, head_dim] and key/value [1, kv_head, Σ kv_len, head_dim] are cut
        into each request's part; the outputs [1, q_len_i, head, head_dim] are laid end to end again."""
        window = kwargs.get("sliding_window")
        outs = []
        for i, (rows, keys) in enumerate(self.spans):
            q, k, v = query[:, :, rows], key[:, :, keys], value[:, :, keys]
            out, _ = eager(module, q, k, v, self.mask(i, window, query.dtype), **kwargs)
            self.scored += q.shape[2] * k.shape[2]
            outs.append(out)
        return torch.cat(outs, dim=1), None

    def mask(self, i: int, window: int | None, dtype: torch.dtype) -> torch.Tensor | None:
        """[1, 1, q_len, kv_len] for request i: 0 where a query may look (keys up to its own position, inside the
        window), the dtype's lowest value where it may not. None when it may look at every key it gathered (a
        decode row outside any window): nothing to add."""
        key = (i, window, dtype)
        if key not in self._masks:
            r = self.rows[i]
            n = r.start + len(r.token_ids)
            if len(r.token_ids) == 1 and (window is None or window >= n):
                self._masks[key] = None
                return None
            q_pos = torch.arange(r.start, r.start + len(r.token_ids), device=self.q_pos.device)
            k_pos = torch.arange(r.start + len(r.token_ids), device=self.q_pos.device)
            allowed = k_pos[None, :] <= q_pos[:, None]
            if window is not None:
                allowed &= (q_pos[:, None] - k_pos[None, :]) < window
            blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
            self._masks[key] = blocked.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
        return self._masks[key]


def run_paged(lm, kv: PagedKV, rows: list[Row]) -> Pass:
    """One forward pass for every row at once: [batch=1, T] in; logits of each emitting row's last fed token out,
    in row order [1, emitting rows, vocab]. Timed like every pass (engine.forward.run.run_pass), once."""
    return run_paged_pass(lm, PagedPass(kv, rows))


def run_paged_pass(lm, p: PagedPass) -> Pass:
    """run_paged for a PagedPass already built: its `scored` then counts what the pass's attention computed."""
    ids = [t for r in p.rows for t in r.token_ids]
    ends = torch.tensor([end - 1 for end, r in zip(accumulate(len(r.token_ids) for r in p.rows), p.rows) if r.emits],
                        dtype=torch.long, device=lm.device)  # each emitting row's last fed token
    placeholder = torch.zeros(1, 1, 1, 1, device=lm.device)  # 4D: the model uses it as is; p.attend masks per request
    with capture.paged_pass(p):
        return run_pass(lm, torch.tensor([ids], dtype=torch.long), p, attention_mask=placeholder,
                        position_ids=p.q_pos[None], logits_to_keep=ends, trim=False)


def attention_work(lm, batch: int, context: int, page_size: int = 16) -> dict:
    """Measured: one decode pass for `batch` requests, each at `context` positions, on a fresh pool (its keys are
    zeros: timing and counting only, no tokens to keep). Returns the (query, key) scores its attention computed, per
    head, all layers (counted off the tensors each request's attention multiplied), their FLOPs (2 · head ·
    (K width + V width) per score), and the pass's time (one run after a warm-up run: perf_counter around a device
    sync).

    Each request scores its own context + 1 keys in every layer, so at a fixed context the work is linear in the
    batch: scores = batch · layers · (context + 1)."""
    s = lm.spec
    per = -(-(context + 1) // page_size)  # blocks each request holds
    kv = PagedKV(lm, batch * per, page_size)
    rows = [Row((0,), context, tuple(range(i * per * page_size, i * per * page_size + context + 1)), True)
            for i in range(batch)]  # request i's blocks: i·per .. i·per + per - 1, in order
    p = PagedPass(kv, rows)
    run_paged_pass(lm, p)  # warm-up: one-off costs (allocations, the masks) excluded from the time
    p.scored = 0
    result = run_paged_pass(lm, p)  # the same pass again: it writes the same keys to the same slots
    return {"batch": batch, "context": context, "scores": p.scored,
            "flops": 2 * s.heads * (s.k_dim + s.v_dim) * p.scored, "forward_ms": result.timing.forward_ms}
