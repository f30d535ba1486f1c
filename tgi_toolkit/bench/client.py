"""Async streaming clients for TGI's `/generate_stream` and the OpenAI `/v1/completions` and
`/v1/chat/completions` routes (vLLM, TGI, SGLang, ...).

Each request yields one `StreamRecord`: the monotonic nanosecond time it was sent and the arrival
time of every chunk that carried tokens, with the token count per chunk, plus what the server said
about lengths. Server-reported counts (`details.generated_tokens`, `usage`) are preferred; counting
token events is the fallback (docs/measurement.md pitfall 3).

Speed matters here (a slow client inflates every latency, pitfall 4): one aiohttp session per run
(a pooled keep-alive connector), request bodies serialised before the clock starts, and TGI's
per-token events recognised without a JSON parse; only the last event and errors are parsed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

# Monotonic, nanoseconds, system-wide on Linux: the same clock as the server-side samples.
now_ns = time.monotonic_ns

API_KINDS = ("tgi", "completions", "chat")
# TGI's sampling parameters, as text-generation-benchmark's flags name them.
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "frequency_penalty",
                 "watermark", "do_sample", "seed")


@dataclass(slots=True)
class GenerationRequest:
    """One request: prompt, forced length and sampling parameters (TGI names; None = unset)."""

    prompt: str
    max_new_tokens: int
    ignore_eos: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StreamRecord:
    """What one streamed request did, on the monotonic clock (ns)."""

    sent_ns: int = 0
    token_ns: list[int] = field(default_factory=list)  # arrival of each chunk carrying tokens
    token_counts: list[int] | None = None  # tokens in each such chunk; None: one each
    status: int = 0
    input_tokens: int | None = None  # server-reported prompt length
    output_tokens: int | None = None  # server-reported, else counted from events
    finish_reason: str | None = None  # TGI's words: length | eos_token | stop_sequence
    server_finish_reason: str | None = None  # the server's own word for it (OpenAI's "stop", ...)
    error: str | None = None
    error_message: str | None = None
    text: str | None = None  # the generated text (a multi-turn workload resends it as history)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def events(self) -> int:
        return len(self.token_ns)


class StreamingClient:
    """Base: one pooled aiohttp session; subclasses build bodies and read events.

    `max_connections=0` leaves the pool unbounded: a client-side cap would queue requests inside
    the client and hide the server's own queueing in TTFT (pitfall 4). `read_timeout`: seconds
    without a byte before a request fails; one watchdog task checks every stream now and then,
    as aiohttp's own per-read timer would cost a timer reschedule on every chunk.
    """

    kind = ""
    route = ""

    def __init__(self, url: str, *, api_key: str | None = None, model: str | None = None,
                 max_connections: int = 0, read_timeout: float | None = 600.0, connect_timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.endpoint = self.url + self.route
        self.model = model or "tgi"
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._max_connections = max_connections
        self.read_timeout = read_timeout
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None
        # streams in flight: [last activity ns, their task, timed out]
        self._live: dict[int, list[Any]] = {}
        self._watchdog: asyncio.Task | None = None

    async def __aenter__(self) -> StreamingClient:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def open(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0,
                                             keepalive_timeout=60, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                  auto_decompress=False)

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self.open()
        assert self._session is not None
        return self._session

    # -- subclasses -------------------------------------------------------------------------
    def body(self, request: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def on_data(self, record: StreamRecord, payload: bytes, t: int, state: dict[str, Any]) -> bool:
        """Handle one `data:` payload that arrived at `t`; return True when the stream is complete."""
        raise NotImplementedError

    # -- the request ------------------------------------------------------------------------
    def encode(self, request: GenerationRequest) -> bytes:
        return json.dumps(self.body(request), separators=(",", ":")).encode()

    async def stream(self, request: GenerationRequest | bytes, record: StreamRecord | None = None) -> StreamRecord:
        """Send one request (or a body from `encode`) and read its stream to the end.

        Never raises for what the server or the network did: the record's `error` says it.
        Cancellation propagates. `record`: fill this one (a caller can watch its tokens arrive).
        """
        data = request if isinstance(request, bytes) else self.encode(request)
        record = StreamRecord() if record is None else record
        state: dict[str, Any] = {}
        done = False
        record.sent_ns = now_ns()
        entry = [record.sent_ns, asyncio.current_task(), False]
        if self.read_timeout:
            self._live[id(entry)] = entry
            if self._watchdog is None:
                self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        try:
            async with self.session.post(self.endpoint, data=data, headers=self.headers) as response:
                record.status = response.status
                if response.status != 200:
                    _http_error(record, response.status, await response.read())
                    return record
                pending = b""
                async for chunk in response.content.iter_any():
                    t = entry[0] = now_ns()
                    pending += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.startswith(b"data:") and self._on_data(record, line[5:].strip(), t, state):
                            done = True
                            break
                    if done or record.error is not None:
                        break
                if not done and record.error is None:
                    record.error, record.error_message = "incomplete_stream", "the stream ended before its last event"
        except aiohttp.ClientResponseError as exc:
            record.status = exc.status
            record.error, record.error_message = type(exc).__name__, str(exc)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            record.error, record.error_message = type(exc).__name__, str(exc) or repr(exc)
        except asyncio.CancelledError:
            if not entry[2]:
                raise  # cancelled by the caller, not by the watchdog
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            record.error, record.error_message = "ReadTimeout", f"no data for {self.read_timeout:g} s"
        finally:
            self._live.pop(id(entry), None)
        if record.output_tokens is None and record.token_ns:
            counts = record.token_counts
            record.output_tokens = sum(counts) if counts is not None else len(record.token_ns)
        return record


    def _on_data(self, record: StreamRecord, payload: bytes, t: int, state: dict[str, Any]) -> bool:
        # A server that sends something else than it should (a cut JSON, a list instead of an
        # object) fails this request only: the point goes on and counts it among its errors.
        try:
            return self.on_data(record, payload, t, state)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            record.error = "malformed_event"
            record.error_message = f"{type(exc).__name__}: {exc}; event: {payload[:200].decode(errors='replace')}"
            return True

    async def _watch(self) -> None:
        limit = int(self.read_timeout * 1e9)
        period = min(max(self.read_timeout / 4, 0.01), 5.0)
        while True:
            await asyncio.sleep(period)
            now = now_ns()
            for entry in list(self._live.values()):
                if not entry[2] and now - entry[0] > limit:
                    entry[2] = True
                    entry[1].cancel()


def _http_error(record: StreamRecord, status: int, raw: bytes) -> None:
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict):  # OpenAI style {"error": {"message", "type"}}
            record.error = str(err.get("type") or f"http_{status}")
            record.error_message = str(err.get("message"))
        else:
            record.error = str(payload.get("error_type") or f"http_{status}")
            record.error_message = str(err if err is not None else payload.get("message") or payload)
    else:
        record.error, record.error_message = f"http_{status}", raw[:500].decode(errors="replace")


def _error_event(record: StreamRecord, event: dict[str, Any]) -> bool:
    err = event.get("error")
    if err is None:
        return False
    if isinstance(err, dict):
        record.error, record.error_message = str(err.get("type") or "error"), str(err.get("message"))
    else:
        record.error, record.error_message = str(event.get("error_type") or "error"), str(err)
    return True


class TgiClient(StreamingClient):
    """TGI's `/generate_stream`: one event per token; the last carries `details`."""

    kind = "tgi"
    route = "/generate_stream"
    _TOKEN_MARKS = (b'"generated_text":null', b'"generated_text": null')

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        parameters: dict[str, Any] = {"max_new_tokens": request.max_new_tokens, "details": True}
        parameters.update({k: v for k, v in request.sampling.items() if v is not None})
        if request.ignore_eos:
            parameters["ignore_eos"] = True
        return {"inputs": request.prompt, "parameters": parameters, "stream": True}

    def on_data(self, record: StreamRecord, payload: bytes, t: int, state: dict[str, Any]) -> bool:
        # A token event that is not the last: no parse needed (the marker cannot occur inside a
        # JSON string, where quotes are escaped).
        if not payload.startswith(b'{"error"') and (self._TOKEN_MARKS[0] in payload or self._TOKEN_MARKS[1] in payload):
            record.token_ns.append(t)
            return False
        event = json.loads(payload)
        if _error_event(record, event):
            return True
        if event.get("token") is not None:
            record.token_ns.append(t)
        details = event.get("details")
        if isinstance(details, dict):
            record.output_tokens = details.get("generated_tokens")
            record.input_tokens = details.get("input_length")
            record.finish_reason = record.server_finish_reason = details.get("finish_reason")
        if event.get("generated_text") is not None:
            record.text = event["generated_text"]
            return True
        return False


class OpenAIClient(StreamingClient):
    """OpenAI streaming: token counts per chunk from vLLM's `continuous_usage_stats` where given."""

    model_key = "prompt"
    _FINISH = {"stop": "eos_token", "length": "length"}

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        greedy = not s.get("do_sample") and s.get("temperature") is None
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": request.max_new_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "temperature": 0.0 if greedy else s.get("temperature", 1.0),
        }
        for key in ("top_p", "top_k", "seed", "frequency_penalty", "repetition_penalty"):
            if s.get(key) is not None:
                body[key] = s[key]
        if request.ignore_eos:
            body["ignore_eos"] = True
        self.add_prompt(body, request.prompt)
        return body

    def add_prompt(self, body: dict[str, Any], prompt: str) -> None:
        body["prompt"] = prompt

    @staticmethod
    def chunk_text(choice: dict[str, Any]) -> str:
        return choice.get("text") or ""

    def on_data(self, record: StreamRecord, payload: bytes, t: int, state: dict[str, Any]) -> bool:
        if payload == b"[DONE]":
            record.text = "".join(state.get("text", ()))
            return True
        event = json.loads(payload)
        if _error_event(record, event):
            return True
        usage = event.get("usage")
        choices = event.get("choices") or []
        tokens = 0
        if choices:
            choice = choices[0]
            if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                tokens = usage["completion_tokens"] - state.get("seen", 0)
            elif self.counts_chunk(choice):
                tokens = 1
            piece = choice.get("text") or (choice.get("delta") or {}).get("content")
            if piece:
                state.setdefault("text", []).append(piece)
            if choice.get("finish_reason") is not None:
                record.server_finish_reason = str(choice["finish_reason"])
                record.finish_reason = self._FINISH.get(choice["finish_reason"], choice["finish_reason"])
        if tokens > 0:
            record.token_ns.append(t)
            state["seen"] = state.get("seen", 0) + tokens
            if tokens != 1 or record.token_counts is not None:
                if record.token_counts is None:
                    record.token_counts = [1] * (len(record.token_ns) - 1)
                record.token_counts.append(tokens)
        if isinstance(usage, dict):
            record.input_tokens = usage.get("prompt_tokens", record.input_tokens)
            if usage.get("completion_tokens") is not None:
                record.output_tokens = usage["completion_tokens"]
        return False

    def counts_chunk(self, choice: dict[str, Any]) -> bool:
        # Without per-chunk usage, a chunk carries a token when it carries text: the last chunk of
        # some servers holds only the finish reason, with empty text, and is no token event.
        return bool(choice.get("text"))


class CompletionsClient(OpenAIClient):
    kind = "completions"
    route = "/v1/completions"


class ChatClient(OpenAIClient):
    """`/v1/chat/completions`: the prompt is one user message, so the server's input length
    includes its chat template; only chunks with content count (vLLM opens with a role-only one)."""

    kind = "chat"
    route = "/v1/chat/completions"

    def add_prompt(self, body: dict[str, Any], prompt: str) -> None:
        body["messages"] = [{"role": "user", "content": prompt}]

    def counts_chunk(self, choice: dict[str, Any]) -> bool:
        return bool((choice.get("delta") or {}).get("content"))


CLIENTS: dict[str, type[StreamingClient]] = {"tgi": TgiClient, "completions": CompletionsClient, "chat": ChatClient}


def make_client(kind: str, url: str, **kwargs: Any) -> StreamingClient:
    """A client for `kind` (tgi | completions | chat)."""
    try:
        cls = CLIENTS[kind]
    except KeyError:
        from tgi_toolkit.bench.errors import BenchError

        raise BenchError("api", f"{kind!r} is not a known API", ", ".join(API_KINDS)) from None
    return cls(url, **kwargs)
