"""TGI's error shape ({"error", "error_type"}): `ApiError` and the handlers that answer every failure with it,
so a client parses each 4xx the same way."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str) -> None:
        super().__init__(message)
        self.status, self.message, self.error_type = status, message, error_type

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.error_type}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


OVERLOADED = ApiError(429, "Model is overloaded", "overloaded")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on the app `Api` builds (each failure answers in TGI's shape)."""
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        if content_type and not _is_json(content_type):
            # axum's Json extractor: 415 for a body that does not say it is JSON.
            return JSONResponse({"error": "Expected request with `Content-Type: application/json`",
                                 "error_type": "validation"}, status_code=415)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid body"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        if first.get("type") == "json_invalid":
            return JSONResponse({"error": f"Failed to parse the request body as JSON: {first['msg']}",
                                 "error_type": "validation"}, status_code=400)
        message = f"Failed to deserialize the JSON body into the target type: {where}: {first['msg']}"
        return JSONResponse({"error": message, "error_type": "validation"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        # Unknown route, wrong method, unreadable body: TGI's error shape rather than FastAPI's
        # {"detail": ...}, so every 4xx a client sees parses the same way.
        error_type = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "validation")
        return JSONResponse({"error": str(exc.detail), "error_type": error_type},
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
