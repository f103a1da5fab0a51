"""Demo models derived from a built one without another export: the same network with a longer context.

Why: Claude Code sends ~30k prompt tokens on its first turn (its system prompt and 24 tools),
which tiny-llm's 2,048-token context cannot hold. The Qwen2 IR computes its rotary embeddings from
the positions at run time (no table sized by the context), so an export with
``max_position_embeddings`` 65536 is byte for byte tiny-llm's IR and tokenizer, and differs only in
``config.json`` (and ``tokenizer_config.json``'s ``model_max_length``). A variant is therefore the
base model's files copied with those two values changed: milliseconds instead of an export.

A random model writes until ``max_tokens`` (its EOS is one token in 4,000), and an agent treats an
answer cut at ``max_tokens`` as an error (Claude Code exits 1 on it). So a variant may also stop at
every token that spells a line break: its ``generation_config.json`` lists them with EOS in
``eos_token_id`` (openvino_genai reads the list as stop tokens), and its answers end as a real
model's do, with ``stop_reason`` ``end_turn``, after a few dozen tokens.

Contract: :func:`derive` reuses a complete variant whose marker names the base's marker and the
context, else builds it in a scratch directory inside OUT_DIR and renames it into place (a killed
run never leaves a half-written model that looks complete), under the build lock.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.demo_models.build import MARKER_NAME, SCRATCH_PREFIX, build_lock, is_complete
from scripts.demo_models.common import log, read_json, write_json
from scripts.demo_models.llm import TINY_LLM

TINY_LLM_LONG = "tiny-llm-64k"


@dataclass(frozen=True)
class ContextVariant:
    """``base`` (a built model's name) served with a context of ``max_position_embeddings``."""

    name: str
    base: str
    max_position_embeddings: int
    stop_at_line_breaks: bool = False

    def version(self, base_dir: Path) -> str:
        base_version = (base_dir / MARKER_NAME).read_text(encoding="utf-8").strip()
        stops = "+line-break-stops" if self.stop_at_line_breaks else ""
        return f"{base_version}+context-{self.max_position_embeddings}{stops}"


# For agents whose prompts tiny-llm cannot hold (docs/anthropic.md: Claude Code).
TINY_LLM_LONG_SPEC = ContextVariant(TINY_LLM_LONG, TINY_LLM, 65536, stop_at_line_breaks=True)


def _line_break_tokens(model_dir: Path) -> list[int]:
    """The ids of the vocabulary's tokens that spell a line break ("Ċ" in byte-level BPE)."""
    vocab = read_json(model_dir / "tokenizer.json")["model"]["vocab"]
    return sorted(token_id for token, token_id in vocab.items() if "\u010a" in token)


def derive(variant: ContextVariant, base_dir: Path, out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) ``variant`` from the complete model in ``base_dir``; returns its directory."""
    out_dir = Path(out_dir).resolve()
    target = out_dir / variant.name
    version = variant.version(base_dir)
    if not force and is_complete(target, version):
        log(f"{variant.name}: up to date, skipping ({target})")
        return target
    started = time.monotonic()
    with build_lock(out_dir):
        if not force and is_complete(target, version):
            return target
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out_dir))
        try:
            built = scratch / variant.name
            shutil.copytree(base_dir, built, ignore=shutil.ignore_patterns(MARKER_NAME))
            config = read_json(built / "config.json")
            config["max_position_embeddings"] = variant.max_position_embeddings
            write_json(built / "config.json", config)
            tokenizer_config = read_json(built / "tokenizer_config.json")
            tokenizer_config["model_max_length"] = variant.max_position_embeddings
            write_json(built / "tokenizer_config.json", tokenizer_config)
            if variant.stop_at_line_breaks:
                generation = read_json(built / "generation_config.json")
                generation["eos_token_id"] = [generation["eos_token_id"], *_line_break_tokens(built)]
                write_json(built / "generation_config.json", generation)
            (built / MARKER_NAME).write_text(version + "\n", encoding="utf-8")
            if target.exists():
                os.replace(target, scratch / f"stale-{variant.name}")
            os.replace(built, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    log(f"{variant.name}: derived from {variant.base} in {time.monotonic() - started:.2f} s -> {target}")
    return target
