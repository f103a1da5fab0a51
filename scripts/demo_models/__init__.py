"""Builders of the offline demo models, one module per model kind; ``scripts/make_demo_models.py`` drives them.

    common     the seed, progress lines, JSON files, the quiet in-process optimum-intel export
    tokenizer  the byte-level BPE tokenizer with the chat template (tiny-vlm's adds ``<image>``), the
               WordPiece tokenizer of the retrieval models and tiny-image's CLIP tokenizer, each trained
               at most once per build
    llm        random Qwen2 models: tiny-llm, tiny-draft, the int8 benchmark model
    vlm        random LLaVA models around a tiny-llm-shaped Qwen2: tiny-vlm, the CLIP-L/336 benchmark model
    retrieval  random BERT models: tiny-embed, tiny-rerank, the BERT-base benchmark model
    speech     random Whisper and SpeechT5 models: tiny-whisper, tiny-speecht5, the whisper-tiny-sized
               benchmark model
    image      a random Stable-Diffusion-1.5-shaped diffusers pipeline: tiny-image, with OVMS's image
               graph.pbtxt and a LoRA adapter
    bench_image  the image benchmark's model: a random latent-consistency model at SD 1.5's
                 size, with its diffusers checkpoint beside the IR (built only on request)
    build      what every kind shares around its own steps: completion markers, the lock, the
               scratch directory and the rename into place

A model kind is a frozen dataclass (its spec) whose methods are the kind's steps; ``build.DemoModel``
states what a kind provides. Everything is seeded: the same library versions give the same files,
except for the WordPiece vocabulary (see tokenizer.py).
"""

import os

# Set before anything imports huggingface_hub / transformers: nothing here may touch the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Silences the fork warning of the Rust tokenizers pool; training is fast either way.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
