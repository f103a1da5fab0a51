"""How many of a prompt's tokens the engine's prefix cache serves: a model of that cache.

openvino_genai 2026.4 reuses the KV blocks of earlier sequences for a new prompt that starts
with the same tokens, but reports the reuse nowhere: not per request (``GenerationHandle``'s
perf metrics count every prompt token as input) and not in ``PipelineMetrics`` (no hit counter).
This module mirrors the engine's rule (``BlockManager::restore_cached_blocks``) on the token ids
the engine loop already holds, so ``usage.prompt_tokens_details.cached_tokens`` and the
prefix-cache counters can be reported.

The rule mirrored:

- The KV cache is paged in blocks of :data:`BLOCK_SIZE` tokens (CPU; measured with
  ``PipelineMetrics.cache_usage``: 1-32 tokens take one block, 33 take two). A block is found by
  a hash of every token up to its end, so it matches only the same tokens at the same positions.
- A new prompt takes full blocks from its start for as long as they are found; at the first miss
  it may take one partially filled block whose exact contents an earlier sequence ended with.
  A prompt found whole still computes its last token (its count is ``len(prompt) - 1``).
- A sequence's blocks are registered once they are computed: the prompt's after its prefill
  (its first output), and the whole sequence (prompt and generated tokens but the last, whose
  KV is never computed) when it ends.
- Blocks no running sequence holds stay cached until their memory is needed; the engine then
  overwrites the least recently used. The model keeps at most ``capacity_blocks`` (the KV cache's
  current size in blocks), least recently used first out. A cache grown on demand grows inside
  the step that needs the room and keeps it, so the loop resizes the model after every step,
  before it remembers that step's blocks (with the size from before, a prompt longer than any
  earlier one would lose its first blocks here while the engine keeps them).

What it cannot see makes the count an estimate, exact while the cache is large enough for what
it holds: the engine frees blocks of running sequences under memory pressure (preemption)
unseen here, and a cache grown on demand (``cache_size`` 0) may overwrite cached blocks before it
grows. Never used for VLM prompts (their blocks hash image embeddings the server never sees).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

BLOCK_SIZE = 32
# Until the engine's KV cache size is known: an upper bound on what the model remembers
# (65,536 blocks = 2M tokens; ~7 MB of keys).
DEFAULT_CAPACITY_BLOCKS = 1 << 16


def _full_blocks(tokens: Sequence[int], block_size: int) -> Iterator[tuple[int, int]]:
    """``(end, key)`` of each full block: the key hashes every token up to ``end``."""
    key = 0
    for end in range(block_size, len(tokens) + 1, block_size):
        key = hash((key, tuple(tokens[end - block_size : end])))
        yield end, key


class PrefixCacheModel:
    """The engine's prefix cache as block keys in least-recently-used order (module docstring)."""

    def __init__(self, block_size: int = BLOCK_SIZE, capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def cached_tokens(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens the engine will take from its cache."""
        if not prompt:
            return 0
        cached, key = 0, 0
        for end, block_key in _full_blocks(prompt, self.block_size):
            if block_key not in self._blocks:
                break
            self._blocks.move_to_end(block_key)
            cached, key = end, block_key
        # After the full blocks: one partially filled block (or the prompt's own short tail).
        return min(self._partial_match(prompt, cached, key), len(prompt) - 1)

    def _partial_match(self, prompt: Sequence[int], start: int, key: int) -> int:
        # The engine tries every length of the next block, the shortest first.
        for length in range(1, min(self.block_size, len(prompt) - start + 1)):
            partial_key = hash((key, tuple(prompt[start : start + length])))
            if partial_key in self._blocks:
                self._blocks.move_to_end(partial_key)
                return start + length
        return start

    def remember(self, tokens: Sequence[int]) -> None:
        """``tokens``' blocks are computed and will stay cached until overwritten."""
        key, end = 0, 0
        for block_end, block_key in _full_blocks(tokens, self.block_size):
            self._touch(block_key)
            key, end = block_key, block_end
        if end < len(tokens):
            self._touch(hash((key, tuple(tokens[end:]))))
        self._evict()

    def forget_tail(self, tokens: Sequence[int]) -> None:
        """``tokens``' last, partially filled block grew: the engine re-hashed it under its new contents."""
        end = len(tokens) - len(tokens) % self.block_size
        if end == len(tokens):
            return
        key = 0
        for _, block_key in _full_blocks(tokens[:end], self.block_size):
            key = block_key
        self._blocks.pop(hash((key, tuple(tokens[end:]))), None)

    def resize(self, capacity_blocks: int) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self._evict()

    def _touch(self, key: int) -> None:
        self._blocks[key] = None
        self._blocks.move_to_end(key)

    def _evict(self) -> None:
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
