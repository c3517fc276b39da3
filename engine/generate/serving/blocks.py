"""The block manager: which block of the pool holds which positions of which request.

    block        page_size positions of keys and values, in every layer (engine/forward/paged.py has the tensors)
    block table  a request's list of block ids: position p lives in block table[p // page_size]
    ref count    how many requests' tables hold the block; it is free when that falls to 0
    prefix hash  a full block's identity: hash(previous block's hash, its page_size token ids), so two
                 blocks with the same hash hold the keys and values of the same whole prefix

Blocks are taken as a request grows and given back when it finishes or is preempted. A request that
starts with the same full blocks of tokens as one already held shares them (ref count + 1) and skips
computing them: a common system prompt is computed and stored once. A shared block is always full and
never written again, so sharing needs no copy. The free block with the lowest id is taken first, so the
picture of the pool fills from the left. Modelled on nano-vllm's block_manager.py and vLLM's block pool.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full (and computed); None while it fills, or free


def block_hash(before: int | None, token_ids: list[int], block: int, page_size: int) -> int:
    """A full block's prefix hash: the block before it (None for the first) and its own page_size token ids."""
    return hash((before, tuple(token_ids[block * page_size:(block + 1) * page_size])))


def prefix_hashes(token_ids: list[int], page_size: int, blocks: int) -> list[int]:
    """The prefix hash of each of the first `blocks` full blocks of these tokens (each hash covers all before it)."""
    out, h = [], None
    for b in range(blocks):
        h = block_hash(h, token_ids, b, page_size)
        out.append(h)
    return out


class BlockManager:
    """The pool's bookkeeping: ref counts, prefix hashes, the free list. Tables live on the requests."""

    def __init__(self, num_blocks: int, page_size: int):
        self.page_size = page_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free = list(range(num_blocks))  # a heap: the lowest free id first
        self._by_hash: dict[int, int] = {}  # prefix hash -> id of the full block that holds it

    # ------------------------------------------------------------ counts

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self.blocks) - len(self._free)

    @property
    def num_shared(self) -> int:
        return sum(1 for b in self.blocks if b.ref_count > 1)

    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.page_size)

    # ------------------------------------------------------------ growing, sharing, freeing

    def can_grow(self, table: list[int], positions: int) -> bool:
        """Are there free blocks enough for this table to hold `positions` positions?"""
        return self.blocks_for(positions) - len(table) <= len(self._free)

    def grow(self, table: list[int], positions: int) -> None:
        """Append blocks to the table until it holds `positions` positions (check can_grow first)."""
        while len(table) < self.blocks_for(positions):
            block = self.blocks[heapq.heappop(self._free)]
            block.ref_count = 1
            table.append(block.id)

    def share_prefix(self, table: list[int], token_ids: list[int]) -> int:
        """An empty table takes every leading full block another request already holds; returns the positions
        covered. At least one token is always left to compute: its logits choose the next token."""
        assert not table, "only a request that holds no block can start from shared ones"
        for h in prefix_hashes(token_ids, self.page_size, (len(token_ids) - 1) // self.page_size):
            block_id = self._by_hash.get(h)
            if block_id is None:
                break
            self.blocks[block_id].ref_count += 1
            table.append(block_id)
        return len(table) * self.page_size

    def register_full(self, table: list[int], token_ids: list[int], computed: int) -> None:
        """After a pass: every block of the table that is now full of computed positions gets its prefix hash,
        so a later request with the same prefix can share it. Blocks fill in order, so a new full block's
        prefix is its predecessor's hash and its own tokens: only the newly full blocks are hashed."""
        full = min(computed // self.page_size, len(table))
        for b in range(full):
            block = self.blocks[table[b]]
            if block.hash is not None:
                continue
            before = self.blocks[table[b - 1]].hash if b else None
            block.hash = block_hash(before, token_ids, b, self.page_size)
            self._by_hash.setdefault(block.hash, block.id)

    def free(self, table: list[int]) -> None:
        """A request lets go of its blocks (it finished, or was preempted); a block nobody holds is free again."""
        for block_id in table:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is not None and self._by_hash.get(block.hash) == block_id:
                    del self._by_hash[block.hash]
                block.hash = None
                heapq.heappush(self._free, block_id)
        table.clear()

    # ------------------------------------------------------------ for the record

    def ref_counts(self) -> tuple[int, ...]:
        return tuple(b.ref_count for b in self.blocks)
