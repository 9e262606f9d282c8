"""Typed state on the aiohttp application (``web.AppKey``), shared by every API's handlers."""

from __future__ import annotations

from aiohttp import web

from proxy.config import Settings
from proxy.core.services import Services
from proxy.embedding import EmbedderRegistry
from proxy.store.client import Store

__all__ = ["EMBEDDERS", "SERVICES", "SETTINGS", "STARTED_AT", "STORE"]

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
EMBEDDERS = web.AppKey("embedders", EmbedderRegistry)
STARTED_AT = web.AppKey("started_at", float)
# The store and the embedders together, as every core operation takes them (set once both are up).
SERVICES = web.AppKey("services", Services)
