"""TGI's request validation: the same checks, in the same order, with the same messages.

Every message is the one TGI's router returns, so clients that match on them behave the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tgi_toolkit.engine.sampling import SamplingParams


class ValidationError(Exception):
    """A request TGI would refuse with 422 `validation`."""

    def __str__(self) -> str:
        return f"Input validation error: {self.args[0]}"


# The Rust integer types of TGI's request structs: serde refuses a number out of the type's range
# (a negative seed, a 30-digit max_new_tokens) while deserializing, a 422 before any rule runs.
U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
I32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


class GenerateParameters(BaseModel):
    """TGI's `GenerateParameters` (unknown keys are ignored, as serde does), plus `ignore_eos`."""

    # serde_json has no NaN or infinity (1e999 is "number out of range"); Python's json reads both.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    best_of: U64 | None = None
    temperature: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    top_k: I32 | None = None
    top_p: float | None = None
    typical_p: float | None = None
    do_sample: bool = False
    max_new_tokens: U32 | None = None
    return_full_text: bool | None = None
    stop: list[str] = []
    truncate: U64 | None = None
    watermark: bool = False
    details: bool = False
    decoder_input_details: bool = False
    seed: U64 | None = None
    top_n_tokens: U32 | None = None
    grammar: Any = None
    adapter_id: str | None = None
    # Extension (as vLLM): never stop on EOS, so exactly max_new_tokens are generated.
    ignore_eos: bool = False


@dataclass(frozen=True)
class RequestLimits:
    max_best_of: int = 2
    max_stop_sequences: int = 4
    max_top_n_tokens: int = 5
    max_input_tokens: int = 4095
    max_total_tokens: int = 4096
    disable_grammar_support: bool = False
    random_weights: bool = False  # --random-weights: only benchmark requests (ignore_eos) are served

# The one refusal of a random-weight server (`--random-weights`): its tokens are noise, so only a request that
# says it is a benchmark, by forcing its length with ignore_eos, gets them.
RANDOM_WEIGHTS_REFUSAL = (
    "this server runs random weights (--random-weights), for timing only: its text is noise. Only benchmark "
    "requests are served: set `ignore_eos` to true (in `parameters`, or on the OpenAI routes), as "
    "`tgi-toolkit bench` does")


@dataclass
class ValidRequest:
    inputs: str
    input_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    stop: list[str] = field(default_factory=list)
    details: bool = False
    decoder_input_details: bool = False
    return_full_text: bool = False
    ignore_eos: bool = False
    best_of: int = 1
    prefix_cache: bool = True  # False: never looked up in or added to the prefix cache (TGI's decoder_input_details)

    @property
    def input_length(self) -> int:
        return len(self.input_ids)


def validate_best_of(best_of: int, limits: RequestLimits) -> int:
    if limits.max_best_of == 1 and best_of != 1:
        raise ValidationError("`best_of` != 1 is not allowed for this endpoint")
    if best_of < 1 or best_of > limits.max_best_of:
        raise ValidationError(f"`best_of` must be > 0 and <= {limits.max_best_of}. Given: {best_of}")
    return best_of


def validate(inputs: str, params: GenerateParameters, limits: RequestLimits, tokenize,
             *, stream: bool = False) -> ValidRequest:
    """Check a request as TGI's router does; `tokenize(text) -> list[int]`."""
    if limits.random_weights and not params.ignore_eos:
        raise ValidationError(RANDOM_WEIGHTS_REFUSAL)
    best_of = params.best_of if params.best_of is not None else 1
    sampling = (params.do_sample or params.temperature is not None or params.top_k is not None
                or params.top_p is not None or params.typical_p is not None)
    if best_of > 1 and not sampling:
        raise ValidationError("you must use sampling when `best_of` is > 1")
    temperature = params.temperature if params.temperature is not None else 1.0
    if temperature <= 0.0:
        raise ValidationError("`temperature` must be strictly positive")
    repetition_penalty = params.repetition_penalty if params.repetition_penalty is not None else 1.0
    if repetition_penalty <= 0.0:
        raise ValidationError("`repetition_penalty` must be strictly positive")
    frequency_penalty = params.frequency_penalty if params.frequency_penalty is not None else 0.0
    if not -2.0 <= frequency_penalty <= 2.0:
        raise ValidationError("`frequency_penalty` must be >= -2.0 and <= 2.0")
    top_p = params.top_p if params.top_p is not None else 1.0
    if params.top_p is not None and not 0.0 < top_p < 1.0:
        raise ValidationError("`top_p` must be > 0.0 and < 1.0")
    typical_p = params.typical_p if params.typical_p is not None else 1.0
    if params.typical_p is not None and not 0.0 < typical_p < 1.0:
        raise ValidationError("`typical_p` must be > 0.0 and < 1.0")
    top_k = params.top_k if params.top_k is not None else 0
    if params.top_k is not None and top_k <= 0:
        raise ValidationError("`top_k` must be strictly positive")
    if params.max_new_tokens is not None and params.max_new_tokens <= 0:
        raise ValidationError("`max_new_tokens` must be strictly positive")
    if len(params.stop) > limits.max_stop_sequences:
        raise ValidationError(
            f"`stop` supports up to {limits.max_stop_sequences} stop sequences. Given: {len(params.stop)}"
        )
    if params.seed is not None and best_of > 1:
        raise ValidationError("`seed` must not be set when `best_of` > 1")
    top_n = params.top_n_tokens if params.top_n_tokens is not None else 0
    if top_n < 0 or top_n > limits.max_top_n_tokens:
        raise ValidationError(
            f"`top_n_tokens` must be >= 0 and <= {limits.max_top_n_tokens}. Given: {top_n}"
        )
    if not inputs:
        raise ValidationError("`inputs` cannot be empty")
    if params.truncate is not None and not 0 < params.truncate <= limits.max_input_tokens:
        raise ValidationError(
            f"`truncate` must be strictly positive and less than {limits.max_input_tokens}. "
            f"Given: {params.truncate}"
        )
    if params.grammar is not None and limits.disable_grammar_support:
        raise ValidationError("grammar is not supported")
    if params.grammar is not None:
        # Constrained decoding is not implemented by the embedded engine: refuse it the way TGI
        # does when started with --disable-grammar-support, rather than ignore it silently.
        raise ValidationError("grammar is not supported")
    if stream and best_of > 1:
        raise ValidationError("`best_of` != 1 is not supported when streaming tokens")
    if stream and params.decoder_input_details:
        raise ValidationError("`decoder_input_details` == true is not supported when streaming tokens")

    ids = tokenize(inputs)
    input_length = min(len(ids), params.truncate) if params.truncate is not None else len(ids)
    ids = ids[len(ids) - input_length:]
    if params.max_new_tokens is not None:
        max_new_tokens = params.max_new_tokens
    else:
        max_new_tokens = max(limits.max_total_tokens - input_length, 0)
    if input_length + max_new_tokens > limits.max_total_tokens:
        raise ValidationError(
            f"`inputs` tokens + `max_new_tokens` must be <= {limits.max_total_tokens}. "
            f"Given: {input_length} `inputs` tokens and {max_new_tokens} `max_new_tokens`"
        )
    if input_length > limits.max_input_tokens:
        raise ValidationError(
            f"`inputs` must have less than {limits.max_input_tokens} tokens. Given: {input_length}"
        )
    if max_new_tokens <= 0:  # a prompt that already fills max_total_tokens
        raise ValidationError("`max_new_tokens` must be strictly positive")

    sampling_params = SamplingParams(
        do_sample=params.do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
        typical_p=typical_p, repetition_penalty=repetition_penalty,
        frequency_penalty=frequency_penalty, seed=params.seed, top_n_tokens=top_n,
    )
    return ValidRequest(
        inputs=inputs, input_ids=ids, max_new_tokens=max_new_tokens, sampling=sampling_params,
        stop=list(params.stop), details=params.details,
        decoder_input_details=params.decoder_input_details,
        return_full_text=bool(params.return_full_text), ignore_eos=params.ignore_eos, best_of=best_of,
    )
