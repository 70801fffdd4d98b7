"""The prefix cache: what one request computed serves every later request that
begins with the same tokens, on any sequence of the target.

Blocks of `block_tokens` positions are content-addressed: a block's key hashes
the key of the block before it and its own tokens, so it names the whole token
prefix it ends. A block holds a copy of its positions' KV (every attention
layer, the sliding-window ones too), taken as the sequence writes it; on a
recurrent trunk a block may also hold the state after its last position (a
checkpoint), and only a checkpoint can end an adopted prefix there. A request's
last, partial block is kept too (a tail: it ends no longer prefix), with the
state on a recurrent trunk, since the next turn of a chat begins with exactly
the tokens the last one left.

A block's references are its children and the sequences extending it; blocks
nothing references are evicted, least recently used first, whenever a new one
would pass the memory budget (a descendant goes before its ancestor).

Bits: a KV row depends only on the tokens up to it (prefill chunks, one-row
steps and verify rows all write the same bits: DEVELOPERS.md), and a recurrent
state only on the tokens before it, so a sequence rebuilt from copies holds
what a fresh prefill of the same ids writes, and a request served from the
cache gives what a fresh solo run gives, bit for bit.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence

import numpy as np

BLOCK_TOKENS = 16
_ROOT = b""


def _key(parent: bytes, tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(parent + np.asarray(tokens, dtype=np.int32).tobytes(), digest_size=16).digest()


class _Block:
    __slots__ = ("key", "parent", "n", "kv", "state", "refs")

    def __init__(self, key: bytes, parent: "_Block | None", n: int, kv: np.ndarray, state: np.ndarray | None):
        self.key, self.parent, self.n, self.kv, self.state = key, parent, n, kv, state
        self.refs = 0

    @property
    def nbytes(self) -> int:
        return self.kv.nbytes + (0 if self.state is None else self.state.nbytes)


def prefix_cache_of(model) -> "PrefixCache":
    """The model's prefix cache, made on first use with its prefix_cache_mb budget."""
    if model.prefix_cache is None:
        mb = model.prefix_cache_mb
        model.prefix_cache = PrefixCache(model.target, None if mb is None else int(mb * (1 << 20)))
    return model.prefix_cache


class PrefixCache:
    """Blocks of a target's KV (and recurrent checkpoints), under budget_bytes.

    Runs where the target's calls run (an engine's worker). `begin` sets a
    sequence up for a new request from the longest prefix it can reuse; the
    SequencePrefix it returns collects the request's blocks as they land.
    budget_bytes 0 keeps no blocks (a sequence reuses only what its own last
    request left); None reuses nothing.
    """

    def __init__(self, target, budget_bytes: int | None, block_tokens: int = BLOCK_TOKENS):
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError(f"the prefix cache budget must be >= 0 bytes, got {budget_bytes}")
        self.target = target
        self.reuses = budget_bytes is not None  # None: every request starts from an empty sequence
        self.budget = budget_bytes or 0
        self.block_tokens = block_tokens
        self.recurrent = target.recurrent
        self._blocks: dict[bytes, _Block] = {}
        self._idle: OrderedDict[bytes, _Block] = OrderedDict()  # unreferenced, least recently used first
        self._resident: dict[int, tuple[int, list[int]]] = {}  # seq -> (its stamp, the tokens its KV holds)
        self.bytes = 0
        self.counts = {"requests": 0, "prompt_tokens": 0, "reused_tokens": 0, "cache_hits": 0, "resident_hits": 0,
                       "blocks_stored": 0, "blocks_evicted": 0}

    @property
    def stats(self) -> dict:
        """Counters since the cache was made, and what it holds now."""
        return {**self.counts, "blocks": len(self._blocks), "bytes": self.bytes, "budget_bytes": self.budget}

    # --- a request's start -------------------------------------------------------
    def begin(self, seq: int, ids: Sequence[int]) -> "SequencePrefix":
        """Sets sequence seq up for a request of prompt `ids`: it keeps what it holds
        if that is the longest reusable prefix (a rewind), or is rebuilt from the
        cache's longest one, or is emptied. The prompt's last token is always left
        to forward, for its logits."""
        target, limit = self.target, len(ids) - 1
        path = self._match(ids, limit) if self.reuses else []
        cached = sum(block.n for block in path)
        resident = self._resident_prefix(seq, ids, limit) if self.reuses else 0
        reused, source = 0, None
        if resident > 0 and resident >= cached:
            try:
                target.rewind(resident, seq)
                reused, source = resident, "resident"
            except ValueError:  # a sliding-window ring or a recurrent state cannot go back that far
                pass
        if source is None:
            target.reset_sequence(seq)
            if path:
                target.append_prefix(seq, [block.kv for block in path], path[-1].state)
            reused, source = cached, "cache" if cached else None
        self.counts["requests"] += 1
        self.counts["prompt_tokens"] += len(ids)
        self.counts["reused_tokens"] += reused
        if source:
            self.counts[f"{source}_hits"] += 1
        return SequencePrefix(self, seq, list(ids[:reused]), source)

    def _match(self, ids: Sequence[int], limit: int) -> list[_Block]:
        """The cached blocks of the longest prefix of ids[:limit] that can be adopted."""
        size, path, parent, pos = self.block_tokens, [], _ROOT, 0
        while pos + size <= limit and (block := self._blocks.get(_key(parent, ids[pos:pos + size]))):
            path.append(block)
            parent, pos = block.key, pos + size
        for n in range(min(size - 1, limit - pos), 0, -1):
            if tail := self._blocks.get(_key(parent, ids[pos:pos + n])):
                path.append(tail)
                break
        while self.recurrent and path and path[-1].state is None:
            path.pop()  # a recurrent trunk resumes only where a checkpoint is
        for block in path:
            self.touch(block)
        return path

    def _resident_prefix(self, seq: int, ids: Sequence[int], limit: int) -> int:
        """How much of ids the sequence still holds from its last request (0: none,
        or something else has used it since)."""
        stamp, tokens = self._resident.pop(seq, (None, ()))
        if stamp != self.target.sequence_stamp(seq):
            return 0
        common = 0
        for a, b in zip(tokens, ids[:limit]):
            if a != b:
                break
            common += 1
        return common

    # --- blocks, for a SequencePrefix ---------------------------------------------
    def remember(self, seq: int, tokens: Sequence[int]) -> None:
        """Sequence seq holds `tokens` as of its current stamp (a later request may rewind to them)."""
        self._resident[seq] = (self.target.sequence_stamp(seq), list(tokens))

    def get(self, key: bytes) -> _Block | None:
        return self._blocks.get(key)

    def put(self, key: bytes, parent: _Block | None, n: int, kv: np.ndarray, state: np.ndarray | None) -> _Block | None:
        """A new block, or None when the budget has no room for it."""
        block = _Block(key, parent, n, kv, state)
        if not self._make_room(block.nbytes):
            return None
        self._blocks[key] = block
        self.bytes += block.nbytes
        self._idle[key] = block
        if parent is not None:
            self.ref(parent)
        self.counts["blocks_stored"] += 1
        return block

    def add_state(self, block: _Block, state: np.ndarray) -> bool:
        if not self._make_room(state.nbytes, keep=block):
            return False
        block.state = state
        self.bytes += state.nbytes
        return True

    def ref(self, block: _Block) -> None:
        block.refs += 1
        self._idle.pop(block.key, None)

    def unref(self, block: _Block) -> None:
        block.refs -= 1
        if block.refs == 0 and block.key in self._blocks:
            self._idle[block.key] = block

    def touch(self, block: _Block) -> None:
        if block.key in self._idle:
            self._idle.move_to_end(block.key)

    def _make_room(self, nbytes: int, keep: _Block | None = None) -> bool:
        if nbytes > self.budget:
            return False
        while self.bytes + nbytes > self.budget:
            victim = next((b for b in self._idle.values() if b is not keep), None)
            if victim is None:
                return False
            self._evict(victim)
        return True

    def _evict(self, block: _Block) -> None:
        del self._idle[block.key]
        del self._blocks[block.key]
        self.bytes -= block.nbytes
        self.counts["blocks_evicted"] += 1
        if block.parent is not None:
            self.unref(block.parent)


class SequencePrefix:
    """One request's sequence as the cache sees it: the tokens its KV holds, and the
    chain of full blocks stored for them so far (each referenced until `close`)."""

    def __init__(self, cache: PrefixCache, seq: int, tokens: list[int], source: str | None):
        self.cache = cache
        self.seq = seq
        self.tokens = tokens
        self.reused = len(tokens)
        self.source = source       # "cache", "resident" or None
        self._chain: list[_Block] = []  # the stored full blocks of tokens, in order
        self._stopped = cache.budget == 0  # True once a block could not be stored: no later one can be found
        self._extend_chain(checkpoint=False)

    def chunk_end(self, start: int, end: int, max_rows: int) -> int:
        """Where the prompt chunk from `start` should end (at most max_rows, at most
        `end`). On a recurrent trunk chunks end on block boundaries, and the last
        boundary before the prompt's end is one, so that each chunk's end holds a
        checkpoint another request can resume from."""
        stop = min(end, start + max_rows)
        if not self.cache.recurrent:
            return stop
        size = self.cache.block_tokens
        boundary = (min(stop, end - 1) // size) * size
        return boundary if boundary > start else stop

    def commit(self, tokens: Sequence[int], position: int, checkpoint: bool = False) -> None:
        """Tokens at positions position.. are in the sequence's KV (what it held past
        them is gone). checkpoint: keep the recurrent state if they end a block."""
        if position > len(self.tokens):
            raise ValueError(f"tokens committed at position {position}, past the {len(self.tokens)} the sequence holds")
        del self.tokens[position:]
        self.tokens.extend(tokens)
        size = self.cache.block_tokens
        while self._chain and len(self._chain) * size > position:
            self.cache.unref(self._chain.pop())
        self._extend_chain(checkpoint)

    def _extend_chain(self, checkpoint: bool) -> None:
        """Stores the full blocks the sequence has completed, each with its parent's
        key, reading the missing ones in one copy. checkpoint: on a recurrent trunk,
        the block that ends the sequence keeps the state after it."""
        cache, size = self.cache, self.cache.block_tokens
        if self._stopped:
            return
        first, n_full = len(self._chain), len(self.tokens) // size
        keys, parent = [], self._chain[-1].key if self._chain else _ROOT
        for i in range(first, n_full):
            parent = _key(parent, self.tokens[i * size:(i + 1) * size])
            keys.append(parent)
        with_state = cache.recurrent and checkpoint and n_full > 0 and n_full * size == len(self.tokens)
        missing = next((i for i, key in enumerate(keys) if cache.get(key) is None), len(keys))
        copies, state = [], None
        if missing < len(keys):
            try:
                copies, state = cache.target.read_prefix(self.seq, (first + missing) * size,
                                                         [size] * (len(keys) - missing), state=with_state)
            except ValueError:  # a sliding-window ring no longer holds those positions
                self._stopped = True
                keys = keys[:missing]
        for i, key in enumerate(keys):
            block = cache.get(key)
            if block is None:
                block = cache.put(key, self._chain[-1] if self._chain else None, size, copies[i - missing], None)
            if block is None:
                self._stopped = True  # no room: a later block could not be found without it
                return
            cache.ref(block)
            self._chain.append(block)
        if with_state and len(self._chain) == n_full and self._chain[-1].state is None:
            if state is None:  # no copy read it with the blocks
                _, state = cache.target.read_prefix(self.seq, len(self.tokens), [], state=True)
            cache.add_state(self._chain[-1], state)

    def close(self) -> None:
        """The request has ended: its tail block (with the state, on a recurrent trunk)
        joins the cache, the sequence is remembered as holding its tokens, and its
        blocks are released."""
        cache, start = self.cache, len(self._chain) * self.cache.block_tokens
        if start == len(self.tokens):
            self._extend_chain(checkpoint=True)  # the last full block ends the sequence: it takes the checkpoint
        elif not self._stopped:
            parent = self._chain[-1] if self._chain else None
            key = _key(parent.key if parent else _ROOT, self.tokens[start:])
            tail = cache.get(key)
            try:
                if tail is None or (cache.recurrent and tail.state is None):
                    (kv,), state = cache.target.read_prefix(self.seq, start, [len(self.tokens) - start],
                                                            state=cache.recurrent)
                    if tail is None:
                        tail = cache.put(key, parent, len(self.tokens) - start, kv, state)
                    elif state is not None:
                        cache.add_state(tail, state)
                if tail is not None:
                    cache.touch(tail)
            except ValueError:  # a sliding-window ring no longer holds those positions
                pass
        cache.remember(self.seq, self.tokens)
        self.abandon()

    def abandon(self) -> None:
        """Releases the request's blocks, remembering nothing of the sequence (a failed
        request leaves it unknown)."""
        for block in self._chain:
            self.cache.unref(block)
        self._chain = []


__all__ = ["PrefixCache", "SequencePrefix", "prefix_cache_of", "BLOCK_TOKENS"]
