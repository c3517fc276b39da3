"""A paged KV cache: keys and values in fixed-size blocks of real tensors, and one pass over many requests.

    pool     per layer, keys and values [num_blocks * page_size, kv_head, head_dim]; position p of a request
             lives in slot  block_table[p // page_size] * page_size + p % page_size
    a pass   the fed tokens of every scheduled request laid end to end: input_ids [batch=1, T],
             T = Σ q_len (1 per decoding request, a whole chunk per prefilling one); position_ids [1, T]
             count each request's own positions, so RoPE and learned positions see what they would alone
    update   each layer writes the T new keys and values into their slots, then reads back, request after
             request, every key it attends to: [1, kv_head, Σ kv_len, head_dim]
    mask     a query sees the keys of its own request only, at positions up to its own (and inside the
             layer's sliding window): block-diagonal and causal, [1, 1, T, Σ kv_len]

The model is the loaded one, unchanged. Its layers call `update` as they would a DynamicCache's, and
their attention goes through engine.forward.capture, which takes the mask from here while a paged pass
runs (`capture.paged_pass`), so every family keeps its own eager attention (scaling, soft-capping, GQA).
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
        q_row, q_pos, k_row, k_pos, write, read = [], [], [], [], [], []
        for i, r in enumerate(rows):
            n = r.start + len(r.token_ids)
            q_row += [i] * len(r.token_ids)
            q_pos += range(r.start, n)
            write += r.slots[r.start:n]
            k_row += [i] * n
            k_pos += range(n)
            read += r.slots[:n]

        def tensor(x):
            return torch.tensor(x, dtype=torch.long, device=device)

        self.q_row, self.q_pos, self.k_row, self.k_pos = tensor(q_row), tensor(q_pos), tensor(k_row), tensor(k_pos)
        self.write, self.read = tensor(write), tensor(read)
        self._masks: dict = {}

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

    def mask(self, window: int | None, dtype: torch.dtype) -> torch.Tensor:
        """[1, 1, T, Σ kv_len]: 0 where a query may look, the dtype's lowest value where it may not."""
        key = (window, dtype)
        if key not in self._masks:
            allowed = (self.q_row[:, None] == self.k_row[None, :]) & (self.k_pos[None, :] <= self.q_pos[:, None])
            if window is not None:
                allowed &= (self.q_pos[:, None] - self.k_pos[None, :]) < window
            blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
            self._masks[key] = blocked.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
        return self._masks[key]


def run_paged(lm, kv: PagedKV, rows: list[Row]) -> Pass:
    """One forward pass for every row at once: [batch=1, T] in; logits of each emitting row's last fed token out,
    in row order [1, emitting rows, vocab]. Timed like every pass (engine.forward.run.run_pass), once."""
    p = PagedPass(kv, rows)
    ids = [t for r in rows for t in r.token_ids]
    ends = torch.tensor([end - 1 for end, r in zip(accumulate(len(r.token_ids) for r in rows), rows) if r.emits],
                        dtype=torch.long, device=lm.device)  # each emitting row's last fed token
    placeholder = torch.zeros(1, 1, 1, 1, device=lm.device)  # 4D: the model uses it as is; capture swaps in p.mask
    with capture.paged_pass(p):
        return run_pass(lm, torch.tensor([ids], dtype=torch.long), p, attention_mask=placeholder,
                        position_ids=p.q_pos[None], logits_to_keep=ends, trim=False)
