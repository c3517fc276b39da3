"""The block manager: which block of the pool holds which positions of which request.

    block        page_size positions of keys and values, in every layer (engine/forward/paged.py has the tensors)
    block table  a request's list of block ids: position p lives in block table[p // page_size]
    ref count    how many requests' tables hold the block; it is free when that falls to 0
    prefix hash  a full block's identity: hash(previous block's hash, its page_size token ids), so two
                 blocks with the same hash hold the keys and values of the same whole prefix, unless two prefixes
                 collide (Python's `hash` is 64 bits): a hit is therefore checked against the token ids the block
                 keeps, block by block from the first, before it is trusted (as nano-vllm does)

A block is in one of four states (`BlockState`, what the pool picture draws):

    free       no table holds it and it holds nothing worth keeping (never filled, or evicted)
    cached     no table holds it, but it is full and keeps its prefix hash: cached, free to evict. A later
               request with the same prefix takes it back (a prefix hit across time, after the request
               that computed it finished); when the pool runs out of free blocks, the least recently
               used cached block is evicted (its hash forgotten) and reused, as vLLM and SGLang do
    in use     one table holds it
    shared     several tables hold it: a common prefix, computed and stored once

Checked, then committed: `cached_prefix`, `can_allocate` and `can_grow` only look; `allocate` and `grow`
take blocks, and only after a check said they are there. Blocks are taken as a request grows and given
back when it finishes or is preempted. A request that starts with the same full blocks of tokens as one
held or cached shares them (ref count + 1) and skips computing them. A shared block is always full and
never written again, so sharing needs no copy. The free block with the lowest id is taken first, so the
picture of the pool fills from the left; cached ones only when no free one is left, least recently used
first. Modelled on nano-vllm's block_manager.py and vLLM's block pool (its free queue keeps cached blocks).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum


class BlockState(StrEnum):
    """A block's state in the pool; the values are what records, JSON and pictures show."""

    FREE = "free"
    CACHED = "cached"  # cached, free to evict: no table holds it, its full prefix is kept for a later request
    IN_USE = "in use"
    SHARED = "shared"


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full (and computed); None while it fills, free or evicted
    token_ids: tuple[int, ...] = ()  # the page_size token ids it holds, kept with its hash: what a hit is checked by


def block_tokens(token_ids: list[int], block: int, page_size: int) -> tuple[int, ...]:
    """The token ids of the `block`-th block of a sequence: positions block * page_size .. (block + 1) * page_size - 1."""
    return tuple(token_ids[block * page_size:(block + 1) * page_size])


def block_hash(before: int | None, token_ids: list[int], block: int, page_size: int) -> int:
    """A full block's prefix hash: the block before it (None for the first) and its own page_size token ids."""
    return hash((before, block_tokens(token_ids, block, page_size)))


def prefix_hashes(token_ids: list[int], page_size: int, blocks: int) -> list[int]:
    """The prefix hash of each of the first `blocks` full blocks of these tokens (each hash covers all before it)."""
    out, h = [], None
    for b in range(blocks):
        h = block_hash(h, token_ids, b, page_size)
        out.append(h)
    return out


class BlockManager:
    """The pool's bookkeeping: ref counts, prefix hashes, the free and cached lists. Tables live on the requests."""

    def __init__(self, num_blocks: int, page_size: int):
        self.page_size = page_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free = list(range(num_blocks))  # a heap: the lowest free id first
        self._cached: OrderedDict[int, None] = OrderedDict()  # cached, free to evict: least recently used first
        self._by_hash: dict[int, int] = {}  # prefix hash -> id of the full block that holds it (held or cached)
        self.evicted = 0  # cached blocks evicted so far to make room

    # ------------------------------------------------------------ counts

    @property
    def num_free(self) -> int:
        """Blocks no table holds: free ones and cached ones (a cached block is free to take, by evicting it)."""
        return len(self._free) + len(self._cached)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_used(self) -> int:
        return len(self.blocks) - self.num_free

    @property
    def num_shared(self) -> int:
        return sum(1 for b in self.blocks if b.ref_count > 1)

    def state(self, block_id: int) -> BlockState:
        refs = self.blocks[block_id].ref_count
        if refs:
            return BlockState.SHARED if refs > 1 else BlockState.IN_USE
        return BlockState.CACHED if block_id in self._cached else BlockState.FREE

    def states(self) -> tuple[BlockState, ...]:
        return tuple(self.state(b.id) for b in self.blocks)

    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.page_size)

    # ------------------------------------------------------------ checks: they touch nothing

    def cached_prefix(self, token_ids: list[int]) -> int:
        """Positions a new table for these tokens could take from full blocks held by other requests or cached
        after theirs finished (a whole number of blocks). At least one token is always left to compute: its logits
        choose the next token. A block found by its prefix hash is taken only if it holds these very token ids (a
        hash collision is a miss, not someone else's keys and values): checked from the first block on, so every
        block before a hit was checked too, and the hit covers the whole prefix."""
        shared = 0
        for b, h in enumerate(prefix_hashes(token_ids, self.page_size, (len(token_ids) - 1) // self.page_size)):
            if h not in self._by_hash or not self.holds(self._by_hash[h], block_tokens(token_ids, b, self.page_size)):
                break
            shared += 1
        return shared * self.page_size

    def holds(self, block_id: int, token_ids: tuple[int, ...]) -> bool:
        """Does this block hold exactly these token ids (the check a prefix hit must pass, nano-vllm's)?"""
        return self.blocks[block_id].token_ids == token_ids

    def can_allocate(self, token_ids: list[int], positions: int, cached: int = 0) -> int:
        """The blocks no table holds that a new table for these tokens would take to hold `positions` positions, its
        first `cached` positions from prefix blocks (see cached_prefix): the new blocks it needs, and those of its
        prefix blocks that are cached (taking one back takes it off the free count). -1 when there are not that
        many (nano-vllm's can_allocate)."""
        revived = sum(1 for h in prefix_hashes(token_ids, self.page_size, cached // self.page_size)
                      if self.blocks[self._by_hash[h]].ref_count == 0)
        need = self.blocks_for(positions) - cached // self.page_size + revived
        return need if need <= self.num_free else -1

    def can_grow(self, table: list[int], positions: int) -> bool:
        """Are there blocks enough (free, or cached and free to evict) for this table to hold `positions` positions?"""
        return self.blocks_for(positions) - len(table) <= self.num_free

    # ------------------------------------------------------------ commits: each after its check

    def allocate(self, table: list[int], token_ids: list[int], positions: int, cached: int = 0) -> None:
        """A new table: the blocks of its first `cached` positions shared (their ref count + 1, nothing computed
        again; a cached one is taken back), then free blocks until it holds `positions` positions. Check
        can_allocate first."""
        assert not table, "only a request that holds no block can start from shared ones"
        for h in prefix_hashes(token_ids, self.page_size, cached // self.page_size):
            block = self.blocks[self._by_hash[h]]
            if block.ref_count == 0:
                del self._cached[block.id]  # a hit across time: the request that computed it has finished
            block.ref_count += 1
            table.append(block.id)
        self.grow(table, positions)

    def grow(self, table: list[int], positions: int) -> None:
        """Append blocks to the table until it holds `positions` positions (check can_grow first)."""
        while len(table) < self.blocks_for(positions):
            block = self.blocks[self._take()]
            block.ref_count = 1
            table.append(block.id)

    def _take(self) -> int:
        """A free block, the lowest id first; when none is left, the least recently used cached block, evicted: its
        prefix hash is forgotten and its keys and values will be overwritten."""
        if self._free:
            return heapq.heappop(self._free)
        block_id, _ = self._cached.popitem(last=False)
        block = self.blocks[block_id]
        if self._by_hash.get(block.hash) == block_id:
            del self._by_hash[block.hash]
        block.hash, block.token_ids = None, ()
        self.evicted += 1
        return block_id

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
            block.token_ids = block_tokens(token_ids, b, self.page_size)
            self._by_hash.setdefault(block.hash, block.id)

    def free(self, table: list[int]) -> None:
        """A request lets go of its blocks (it finished, or was preempted). A block nobody holds stays cached if it
        holds a registered prefix (free to evict), else it is free. The table is let go of from its tail, so a
        request's last blocks, the least likely to be shared, are the first evicted (as vLLM does)."""
        for block_id in reversed(table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is not None and self._by_hash.get(block.hash) == block_id:
                    self._cached[block_id] = None  # the most recently used end
                else:  # half full, or a duplicate of a prefix another block holds
                    block.hash, block.token_ids = None, ()
                    heapq.heappush(self._free, block_id)
        table.clear()

    # ------------------------------------------------------------ where positions live, and the record

    def slots(self, table: list[int], positions: int) -> tuple[int, ...]:
        """The pool slot of each position 0 .. positions-1: table[p // page_size] * page_size + p % page_size."""
        p = self.page_size
        return tuple(table[i // p] * p + i % p for i in range(positions))

    def ref_counts(self) -> tuple[int, ...]:
        return tuple(b.ref_count for b in self.blocks)
