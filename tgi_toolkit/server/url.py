"""An already running server, reached by its URL: nothing to start, nothing to kill."""

from __future__ import annotations

from tgi_toolkit.server.base import Backend


class UrlBackend(Backend):
    name = "url"
    default_health_timeout = 30.0
