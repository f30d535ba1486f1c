"""TGI's HTTP API (routes, schemas, errors, headers) on FastAPI, over an `Engine`."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from tgi_toolkit.engine.infer import Engine, Event, Finish, GenerationError, Token
from tgi_toolkit.engine.metrics import Metrics
from tgi_toolkit.engine.validation import (
    U32,
    U64,
    GenerateParameters,
    Limits,
    ValidationError,
    ValidRequest,
    validate,
    validate_best_of,
)
from tgi_toolkit.version import __version__

TGI_API_VERSION = "3.3.6-dev0"


@dataclass
class ServerInfo:
    model_id: str
    model_sha: str | None
    max_concurrent_requests: int
    max_client_batch_size: int
    validation_workers: int
    api_key: str | None = None
    cors_allow_origin: tuple[str, ...] = ()
    model_dtype: str = "float32"
    quantize: str | None = None
    payload_limit: int = 2_000_000  # --payload-limit, bytes


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str) -> None:
        super().__init__(message)
        self.status, self.message, self.error_type = status, message, error_type

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.error_type}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


OVERLOADED = ApiError(429, "Model is overloaded", "overloaded")


# -- request schemas (TGI's names; unknown keys ignored) ---------------------------------------
class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    inputs: str
    parameters: GenerateParameters = GenerateParameters()


class CompatGenerateRequest(GenerateRequest):
    stream: bool = False


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    inputs: str
    add_special_tokens: bool = True


class StreamOptions(BaseModel):
    include_usage: bool = False


class _OpenAIBase(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)  # as GenerateParameters
    model: str | None = None
    max_tokens: U32 | None = None
    max_completion_tokens: U32 | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: U64 | None = None
    stop: str | list[str] | None = None
    frequency_penalty: float | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: U64 | None = None
    ignore_eos: bool | None = False  # vLLM's extension, for benchmarks


class ContentPart(BaseModel):
    """One part of a message's content (OpenAI's form); only text parts reach the prompt."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None  # a text that is not a string is a 422, not a 500 when joined


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPart] | None = None


class ChatRequest(_OpenAIBase):
    messages: list[ChatMessage]
    logprobs: bool | None = False
    top_logprobs: U32 | None = None


class CompletionRequest(_OpenAIBase):
    prompt: str | list[str]


# -- response rendering ---------------------------------------------------------------------------
def _token(t: Token) -> dict[str, Any]:
    return {"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special}


def _details(finish: Finish, best_of: list[Finish] | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {
        "finish_reason": finish.reason,
        "generated_tokens": finish.generated_tokens,
        "seed": finish.seed,
        "prefill": [{"id": t.id, "text": t.text, "logprob": t.logprob} for t in finish.prefill],
        "tokens": [_token(t) for t in finish.tokens],
    }
    if any(finish.top_tokens):
        details["top_tokens"] = [[_token(t) for t in top] for top in finish.top_tokens]
    if best_of:
        details["best_of_sequences"] = [
            {"generated_text": f.generated_text, "finish_reason": f.reason,
             "generated_tokens": f.generated_tokens, "seed": f.seed,
             "prefill": [{"id": t.id, "text": t.text, "logprob": t.logprob} for t in f.prefill],
             "tokens": [_token(t) for t in f.tokens]}
            for f in best_of
        ]
    return details


def _timing_headers(finish: Finish, started: float, validated: float) -> dict[str, str]:
    total = time.perf_counter() - started
    per_token = finish.inference / max(finish.generated_tokens, 1)
    return {
        "x-compute-type": "cpu",
        "x-compute-time": f"{total}",
        "x-total-time": str(int(total * 1000)),
        "x-validation-time": str(int((validated - started) * 1000)),
        "x-queue-time": str(int(finish.queued * 1000)),
        "x-inference-time": str(int(finish.inference * 1000)),
        "x-time-per-token": str(int(per_token * 1000)),
        "x-prompt-tokens": str(finish.input_length),
        "x-generated-tokens": str(finish.generated_tokens),
    }


def sse(data: Any) -> bytes:
    # TGI (axum) writes `data:` with no space; clients accept both. orjson, as serde_json: compact,
    # UTF-8 rather than \u escapes, null for a non-finite float.
    return b"data:" + orjson.dumps(data) + b"\n\n"


_OPENAI_FINISH = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


class Api:
    """Builds the FastAPI app; holds the concurrency slots and the request bookkeeping."""

    def __init__(self, engine: Engine, tokenizer: Any, limits: Limits, info: ServerInfo,
                 metrics: Metrics, ready: asyncio.Event | None = None) -> None:
        self.engine, self.tokenizer, self.limits, self.info, self.metrics = (
            engine, tokenizer, limits, info, metrics)
        self.slots = info.max_concurrent_requests
        self.in_use = 0
        self.ready = ready
        self.app = self._build()

    # -- slots and validation -------------------------------------------------------------
    def _acquire(self) -> None:
        # TGI: a non-blocking semaphore; a request holds its slot until its stream ends.
        if self.in_use >= self.slots:
            self.metrics.request_failure.labels(err="overloaded").inc()
            raise OVERLOADED
        self.in_use += 1

    def _release(self) -> None:
        self.in_use -= 1

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def _validate(self, inputs: str, params: GenerateParameters, *, stream: bool) -> ValidRequest:
        started = time.perf_counter()
        self.metrics.request_count.inc()
        try:
            if params.best_of is not None:
                validate_best_of(params.best_of, self.limits)
            valid = validate(inputs, params, self.limits, self.tokenize, stream=stream)
        except ValidationError as exc:
            self.metrics.request_failure.labels(err="validation").inc()
            raise ApiError(422, str(exc), "validation") from exc
        self.metrics.request_validation_duration.observe(time.perf_counter() - started)
        self.metrics.request_input_length.observe(valid.input_length)
        self.metrics.request_max_new_tokens.observe(valid.max_new_tokens)
        return valid

    def _record(self, finish: Finish, started: float) -> None:
        m = self.metrics
        m.request_success.inc()
        m.request_duration.observe(time.perf_counter() - started)
        m.request_queue_duration.observe(finish.queued)
        m.request_inference_duration.observe(finish.inference)
        m.request_mean_time_per_token_duration.observe(finish.inference / max(finish.generated_tokens, 1))
        m.request_generated_tokens.observe(finish.generated_tokens)

    async def _generate(self, valid: ValidRequest, started: float) -> Finish:
        try:
            finish = await self.engine.generate(valid)
        except GenerationError as exc:
            self.metrics.request_failure.labels(err="generation").inc()
            raise ApiError(424, f"Request failed during generation: {exc}", "generation") from exc
        self._record(finish, started)
        return finish

    # -- TGI routes -------------------------------------------------------------------------
    async def generate(self, body: GenerateRequest) -> Response:
        started = time.perf_counter()
        self._acquire()
        try:
            valid = self._validate(body.inputs, body.parameters, stream=False)
            validated = time.perf_counter()
            if valid.best_of > 1:
                finish, others = await self._best_of(valid, started)
            else:
                finish, others = await self._generate(valid, started), None
        finally:
            self._release()
        payload: dict[str, Any] = {"generated_text": finish.generated_text}
        if valid.details:
            payload["details"] = _details(finish, others)
        return JSONResponse(payload, headers=_timing_headers(finish, started, validated))

    async def _best_of(self, valid: ValidRequest, started: float) -> tuple[Finish, list[Finish]]:
        runs = await asyncio.gather(*(self._generate(valid, started) for _ in range(valid.best_of)))
        best = max(runs, key=lambda f: f.logprob_sum)
        return best, [f for f in runs if f is not best]

    async def _stream_events(self, valid: ValidRequest, started: float) -> AsyncIterator[Event]:
        try:
            async for event in self.engine.stream(valid):
                if event.finish is not None:
                    self._record(event.finish, started)
                yield event
        finally:
            self._release()

    def _open_stream(self, inputs: str, params: GenerateParameters) -> tuple[ValidRequest, float]:
        started = time.perf_counter()
        self._acquire()
        try:
            return self._validate(inputs, params, stream=True), started
        except ApiError:
            self._release()
            raise

    async def generate_stream(self, body: GenerateRequest) -> Response:
        try:
            valid, started = self._open_stream(body.inputs, body.parameters)
        except ApiError as err:
            # TGI answers a stream with 200 and an error event, whatever went wrong.
            return StreamingResponse(_one(sse(err.body())), media_type="text/event-stream")

        async def events() -> AsyncIterator[bytes]:
            try:
                async for event in self._stream_events(valid, started):
                    yield sse(self._stream_payload(valid, event))
            except GenerationError as exc:
                self.metrics.request_failure.labels(err="generation").inc()
                yield sse({"error": f"Request failed during generation: {exc}", "error_type": "generation"})

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"x-compute-type": "cpu", "x-accel-buffering": "no"})

    @staticmethod
    def _stream_payload(valid: ValidRequest, event: Event) -> dict[str, Any]:
        payload: dict[str, Any] = {"index": event.index, "token": _token(event.token)}
        if event.top_tokens:
            payload["top_tokens"] = [_token(t) for t in event.top_tokens]
        payload["generated_text"] = None
        payload["details"] = None
        if event.finish is not None:
            payload["generated_text"] = event.finish.generated_text
            if valid.details:
                payload["details"] = {
                    "finish_reason": event.finish.reason, "generated_tokens": event.finish.generated_tokens,
                    "seed": event.finish.seed, "input_length": event.finish.input_length,
                }
        return payload

    async def compat(self, body: CompatGenerateRequest) -> Response:
        # Parsed by FastAPI like the other routes, so a body that is not a request object is a 422.
        if "parameters" not in body.model_fields_set:
            # TGI quirk: with `parameters` omitted entirely, do_sample defaults to true.
            body.parameters = GenerateParameters(do_sample=True)
        if body.stream:
            return await self.generate_stream(body)
        response = await self.generate(body)
        if isinstance(response, JSONResponse):
            payload = json.loads(response.body)
            headers = {k: v for k, v in response.headers.items() if k.startswith("x-")}
            return JSONResponse([payload], headers=headers)
        return response

    # -- OpenAI routes ----------------------------------------------------------------------
    def _openai_params(self, body: _OpenAIBase) -> GenerateParameters:
        if body.n is not None and body.n != 1:
            raise ApiError(422, "Input validation error: `n` != 1 is not supported", "validation")
        # TGI: greedy only when temperature is exactly 0, otherwise sampling.
        greedy = body.temperature == 0.0
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        return GenerateParameters(
            do_sample=not greedy, temperature=None if greedy else body.temperature,
            top_p=body.top_p, seed=body.seed, stop=stop, frequency_penalty=body.frequency_penalty,
            max_new_tokens=body.max_completion_tokens or body.max_tokens, details=True,
            ignore_eos=bool(body.ignore_eos),
        )

    def _chat_prompt(self, body: ChatRequest) -> str:
        messages = []
        for m in body.messages:
            content = m.content
            if isinstance(content, list):
                content = "".join(part.text or "" for part in content if part.type == "text")
            messages.append({"role": m.role, "content": content or ""})
        if not getattr(self.tokenizer, "chat_template", None):
            raise ApiError(422, "Template error: this model has no chat template", "template_error")
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja errors: TGI answers 422 template_error
            raise ApiError(422, f"Template error: {exc}", "template_error") from exc

    async def chat_completions(self, body: ChatRequest) -> Response:
        params = self._openai_params(body)
        if body.logprobs:
            params.top_n_tokens = body.top_logprobs
        prompt = self._chat_prompt(body)
        return await self._openai(body, prompt, params, chat=True)

    async def completions(self, body: CompletionRequest) -> Response:
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts:
            raise ApiError(422, "Input validation error: `inputs` cannot be empty", "validation")
        if len(prompts) != 1:
            if len(prompts) > self.info.max_client_batch_size:
                raise ApiError(422, f"Number of prompts exceeds the maximum allowed batch size of "
                                    f"{self.info.max_client_batch_size}", "validation")
            if body.stream:
                raise ApiError(422, "Streaming is not supported with multiple prompts", "validation")
        return await self._openai(body, prompts, self._openai_params(body), chat=False)

    async def _openai(self, body: _OpenAIBase, prompt: str | list[str], params: GenerateParameters,
                      *, chat: bool) -> Response:
        model = self.info.model_id
        created = int(time.time())
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        obj = "chat.completion" if chat else "text_completion"
        if body.stream:
            valid, started = self._open_stream(prompt if isinstance(prompt, str) else prompt[0], params)
            return StreamingResponse(self._openai_stream(valid, started, body, ident, created, model, chat),
                                     media_type="text/event-stream")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        started = time.perf_counter()
        self._acquire()
        try:
            valids = [self._validate(p, params, stream=False) for p in prompts]
            if not chat:  # TGI's /v1/completions sets decoder_input_details = !stream: no prefix-cache lookup (Q4)
                for valid in valids:
                    valid.prefix_cache = False
            finishes = await asyncio.gather(*(self._generate(v, started) for v in valids))
        finally:
            self._release()
        choices = []
        for i, f in enumerate(finishes):
            choice: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": _OPENAI_FINISH[f.reason]}
            if chat:
                choice["message"] = {"role": "assistant", "content": f.generated_text}
                if params.top_n_tokens:
                    choice["logprobs"] = {"content": [_openai_logprob(t, top) for t, top in
                                                      zip(f.tokens, f.top_tokens, strict=True)]}
            else:
                choice["text"] = f.generated_text
            choices.append(choice)
        prompt_tokens = sum(f.input_length for f in finishes)
        completion_tokens = sum(f.generated_tokens for f in finishes)
        return JSONResponse({
            "id": ident, "object": obj, "created": created, "model": model,
            "system_fingerprint": f"{TGI_API_VERSION}-native", "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })

    async def _openai_stream(self, valid: ValidRequest, started: float, body: _OpenAIBase, ident: str,
                             created: int, model: str, chat: bool) -> AsyncIterator[bytes]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        fingerprint = f"{TGI_API_VERSION}-native"
        usage = None
        try:
            async for event in self._stream_events(valid, started):
                finish = event.finish
                reason = _OPENAI_FINISH[finish.reason] if finish else None
                text = "" if event.token.special else event.token.text
                if chat:
                    choice: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": text},
                                              "logprobs": None, "finish_reason": reason}
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
                yield sse({"id": ident, "object": obj, "created": created, "model": model,
                           "system_fingerprint": fingerprint, "choices": [choice]})
                if finish is not None:
                    usage = {"prompt_tokens": finish.input_length, "completion_tokens": finish.generated_tokens,
                             "total_tokens": finish.input_length + finish.generated_tokens}
        except GenerationError as exc:
            yield sse({"error": f"Request failed during generation: {exc}", "error_type": "generation"})
            return
        if usage is not None and body.stream_options and body.stream_options.include_usage:
            yield sse({"id": ident, "object": obj, "created": created, "model": model,
                       "system_fingerprint": fingerprint, "choices": [], "usage": usage})
        # huggingface_hub matches the sentinel with the space: `data: [DONE]`.
        yield b"data: [DONE]\n\n"

    # -- app --------------------------------------------------------------------------------
    def info_payload(self) -> dict[str, Any]:
        return {
            "model_id": self.info.model_id, "model_sha": self.info.model_sha,
            # model_dtype and model_device_type are in TGI's /info up to 2.x; kept for provenance.
            "model_dtype": self.info.model_dtype, "model_device_type": "cpu",
            "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": self.info.max_concurrent_requests,
            "max_best_of": self.limits.max_best_of, "max_stop_sequences": self.limits.max_stop_sequences,
            "max_input_tokens": self.limits.max_input_tokens, "max_total_tokens": self.limits.max_total_tokens,
            "validation_workers": self.info.validation_workers,
            "max_client_batch_size": self.info.max_client_batch_size,
            "router": "text-generation-router", "version": TGI_API_VERSION, "sha": None,
            "docker_label": None,
            # Beyond TGI's fields: tells a benchmark it may force output lengths with ignore_eos.
            "engine": f"tgi_toolkit-embedded {__version__}",
            "max_batch_total_tokens": self.engine.limits.max_batch_total_tokens,
            "max_batch_prefill_tokens": self.engine.limits.max_batch_prefill_tokens,
            "max_batch_size": self.engine.limits.max_batch_size,
            "waiting_served_ratio": self.engine.limits.waiting_served_ratio,
            "max_waiting_tokens": self.engine.limits.max_waiting_tokens,
            "quantize": self.info.quantize,
        }

    def _build(self) -> FastAPI:
        app = FastAPI(title="Text Generation Inference (tgi_toolkit embedded engine)",
                      version=TGI_API_VERSION, openapi_url="/api-doc/openapi.json", docs_url="/docs")
        api = self

        if self.info.cors_allow_origin:
            app.add_middleware(CORSMiddleware, allow_origins=list(self.info.cors_allow_origin),
                               allow_methods=["GET", "POST"], allow_headers=["*"])

        if self.info.api_key:
            app.add_middleware(BearerAuth, api_key=self.info.api_key)
        app.add_middleware(PayloadLimit, limit=self.info.payload_limit)

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

        app.post("/")(self.compat)
        app.post("/generate")(self.generate)
        app.post("/generate_stream")(self.generate_stream)
        app.post("/v1/chat/completions")(self.chat_completions)
        app.post("/v1/completions")(self.completions)

        @app.post("/tokenize")
        async def tokenize(body: TokenizeRequest) -> list[dict[str, Any]]:
            enc = api.tokenizer(body.inputs, add_special_tokens=body.add_special_tokens,
                                return_offsets_mapping=True)
            return [{"id": i, "text": body.inputs[a:b], "start": a, "stop": b}
                    for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)]

        @app.get("/health")
        async def health() -> Response:
            if api.ready is not None and not api.ready.is_set():
                return JSONResponse({"error": "unhealthy", "error_type": "healthcheck"}, status_code=503)
            if api.engine.failure is not None:
                return JSONResponse({"error": "unhealthy", "error_type": "healthcheck"}, status_code=503)
            return Response(status_code=200)

        @app.get("/info")
        async def info() -> dict[str, Any]:
            return api.info_payload()

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(api.metrics.render(), media_type="text/plain; version=0.0.4")

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": api.info.model_id, "object": "model",
                                                "created": 0, "owned_by": api.info.model_id}]}

        return app


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


def _openai_logprob(token: Token, top: list[Token]) -> dict[str, Any]:
    return {"token": token.text, "logprob": token.logprob,
            "top_logprobs": [{"token": t.text, "logprob": t.logprob} for t in top]}


async def _one(chunk: bytes) -> AsyncIterator[bytes]:
    yield chunk


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
