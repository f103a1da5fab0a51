"""The server's prompt tokenizer keeps no client-grown memory: its BPE word cache is off
(ovserve.models.tokenizer, open_tokenizer), so new long words do not pin the server's memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import openvino_genai

from ovserve.models.tokenizer import TOKENIZER_XML, open_tokenizer, without_word_cache
from tests.conftest import ROOT

# Encodes new 1,000-letter words (each a new cache key) and prints the process's RSS growth, in
# bytes, between the 2,000th and the 4,000th: the memory each further word pins.
_NEW_WORDS = textwrap.dedent(
    """
    import random, string, sys
    from pathlib import Path
    import openvino_genai
    from ovserve.models.tokenizer import open_tokenizer

    model = Path(sys.argv[1])
    tokenizer = open_tokenizer(model) if sys.argv[2] == "served" else openvino_genai.Tokenizer(str(model))
    rng = random.Random(0)

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096

    marks = {}
    for index in range(1, 4001):
        word = "".join(rng.choice(string.ascii_letters) for _ in range(1000))
        tokenizer.encode(f"Please repeat {word} twice.", add_special_tokens=True)
        if index in (2000, 4000):
            marks[index] = rss()
    print(marks[4000] - marks[2000])
    """
)


def _growth(model: Path, which: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _NEW_WORDS, str(model), which],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    return int(done.stdout.split()[-1])


def test_the_word_cache_capacity_is_set_to_zero() -> None:
    exported = '<layer type="BPETokenizer"><data unk_token="" byte_fallback="false" cache_capacity="20000" /></layer>'
    assert without_word_cache(exported) == exported.replace('cache_capacity="20000"', 'cache_capacity="0"')
    wordpiece = '<layer type="WordpieceTokenizer"><data suffix_indicator="##" max_bytes_per_word="100" /></layer>'
    assert without_word_cache(wordpiece) == wordpiece


def test_the_served_tokenizer_is_the_models_own_but_for_the_cache(tiny_llm: Path) -> None:
    assert 'cache_capacity="20000"' in (tiny_llm / TOKENIZER_XML).read_text()
    served, exported = open_tokenizer(tiny_llm), openvino_genai.Tokenizer(str(tiny_llm))
    text = "Hello wörld, 日本語 🙂 and some longer words: internationalization"
    assert served.encode(text).input_ids.data.tolist() == exported.encode(text).input_ids.data.tolist()
    assert served.get_bos_token() == exported.get_bos_token()
    assert served.get_eos_token() == exported.get_eos_token()
    assert served.chat_template == exported.chat_template


def test_a_model_without_a_word_cache_is_opened_from_its_own_directory(retrieval_models: dict[str, Path]) -> None:
    embed = retrieval_models["tiny-embed"]
    assert "cache_capacity" not in (embed / TOKENIZER_XML).read_text()
    assert open_tokenizer(embed).encode("hello world").input_ids.shape[1] > 0


def test_new_long_words_do_not_grow_the_tokenizers_memory(tiny_llm: Path) -> None:
    # The measurement sees the cache: as exported (cache_capacity 20,000) the same words grow the
    # process by ~9.4 MiB (~4.7 KiB a word).
    assert _growth(tiny_llm, "exported") > 4 << 20
    assert _growth(tiny_llm, "served") < 1 << 20
