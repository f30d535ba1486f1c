"""The ASGI middlewares in front of the routes: --api-key's bearer check and --payload-limit's body cap."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class BearerAuth:
    """--api-key: POST routes need `Authorization: Bearer <key>` (GET routes stay open, as in TGI).

    Plain ASGI rather than `@app.middleware("http")`: starlette's BaseHTTPMiddleware relays every
    streamed chunk through an extra task and memory stream, CPU taken from the model's matmuls on
    a small machine (the engine serves one SSE event per token per stream): at 16 streams the
    HTTP thread took 2.0% of a core instead of 3.2%.
    """

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
            # Constant time: how long the comparison takes says nothing about how much of the key matched.
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": "Unauthorized", "error_type": "unauthorized"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class PayloadLimit:
    """--payload-limit: a request body over this many bytes is refused with 413 before it is parsed, as
    TGI's DefaultBodyLimit does; a body without a Content-Length is counted as it arrives."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    def _too_large(self) -> StarletteHTTPException:
        return StarletteHTTPException(413, f"Failed to buffer the request body: length limit exceeded "
                                           f"(--payload-limit {self.limit} bytes)")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        length = next((value for name, value in scope["headers"] if name == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.limit:
            exc = self._too_large()
            await JSONResponse({"error": exc.detail, "error_type": "validation"}, status_code=413)(
                scope, receive, send)
            return
        received = 0

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise self._too_large()  # FastAPI re-raises it from the body read: the 413 handler answers
            return message

        await self.app(scope, counted, send)
