"""TGI's HTTP API on FastAPI, over an `Engine`: the `Api` class, its routes and their bookkeeping. What the routes
parse, render and answer errors with is in schemas.py, render.py, errors.py and middleware.py."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tgi_toolkit.engine import render
from tgi_toolkit.engine.errors import OVERLOADED, ApiError, install_error_handlers
from tgi_toolkit.engine.events import Event, Finish, GenerationError
from tgi_toolkit.engine.infer import Engine
from tgi_toolkit.engine.metrics import Metrics
from tgi_toolkit.engine.middleware import BearerAuth, PayloadLimit
from tgi_toolkit.engine.schemas import (
    ChatRequest,
    CompatGenerateRequest,
    CompletionRequest,
    GenerateRequest,
    OpenAIRequest,
    TokenizeRequest,
)
from tgi_toolkit.engine.validation import (
    GenerateParameters,
    RequestLimits,
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
    device_type: str = "cpu"  # --device: cuda or cpu
    random_weights: bool = False  # --random-weights: timing only (validation.RANDOM_WEIGHTS_REFUSAL)


class Api:
    """Builds the FastAPI app; holds the concurrency slots and the request bookkeeping."""

    def __init__(self, engine: Engine, tokenizer: Any, limits: RequestLimits, info: ServerInfo,
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
            payload["details"] = render.details_json(finish, others)
        return JSONResponse(payload, headers=render.timing_headers(finish, started, validated))

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
            return StreamingResponse(render.single_event(render.sse(err.body())), media_type="text/event-stream")

        async def events() -> AsyncIterator[bytes]:
            try:
                async for event in self._stream_events(valid, started):
                    yield render.sse(self._stream_payload(valid, event))
            except GenerationError as exc:
                self.metrics.request_failure.labels(err="generation").inc()
                yield render.sse({"error": f"Request failed during generation: {exc}", "error_type": "generation"})

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"x-compute-type": "cpu", "x-accel-buffering": "no"})

    @staticmethod
    def _stream_payload(valid: ValidRequest, event: Event) -> dict[str, Any]:
        payload: dict[str, Any] = {"index": event.index, "token": render.token_json(event.token)}
        if event.top_tokens:
            payload["top_tokens"] = [render.token_json(t) for t in event.top_tokens]
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
    def _openai_params(self, body: OpenAIRequest) -> GenerateParameters:
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

    async def _openai(self, body: OpenAIRequest, prompt: str | list[str], params: GenerateParameters,
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
            choice: dict[str, Any] = {"index": i, "logprobs": None, "finish_reason": render.OPENAI_FINISH[f.reason]}
            if chat:
                choice["message"] = {"role": "assistant", "content": f.generated_text}
                if params.top_n_tokens:
                    choice["logprobs"] = {"content": [render.openai_logprob(t, top) for t, top in
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

    async def _openai_stream(self, valid: ValidRequest, started: float, body: OpenAIRequest, ident: str,
                             created: int, model: str, chat: bool) -> AsyncIterator[bytes]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        fingerprint = f"{TGI_API_VERSION}-native"
        usage = None
        try:
            async for event in self._stream_events(valid, started):
                finish = event.finish
                reason = render.OPENAI_FINISH[finish.reason] if finish else None
                text = "" if event.token.special else event.token.text
                if chat:
                    choice: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": text},
                                              "logprobs": None, "finish_reason": reason}
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
                yield render.sse({"id": ident, "object": obj, "created": created, "model": model,
                                  "system_fingerprint": fingerprint, "choices": [choice]})
                if finish is not None:
                    usage = {"prompt_tokens": finish.input_length, "completion_tokens": finish.generated_tokens,
                             "total_tokens": finish.input_length + finish.generated_tokens}
        except GenerationError as exc:
            yield render.sse({"error": f"Request failed during generation: {exc}", "error_type": "generation"})
            return
        if usage is not None and body.stream_options and body.stream_options.include_usage:
            yield render.sse({"id": ident, "object": obj, "created": created, "model": model,
                              "system_fingerprint": fingerprint, "choices": [], "usage": usage})
        # huggingface_hub matches the sentinel with the space: `data: [DONE]`.
        yield b"data: [DONE]\n\n"

    # -- app --------------------------------------------------------------------------------
    def info_payload(self) -> dict[str, Any]:
        return {
            "model_id": self.info.model_id, "model_sha": self.info.model_sha,
            # model_dtype and model_device_type are in TGI's /info up to 2.x; kept for provenance.
            "model_dtype": self.info.model_dtype, "model_device_type": self.info.device_type,
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
            "max_batch_total_tokens": self.engine.config.max_batch_total_tokens,
            "max_batch_prefill_tokens": self.engine.config.max_batch_prefill_tokens,
            "max_batch_size": self.engine.config.max_batch_size,
            "waiting_served_ratio": self.engine.config.waiting_served_ratio,
            "max_waiting_tokens": self.engine.config.max_waiting_tokens,
            "quantize": self.info.quantize,
            "random_weights": self.info.random_weights,
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

        install_error_handlers(app)

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
