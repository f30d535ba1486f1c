"""TGI 3's KV block allocators: a free list of blocks, and a radix trie of cached prompt prefixes over it.

The rules are those of TGI's v3 router (`block_allocator.rs`, `radix.rs`; docs/tgi-rules.md):
- `n_blocks = max_batch_total_tokens / block_size`; block 0 is reserved (TGI keeps it for health
  checks), so blocks 1..n-1 are free; allocations take blocks from the tail of the free list;
- with prefix caching (`RadixAllocator`), an allocation first looks up the longest cached prefix of
  the prompt, block-aligned; the matched blocks are shared (the node holding them is pinned by a
  reference count) and only the rest is taken from the free list, evicting unreferenced trie leaves
  in least-recently-used order when the free list is short;
- a prompt enters the trie only when its allocation is freed (the request ended), floored to whole
  blocks; generated tokens never do; blocks of a prefix that another request inserted meanwhile go
  back to the free list.

One deliberate difference: TGI also inserts the prompt of an allocation that was released without
ever being computed (an entry put back in the queue; TGI3 scheduling notes, flag 1), which would
hand later requests keys and values that were never written. Here `free` inserts only the tokens
whose keys and values were computed (`computed`), so a cache hit always reuses real KV.

A second one: when a prompt matches only part of a cached node, TGI pins that whole node, so the
unmatched rest of it cannot be evicted while the new request runs. With a cache little larger than
one request (max_batch_total_tokens near max_total_tokens), a prompt sharing its first token with
the cached one then never fits, nothing runs to free blocks, and the server waits forever. Here the
lookup splits the node at the match, as TGI's insert would, and pins only the matched part.

Pure Python, no torch: the scheduler, its tests and the simulator use it as it is; the engine's
runner keeps the keys and values at the slots an allocation names.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

__all__ = ["Allocation", "RadixAllocator", "RadixTrie", "SimpleAllocator"]


@dataclass
class Allocation:
    """Blocks held by one queue entry from admission until it is freed."""

    blocks: list[int]
    slots: list[int]
    prefix_len: int = 0  # prompt tokens found in the trie (block-aligned), before the scheduler's -1
    lookup: tuple[int, ...] | None = None  # prompt token ids, when the prefix cache is used
    node: _Node | None = None  # the deepest matched trie node, pinned while this allocation lives
    freed: bool = False


def _slots(blocks: list[int], block_size: int, tokens: int) -> list[int]:
    if block_size == 1:
        return list(blocks)
    return [b * block_size + i for b in blocks for i in range(block_size)][:tokens]


class SimpleAllocator:
    """Blocks without sharing: TGI's allocator when prefix caching is off."""

    def __init__(self, max_batch_total_tokens: int, block_size: int = 1) -> None:
        self.block_size = block_size
        self.n_blocks = max_batch_total_tokens // block_size
        self.free_blocks: list[int] = list(range(1, self.n_blocks))

    @property
    def free_count(self) -> int:
        return len(self.free_blocks)

    def allocate(self, tokens: int, lookup: list[int] | None = None) -> Allocation | None:
        needed = math.ceil(tokens / self.block_size)
        if needed > len(self.free_blocks):
            return None
        blocks = self._take(needed)
        return Allocation(blocks, _slots(blocks, self.block_size, tokens))

    def _take(self, n: int) -> list[int]:
        if n == 0:
            return []
        blocks = self.free_blocks[-n:]
        del self.free_blocks[-n:]
        return blocks

    def free(self, allocation: Allocation, computed: int = 0) -> None:
        if allocation.freed:
            return
        allocation.freed = True
        self.free_blocks.extend(allocation.blocks)


@dataclass(eq=False)
class _Node:
    key: list[int]
    blocks: list[int]
    parent: _Node | None
    last_accessed: int
    ref_count: int = 0
    children: dict[tuple[int, ...], _Node] = field(default_factory=dict)
    id: int = 0


class RadixTrie:
    """Cached prompt prefixes, each node holding the blocks of its key's tokens."""

    def __init__(self, block_size: int = 1) -> None:
        self.block_size = block_size
        self.time = 0
        self._ids = itertools.count(1)
        self.root = _Node([], [], None, 0, ref_count=1)  # never evicted
        # Unreferenced leaves by (last access, id): TGI keeps them in an ordered set; a heap with
        # lazy deletion gives the same order.
        self._leaves: list[tuple[int, int, _Node]] = []
        self._leaf_keys: set[tuple[int, int]] = set()

    # -- leaves -----------------------------------------------------------------------------
    def _add_leaf(self, node: _Node) -> None:
        key = (node.last_accessed, node.id)
        if key not in self._leaf_keys:
            self._leaf_keys.add(key)
            heapq.heappush(self._leaves, (node.last_accessed, node.id, node))

    def _remove_leaf(self, node: _Node) -> None:
        self._leaf_keys.discard((node.last_accessed, node.id))

    def _pop_leaf(self) -> _Node | None:
        while self._leaves:
            accessed, node_id, node = heapq.heappop(self._leaves)
            if (accessed, node_id) in self._leaf_keys:
                self._leaf_keys.discard((accessed, node_id))
                return node
        return None

    def _touch(self, node: _Node) -> None:
        if node.ref_count == 0:
            self._remove_leaf(node)
            node.last_accessed = self.time
            self._add_leaf(node)
        else:
            node.last_accessed = self.time

    def evictable_leaves(self) -> list[list[int]]:
        """Keys of the leaves eviction would take, oldest first (for tests and inspection)."""
        ordered = sorted((a, i) for a, i in self._leaf_keys)
        nodes = {n.id: n for _, _, n in self._leaves}
        return [self.full_key(nodes[i]) for _, i in ordered]

    @staticmethod
    def full_key(node: _Node) -> list[int]:
        parts = []
        while node.parent is not None:
            parts.append(node.key)
            node = node.parent
        return [t for part in reversed(parts) for t in part]

    def _edge(self, key: list[int] | tuple[int, ...]) -> tuple[int, ...]:
        return tuple(key[: self.block_size])

    def _shared(self, a: list[int], b: list[int] | tuple[int, ...]) -> int:
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n - n % self.block_size

    # -- lookup -----------------------------------------------------------------------------
    def find(self, key: list[int] | tuple[int, ...]) -> tuple[list[int], _Node]:
        """Blocks of the longest cached block-aligned prefix of `key`, and the deepest node matched."""
        self.time += 1
        blocks: list[int] = []
        node = self.root
        while len(key) >= self.block_size:
            child = node.children.get(self._edge(key))
            if child is None:
                break
            self._touch(child)
            shared = self._shared(child.key, key)
            blocks.extend(child.blocks[: shared // self.block_size])
            if shared < len(child.key):
                # Matched part of this node: the node returned (and pinned by the caller) holds exactly
                # the matched part, so the rest stays evictable (the second difference from TGI, above).
                return blocks, self._split(child, shared)
            node = child
            key = key[shared:]
        return blocks, node

    # -- reference counts ---------------------------------------------------------------------
    def incref(self, node: _Node) -> None:
        if node is self.root:
            return
        if node.ref_count == 0:
            self._remove_leaf(node)
        node.ref_count += 1

    def decref(self, node: _Node) -> None:
        if node is self.root:
            return
        node.ref_count -= 1
        if node.ref_count == 0:
            self._add_leaf(node)

    # -- insertion ------------------------------------------------------------------------------
    def insert(self, key: list[int] | tuple[int, ...], blocks: list[int]) -> int:
        """Insert a block-aligned prompt and its blocks; return how many of its tokens were already there."""
        self.time += 1
        node = self.root
        done = 0
        key = list(key)
        while key:
            child = node.children.get(self._edge(key))
            if child is None:
                self._add_node(node, key, blocks)
                return done
            self._touch(child)
            shared = self._shared(child.key, key)
            if shared == len(key):
                return done + shared
            if shared == len(child.key):
                done += shared
                key, blocks = key[shared:], blocks[shared // self.block_size:]
                node = child
                continue
            prefix = self._split(child, shared)
            self._add_node(prefix, key[shared:], blocks[shared // self.block_size:])
            return done + shared
        return done

    def _add_node(self, parent: _Node, key: list[int], blocks: list[int]) -> _Node:
        node = _Node(list(key), list(blocks), parent, self.time, id=next(self._ids))
        parent.children[self._edge(key)] = node
        self.incref(parent)
        self._add_leaf(node)
        return node

    def _split(self, node: _Node, at: int) -> _Node:
        """Put a new node holding node.key[:at] between node and its parent; return it.

        The original node keeps its identity (allocations pin it) and its children, and becomes the
        new node's only child, as TGI splits.
        """
        parent = node.parent
        assert parent is not None
        prefix = _Node(node.key[:at], node.blocks[: at // self.block_size], parent, node.last_accessed,
                       ref_count=1, id=next(self._ids))
        parent.children[self._edge(prefix.key)] = prefix
        node.key = node.key[at:]
        node.blocks = node.blocks[at // self.block_size:]
        node.parent = prefix
        prefix.children[self._edge(node.key)] = node
        return prefix

    # -- eviction -------------------------------------------------------------------------------
    def evict(self, n_blocks: int) -> list[int]:
        """Free at least `n_blocks` blocks from unreferenced leaves, least recently used first."""
        evicted: list[int] = []
        while len(evicted) < n_blocks:
            node = self._pop_leaf()
            if node is None:
                break
            needed = n_blocks - len(evicted)
            if needed >= len(node.blocks):
                evicted.extend(node.blocks)
                self._remove_node(node)
            else:
                keep = len(node.blocks) - needed
                evicted.extend(node.blocks[keep:])
                node.blocks = node.blocks[:keep]
                node.key = node.key[: keep * self.block_size]
                self._add_leaf(node)  # stays a leaf, with its old access time
        return evicted

    def _remove_node(self, node: _Node) -> None:
        parent = node.parent
        assert parent is not None
        del parent.children[self._edge(node.key)]
        self.decref(parent)

    def cached_blocks(self) -> int:
        """Blocks held by the trie (for inspection)."""
        total, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            total += len(node.blocks)
            stack.extend(node.children.values())
        return total


class RadixAllocator(SimpleAllocator):
    """Blocks shared through a prefix trie: TGI's allocator when prefix caching is on."""

    def __init__(self, max_batch_total_tokens: int, block_size: int = 1) -> None:
        super().__init__(max_batch_total_tokens, block_size)
        self.trie = RadixTrie(block_size)

    def allocate(self, tokens: int, lookup: list[int] | None = None) -> Allocation | None:
        blocks: list[int] = []
        node = self.trie.root
        if lookup is not None:
            blocks, node = self.trie.find(lookup)
        # Pinned before taking new blocks, so eviction below cannot take the prefix just found.
        self.trie.incref(node)
        prefix_len = len(blocks) * self.block_size
        needed = math.ceil((tokens - prefix_len) / self.block_size)
        if needed > len(self.free_blocks):
            # TGI evicts the shortfall even when that will not be enough (its source says so).
            self.free_blocks.extend(self.trie.evict(needed - len(self.free_blocks)))
        if needed > len(self.free_blocks):
            self.trie.decref(node)
            return None
        blocks = blocks + self._take(needed)
        return Allocation(blocks, _slots(blocks, self.block_size, tokens), prefix_len,
                          tuple(lookup) if lookup is not None else None, node)

    def free(self, allocation: Allocation, computed: int = 0) -> None:
        """Release an allocation; its computed prompt tokens (whole blocks) enter the trie."""
        if allocation.freed:
            return
        allocation.freed = True
        bs = self.block_size
        blocks = allocation.blocks
        prefix_blocks = allocation.prefix_len // bs
        if allocation.lookup is None:
            self.free_blocks.extend(blocks)
        else:
            prompt = allocation.lookup[: max(allocation.prefix_len, computed)]
            aligned = len(prompt) // bs * bs
            if aligned > allocation.prefix_len:
                present = self.trie.insert(prompt[:aligned], blocks[: aligned // bs])
                # Blocks of a part another request inserted meanwhile are duplicates.
                self.free_blocks.extend(blocks[prefix_blocks: max(present // bs, prefix_blocks)])
                self.free_blocks.extend(blocks[aligned // bs:])
            else:
                self.free_blocks.extend(blocks[prefix_blocks:])
        if allocation.node is not None:
            self.trie.decref(allocation.node)
