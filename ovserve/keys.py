"""Every typed aiohttp app key in one place."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ovserve.config import ServerSettings
from ovserve.loop_lag import LoopLagMonitor
from ovserve.media import MediaResolver
from ovserve.service.chat import ChatService
from ovserve.service.completions import CompletionService
from ovserve.service.models import ModelRegistry

SETTINGS = web.AppKey("settings", ServerSettings)
MODELS = web.AppKey("models", ModelRegistry)
CHAT = web.AppKey("chat", ChatService)
COMPLETIONS = web.AppKey("completions", CompletionService)
LOOP_LAG = web.AppKey("loop_lag", LoopLagMonitor)
# One task per served model, loading its engine; the CLI stops the server if one fails.
ENGINE_LOADS = web.AppKey("engine_loads", list[asyncio.Task[None]])
# Image-URL policy, downloads and decoding; its HTTP session lives as long as the app.
MEDIA = web.AppKey("media", MediaResolver)
