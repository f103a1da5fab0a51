"""Every typed aiohttp app key in one place."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ovserve.api import auth
from ovserve.api.auth import ApiKeys
from ovserve.api.drain import Drain
from ovserve.config import ServerSettings
from ovserve.loop_lag import LoopLagMonitor
from ovserve.media import MediaResolver
from ovserve.metrics import ServerMetrics
from ovserve.service.chat import ChatService
from ovserve.service.completions import CompletionService
from ovserve.service.models import ModelRegistry
from ovserve.service.responses import ResponsesService
from ovserve.service.retrieval import RetrievalService

SETTINGS = web.AppKey("settings", ServerSettings)
MODELS = web.AppKey("models", ModelRegistry)
CHAT = web.AppKey("chat", ChatService)
COMPLETIONS = web.AppKey("completions", CompletionService)
# Embeddings, rerank, tokenize and detokenize.
RETRIEVAL = web.AppKey("retrieval", RetrievalService)
# The Responses API over the chat service, with its conversation store.
RESPONSES = web.AppKey("responses", ResponsesService)
LOOP_LAG = web.AppKey("loop_lag", LoopLagMonitor)
# One task per served model, loading its engine; the CLI stops the server if one fails.
ENGINE_LOADS = web.AppKey("engine_loads", list[asyncio.Task[None]])
# Image-URL policy, downloads and decoding; its HTTP session lives as long as the app.
MEDIA = web.AppKey("media", MediaResolver)
# Who may call (empty: anyone), reread on SIGHUP.
API_KEYS = web.AppKey("api_keys", ApiKeys)
# SIGTERM's drain: readiness 503, new requests 503, in-flight requests counted.
DRAIN = web.AppKey("drain", Drain)
METRICS = web.AppKey("metrics", ServerMetrics)

# A request key: which key called (its digest; None without keys). The auth middleware sets it, so
# it is declared next to the middleware (auth.py; this module imports auth, not the reverse).
CALLER = auth.CALLER
