"""What a model directory says about its output format: its special tokens (and, in
:mod:`ovserve.parsers`, which parsers its chat template calls for).

:func:`read_special_tokens` reads the texts of the tokens the Hugging Face tokenizer files mark
special (``tokenizer_config.json``'s ``added_tokens_decoder``, ``tokenizer.json``'s
``added_tokens``); missing or unreadable files give an empty set, never an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_special_tokens(model_dir: Path) -> frozenset[str]:
    tokens: set[str] = set()
    config = _load(model_dir / "tokenizer_config.json")
    if isinstance(config, dict) and isinstance(config.get("added_tokens_decoder"), dict):
        for entry in config["added_tokens_decoder"].values():
            if isinstance(entry, dict) and entry.get("special") and isinstance(entry.get("content"), str):
                tokens.add(entry["content"])
    tokenizer = _load(model_dir / "tokenizer.json")
    if isinstance(tokenizer, dict) and isinstance(tokenizer.get("added_tokens"), list):
        for entry in tokenizer["added_tokens"]:
            if isinstance(entry, dict) and entry.get("special") and isinstance(entry.get("content"), str):
                tokens.add(entry["content"])
    tokens.discard("")
    return frozenset(tokens)
