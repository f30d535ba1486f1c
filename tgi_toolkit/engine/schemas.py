"""TGI's request bodies as pydantic models: FastAPI parses and validates each route's body with them, and
the OpenAPI document (/api-doc/openapi.json) is built from them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tgi_toolkit.engine.validation import U32, U64, GenerateParameters


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


class OpenAIRequest(BaseModel):
    """What /v1/chat/completions and /v1/completions requests share."""

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


class ChatRequest(OpenAIRequest):
    messages: list[ChatMessage]
    logprobs: bool | None = False
    top_logprobs: U32 | None = None


class CompletionRequest(OpenAIRequest):
    prompt: str | list[str]
