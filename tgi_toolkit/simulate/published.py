"""The roofline model against the published cards of data/reference (seeds 001 and 003).

Each card's main metrics are simulated the way the toolkit measures them: prompt ingestion speed is
bench's ingestion scenario (one request at a time, prompts from 32 tokens to 90 % of the server's
limit, 1 / slope of TTFT against length); the generation speed is the mean per-request speed of 10
closed-loop users sending 1,024-token prompts for 128 tokens; the KV capacity is the capacity planner's,
with the card's vLLM memory settings (gpu_memory_utilization 0.9, no wiggle room, block size 16).

The cards were measured on vLLM, the simulation follows TGI's rules; where that matters:
- ingestion: one request at a time, so the schedulers agree; a prompt longer than TGI's prefill budget
  is chunked into several forwards, which costs a little per chunk (vLLM 0.4.3 without chunked prefill
  runs it in one), and the card's longest prompts (its max_model_len) make the quadratic attention term weigh;
- generation speed at 10 users: vLLM 0.4.3 (seed 001) pauses every running request while a newcomer's
  prompt is prefilled alone; TGI 3 puts the prompt into the running batch's forward (chunked), so
  decoding rows stall for one mixed forward instead. Both stall per newcomer; the speed differs by
  the decode-only steps in between, a few per cent at this point;
- KV capacity: vLLM's profiler leaves 10 % of memory (gpu_memory_utilization 0.9) and pages in blocks
  of 16; TGI keeps 1 - 0.9 x cuda_memory_fraction after its warm-up; the planner is asked for vLLM's rule.

Seed 000 (text-generation-benchmark, mt0-xxl-mt on 4-way tensor parallel) is not simulated: mt0 is an
encoder-decoder (mT5) model, which TGI serves with its padded Seq2SeqLM path (no block allocator, no
chunking, an encoder forward per prefill) rather than the flash decoder path the simulator drives and
the planner's ModelShape describes; and the seed does not name its GPUs, so there is no datasheet to price
its forwards with.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from tgi_toolkit.simulate.gpu import RooflineCostModel, roofline

SEED_000 = ("seed 000 (mt0-xxl-mt, TP 4) not simulated: an encoder-decoder model on TGI's padded Seq2SeqLM path, "
            "which the simulator does not drive, on GPUs the seed does not name")


@dataclass(frozen=True)
class Card:
    reference: str  # data/reference/<name>
    model: str  # PUBLISHED_MODELS key
    gpu: str
    max_model_len: int  # the card's vLLM limit (launch parameters, or the model's context)
    seed: str


CARDS = (
    Card("happy-vllm-codellama-7b-a100", "codellama/CodeLlama-7b-Instruct-hf", "A100-80GB", 16384, "001"),
    Card("happy-vllm-phi-3-vision-h100", "microsoft/Phi-3-vision-128k-instruct", "H100-80GB", 100000, "003"),
)


def card_config(card: Card) -> list[str]:
    """Launcher flags giving TGI the card's lengths (its vLLM max_model_len)."""
    return ["--max-input-tokens", str(card.max_model_len - 1), "--max-total-tokens", str(card.max_model_len)]


def _quiet() -> Any:
    import contextlib

    @contextlib.contextmanager
    def quiet() -> Any:  # the scheduler's chunking warning, once per simulated server
        logger = logging.getLogger("tgi_toolkit.router.scheduler")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)

    return quiet()


def ingestion_speed(card: Card, cost: RooflineCostModel, *, points: int = 8) -> float:
    """bench's ingestion scenario on the card's server: 1 / slope of TTFT against prompt length."""
    from tgi_toolkit.bench.stats import ingestion_fit
    from tgi_toolkit.simulate.api import default_ingestion_lengths, measure_ingestion
    from tgi_toolkit.simulate.target import make_target

    with _quiet():
        target = make_target(cost, card_config(card), environ={})
        lengths = default_ingestion_lengths(target, points)
        rows = measure_ingestion(target, prompt_tokens=lengths, repeats=1, light=True).request_rows
    return ingestion_fit([r["input_tokens"] for r in rows], [r["ttft_s"] for r in rows])["speed_tok_s"]


def generation_speed(card: Card, cost: RooflineCostModel, *, requests: int = 40) -> float:
    """Mean per-request speed of 10 users, 1,024-token prompts, 128 tokens (the card's point)."""
    from tgi_toolkit.simulate.api import run_concurrency
    from tgi_toolkit.simulate.target import make_target

    with _quiet():
        target = make_target(cost, card_config(card), environ={})
        run = run_concurrency(target, users=[10], prompt_tokens=1024, max_new_tokens=128, requests=requests,
                              light=True)
    return float(run.point_rows[0]["speed_mean_tok_s"])


def predict(card: Card, cost: RooflineCostModel | None = None, *, ingestion_points: int = 8,
            requests: int = 40) -> dict[str, float]:
    """The card's three main metrics, simulated with `cost` (default: the fitted roofline)."""
    cost = cost or roofline(card.gpu, card.model)
    return {"prompt_ingestion_speed": ingestion_speed(card, cost, points=ingestion_points),
            "generation_speed_per_request": generation_speed(card, cost, requests=requests),
            "kv_cache_capacity": float(vllm_kv_capacity(cost))}


def vllm_kv_capacity(cost: RooflineCostModel) -> int:
    from tgi_toolkit.planner import plan

    return plan(cost.model, cost.gpu, dtype=cost.dtype, quantize=cost.quantize, num_shard=cost.num_shard,
                memory_fraction=0.9, wiggle_room=1.0, block_size=16, _suggest=False).max_batch_total_tokens


def published(card: Card) -> dict[str, float]:
    from tgi_toolkit.reference import load_reference

    ref = load_reference(card.reference)
    return {name: float(ref.metric(name)) for name in
            ("prompt_ingestion_speed", "generation_speed_per_request", "kv_cache_capacity")}


def compare(cost_overrides: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """One row per (card, metric): predicted, published, ratio."""
    out = []
    for card in CARDS:
        cost = roofline(card.gpu, card.model, **(cost_overrides or {}))
        got = predict(card, cost, **kwargs)
        ref = published(card)
        for name, value in got.items():
            pub = ref[name]
            out.append({"seed": card.seed, "reference": card.reference, "metric": name, "predicted": value,
                        "published": pub, "ratio": value / pub if pub else math.nan})
    return out
