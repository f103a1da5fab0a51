"""Every typed aiohttp app key in one place."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ovserve.api import auth
from ovserve.api.auth import ApiKeys
from ovserve.api.drain import Drain
from ovserve.console.files import ConsoleFiles
from ovserve.console.log_ring import LogRing
from ovserve.core.media import MediaResolver
from ovserve.dialects.anthropic.adapter import MessagesEndpoint
from ovserve.dialects.anthropic.count import CountTokensEndpoint
from ovserve.dialects.ollama.endpoints import OllamaEmbedEndpoint, OllamaGenerationEndpoint
from ovserve.dialects.openai.audio.adapter import TranscriptionEndpoint
from ovserve.dialects.openai.audio.speech import SpeechEndpoint
from ovserve.dialects.openai.batches.runner import BatchRunner
from ovserve.dialects.openai.chat.adapter import ChatEndpoint
from ovserve.dialects.openai.completions.adapter import CompletionEndpoint
from ovserve.dialects.openai.files.store import FileStore
from ovserve.dialects.openai.images.adapter import ImagesEndpoint
from ovserve.dialects.openai.load import LoadModelEndpoint
from ovserve.dialects.openai.responses.adapter import ResponsesEndpoint
from ovserve.dialects.openai.retrieval.adapter import (
    DetokenizeEndpoint,
    EmbeddingsEndpoint,
    RerankEndpoint,
    TokenizeEndpoint,
)
from ovserve.loop_lag import LoopLagMonitor
from ovserve.metrics import ServerMetrics
from ovserve.models.manager import ResidencyManager
from ovserve.models.reload import ConfigReloader
from ovserve.models.served import ModelRegistry
from ovserve.settings.schema import ServerSettings

SETTINGS = web.AppKey("settings", ServerSettings)
MODELS = web.AppKey("models", ModelRegistry)
CHAT = web.AppKey("chat", ChatEndpoint)
COMPLETIONS = web.AppKey("completions", CompletionEndpoint)
EMBEDDINGS = web.AppKey("embeddings", EmbeddingsEndpoint)
RERANK = web.AppKey("rerank", RerankEndpoint)
TOKENIZE = web.AppKey("tokenize", TokenizeEndpoint)
DETOKENIZE = web.AppKey("detokenize", DetokenizeEndpoint)
# Transcriptions and translations.
TRANSCRIPTIONS = web.AppKey("transcriptions", TranscriptionEndpoint)
SPEECH = web.AppKey("speech", SpeechEndpoint)
IMAGES = web.AppKey("images", ImagesEndpoint)
# POST /v3/models/{name}/load.
LOAD_MODEL = web.AppKey("load_model", LoadModelEndpoint)
# The Responses API, with its conversation store.
RESPONSES = web.AppKey("responses", ResponsesEndpoint)
# The Files API's uploads and batch results (also the Batch API's input and output).
FILES = web.AppKey("files", FileStore)
# The Batch API: every batch, run at the batches' share of each engine.
BATCHES = web.AppKey("batches", BatchRunner)
# Ollama's /api/chat and /api/generate (generation, or a load or unload), /api/embed and /api/embeddings.
OLLAMA = web.AppKey("ollama", OllamaGenerationEndpoint)
OLLAMA_EMBED = web.AppKey("ollama_embed", OllamaEmbedEndpoint)
# Anthropic's Messages API, and its count_tokens.
MESSAGES = web.AppKey("messages", MessagesEndpoint)
COUNT_TOKENS = web.AppKey("count_tokens", CountTokensEndpoint)
LOOP_LAG = web.AppKey("loop_lag", LoopLagMonitor)
# One task per model loaded at start: its engine's first successful start (retried until it works).
ENGINE_LOADS = web.AppKey("engine_loads", list[asyncio.Task[None]])
# Which engines run: loads on demand, idle unloads, the memory budget.
RESIDENCY = web.AppKey("residency", ResidencyManager)
# With --config_path: reads config.json again (POST /v1/config/reload, and its poller).
CONFIG_RELOADER = web.AppKey("config_reloader", ConfigReloader)
# Image-URL policy, downloads and decoding; its HTTP session lives as long as the app.
MEDIA = web.AppKey("media", MediaResolver)
# Who may call (empty: anyone), reread on SIGHUP.
API_KEYS = web.AppKey("api_keys", ApiKeys)
# SIGTERM's drain: readiness 503, new requests 503, in-flight requests counted.
DRAIN = web.AppKey("drain", Drain)
METRICS = web.AppKey("metrics", ServerMetrics)
# The browser console (ovserve.api.console): its files, and the recent warnings and errors it shows.
CONSOLE_FILES = web.AppKey("console_files", ConsoleFiles)
CONSOLE_LOGS = web.AppKey("console_logs", LogRing)

# A request key: which key called (its digest; None without keys). The auth middleware sets it, so
# it is declared next to the middleware (auth.py; this module imports auth, not the reverse).
CALLER = auth.CALLER
