"""The prefix-cache model follows the engine's block rule (ovserve/engine/prefix_cache.py)."""

from __future__ import annotations

from ovserve.engine.prefix_cache import BLOCK_SIZE, PrefixCacheModel


def tokens(count: int, start: int = 1000) -> list[int]:
    return list(range(start, start + count))


def test_a_new_prompt_has_nothing_cached() -> None:
    assert PrefixCacheModel().cached_tokens(tokens(100)) == 0


def test_whole_blocks_of_a_shared_prefix_are_cached() -> None:
    model = PrefixCacheModel()
    model.remember(tokens(100))
    # 100 tokens = 3 full blocks (96) and a 4-token tail; a longer prompt diverging at 70 shares 2 blocks.
    assert model.cached_tokens(tokens(70) + tokens(50, start=5000)) == 2 * BLOCK_SIZE
    # A prompt extending the remembered sequence takes its 3 blocks and its exact partial tail.
    assert model.cached_tokens(tokens(100) + tokens(20, start=5000)) == 100


def test_a_prompt_found_whole_still_computes_its_last_token() -> None:
    model = PrefixCacheModel()
    model.remember(tokens(64))
    assert model.cached_tokens(tokens(64)) == 63


def test_blocks_match_by_position_not_content_alone() -> None:
    model = PrefixCacheModel()
    model.remember(tokens(64))
    shifted = [7, *tokens(64)]
    assert model.cached_tokens(shifted) == 0


def test_a_grown_tail_is_no_longer_found() -> None:
    model = PrefixCacheModel()
    prompt = tokens(40)
    model.remember(prompt)
    model.remember(prompt + tokens(10, start=9000))
    model.forget_tail(prompt)
    # The 8-token tail now belongs to a longer block: only the full block and that longer tail remain.
    assert model.cached_tokens(prompt + tokens(30, start=7000)) == BLOCK_SIZE


def test_least_recently_used_blocks_go_first_beyond_capacity() -> None:
    model = PrefixCacheModel(capacity_blocks=4)
    first, second = tokens(64, start=1000), tokens(64, start=3000)
    model.remember(first)
    model.remember(second)
    assert model.cached_tokens([*first, 1]) == 64  # touches first's blocks: second's are now older
    model.remember(tokens(64, start=6000))
    assert model.cached_tokens([*second, 1]) == 0
    assert model.cached_tokens([*first, 1]) == 64
    assert len(model) == 4
