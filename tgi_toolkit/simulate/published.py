"""The roofline model against the published happy_vllm cards of data/reference: a fit check, not an accuracy
figure. The clean cards' speeds are rows of the GPU corpus (data/reference/gpu_figures.csv) that the shipped fit
saw; their error on data the fit never saw is benchmarks/gpu_accuracy.py's leave-one-source-out figure. The KV
capacity is the planner's alone (nothing is fitted to it).

Cards: seed 001 (CodeLlama-7b, A100-80GB), seed 003 (Phi-3-vision-128k, titled H100) and the two reruns of
seed 003's benchmark its authors published (France-Travail/results_benchmark_llm_serving commits 9649d93 on
the A100-80g and 81b1eb3 on the H100, same launch parameters). Seed 003 is simulated on an A100-80GB: its
authors relabelled the card A100-80g (commit 631bf02) and its KV estimate is the A100 cards'. Its
speeds come from a run the authors call debug mode (they replaced it with 9649d93, which is 3x faster per
request and ingests 1.33x faster on the same GPU): properties of that run, not of the hardware, so their
rows carry a note.

Each card's main metrics are simulated the way benchmark_llm_serving measures them:
- prompt ingestion speed: one request at a time, one output token, prompts from 32 to 4,096 tokens (the
  cards' own prompts span ~10 to ~4,150 tokens whatever max_model_len is: their raw data,
  report/data/prompt_ingestion_graph_data.json), 1 / slope of TTFT against length;
- generation speed per request: 10 closed-loop users sending 1,024-token prompts for 128 tokens; the card's
  figure is the median over requests of output tokens / (end - request start), time to first token
  included (France-Travail/benchmark_llm_serving: src/benchmark_llm_serving/io_classes.py,
  `speed_from_beginning`; make_graphs.py takes its median at n_workers=10). `card_generation_speed` computes
  it from the simulated request rows (bench's `speed_mean_tok_s`, the mean of (out - 1) / (e2e - TTFT),
  leaves that wait out and reads 8-18 % higher at this point);
- KV capacity: the capacity planner's, with the card's vLLM memory settings (gpu_memory_utilization 0.9,
  no wiggle room, block size 16, activations for max(max_model_len, 2048) tokens: `vllm_batched_tokens`).

The cards were measured on vLLM, the simulation follows TGI's rules; where that matters:
- ingestion: one request at a time, so the schedulers agree; prompts of at most 4,096 tokens fit in one
  TGI prefill forward, as in vLLM;
- generation speed at 10 users: these vLLM versions, without chunked prefill, pause every running request
  while a newcomer's prompt is prefilled alone; TGI 3 puts the prompt into the running batch's forward
  (chunked), so decoding rows stall for one mixed forward instead. Both stall per newcomer; the speed
  differs by the decode-only steps in between, a few per cent at this point;
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
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tgi_toolkit.costs.roofline import RooflineCostModel, roofline

SEED_000 = ("seed 000 (mt0-xxl-mt, TP 4) not simulated: an encoder-decoder model on TGI's padded Seq2SeqLM path, "
            "which the simulator does not drive, on GPUs the seed does not name")


PHI3 = "microsoft/Phi-3-vision-128k-instruct"
DEBUG_MODE = ("debug-mode run (authors' word; replaced by 9649d93, 3x faster on the same GPU): "
              "not a hardware figure, left out of the fit and of the worst ratio")
DEBUG_MODE_INGESTION = ("debug-mode run (authors' word; replaced by 9649d93, which ingests 20,000 t/s on the "
                        "same GPU): not a hardware figure, left out of the fit and of the worst ratio")


@dataclass(frozen=True)
class Card:
    reference: str  # data/reference/<name>
    model: str  # PUBLISHED_MODELS key
    gpu: str  # the GPU it ran on (seed 003: not its title's, see the module's docstring)
    max_model_len: int  # the card's vLLM limit (launch parameters, or the model's context)
    seed: str  # short name: the seed's number, or the commit of a rerun
    server: str = "vllm-v0.6"  # the reruns' vLLM 0.6.3.post1 (seed 001's 0.4.3 says so below)
    notes: tuple[tuple[str, str], ...] = ()  # (metric, why its published value is no roofline target)

    def note(self, metric: str) -> str:
        return dict(self.notes).get(metric, "")


CARDS = (
    Card("happy-vllm-codellama-7b-a100", "codellama/CodeLlama-7b-Instruct-hf", "A100-80GB", 16384, "001",
         server="vllm-v0"),
    Card("happy-vllm-phi-3-vision-h100", PHI3, "A100-80GB", 100000, "003",
         notes=(("prompt_ingestion_speed", DEBUG_MODE_INGESTION), ("generation_speed_per_request", DEBUG_MODE))),
    Card("happy-vllm-phi-3-vision-a100-rerun", PHI3, "A100-80GB", 100000, "9649d93"),
    Card("happy-vllm-phi-3-vision-h100-rerun", PHI3, "H100-80GB", 100000, "81b1eb3"),
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


# benchmark_llm_serving's ingestion prompts (its growing_prompts dataset, one request at a time, one output
# token): the cards' raw data (report/data/prompt_ingestion_graph_data.json) runs from a few dozen tokens to
# ~4,150, whatever the server's limit.
CARD_PROMPT_TOKENS = (32, 4096)


def ingestion_speed(card: Card, cost: RooflineCostModel, *, points: int = 8) -> float:
    """The card's ingestion scenario on its server: prompts of CARD_PROMPT_TOKENS one at a time, 1 / slope
    of TTFT against length."""
    from tgi_toolkit.bench.api import spread_lengths
    from tgi_toolkit.bench.stats import ingestion_fit
    from tgi_toolkit.simulate.api import measure_ingestion
    from tgi_toolkit.simulate.target import make_target

    low, high = CARD_PROMPT_TOKENS
    lengths = spread_lengths(low, min(high, card.max_model_len - 1), points)
    with _quiet():
        target = make_target(cost, card_config(card), environ={})
        rows = measure_ingestion(target, prompt_tokens=lengths, repeats=1, light=True).request_rows
    return ingestion_fit([r["input_tokens"] for r in rows], [r["ttft_s"] for r in rows])["speed_tok_s"]


def card_generation_speed(request_rows: Iterable[Mapping[str, Any]]) -> float:
    """benchmark_llm_serving's per-request generation speed: the median over requests of output tokens /
    end-to-end time (from the request's start, so the time to first token counts). Warm-up requests,
    failed ones and ones without a time are left out; NaN when none is left."""
    from tgi_toolkit import schema as S

    speeds = []
    for row in request_rows:
        e2e, out = row.get(S.E2E_S), row.get(S.OUTPUT_TOKENS)
        if row.get(S.WARMUP) or row.get(S.ERROR) or e2e is None or out is None:
            continue
        if e2e == e2e and e2e > 0:  # not NaN
            speeds.append(float(out) / float(e2e))
    return statistics.median(speeds) if speeds else math.nan


def generation_speed(card: Card, cost: RooflineCostModel, *, requests: int = 40) -> float:
    """The card's generation speed (`card_generation_speed`) of 10 users, 1,024-token prompts, 128 tokens."""
    from tgi_toolkit.simulate.api import run_concurrency
    from tgi_toolkit.simulate.target import make_target

    with _quiet():
        target = make_target(cost, card_config(card), environ={})
        run = run_concurrency(target, users=[10], prompt_tokens=1024, max_new_tokens=128, requests=requests,
                              light=True)
    return card_generation_speed(run.request_rows)


def predict(card: Card, cost: RooflineCostModel | None = None, *, ingestion_points: int = 8,
            requests: int = 40) -> dict[str, float]:
    """The card's three main metrics, simulated with `cost` (default: the fitted roofline)."""
    cost = cost or roofline(card.gpu, card.model, server=card.server)
    return {"prompt_ingestion_speed": ingestion_speed(card, cost, points=ingestion_points),
            "generation_speed_per_request": generation_speed(card, cost, requests=requests),
            "kv_cache_capacity": float(vllm_kv_capacity_tokens(cost, vllm_batched_tokens(card)))}


def vllm_batched_tokens(card: Card) -> int:
    """vLLM's max_num_batched_tokens without chunked prefill, max(max_model_len, 2048): the tokens of the
    forward its memory profiler runs. Chunked prefill is off on both cards' vLLM: 0.4.3 by default, 0.6.3
    for a multimodal model such as Phi-3-vision (vllm/engine/arg_utils.py turns it on only for
    max_model_len > 32768 and a model that is not multimodal)."""
    return max(card.max_model_len, 2048)


def vllm_kv_capacity_tokens(cost: RooflineCostModel, batched_tokens: int | None = None) -> int:
    """The planner's KV capacity under vLLM's rule; `batched_tokens` sizes the activations (default: the
    planner's own prefill budget for the GPU)."""
    from tgi_toolkit.planner import plan

    return plan(cost.model, cost.gpu, dtype=cost.dtype, quantize=cost.quantize, num_shard=cost.num_shard,
                memory_fraction=0.9, wiggle_room=1.0, block_size=16, max_batch_prefill_tokens=batched_tokens,
                _suggest=False).capacity.kv_capacity_tokens


def published(card: Card) -> dict[str, float]:
    from tgi_toolkit.reference import load_reference

    ref = load_reference(card.reference)
    return {name: float(ref.metric(name)) for name in
            ("prompt_ingestion_speed", "generation_speed_per_request", "kv_cache_capacity")}


def compare(cost_overrides: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """One row per (card, metric): predicted, published, ratio, and note: why the published value is no
    target for the roofline ('' for the rows that are)."""
    out = []
    for card in CARDS:
        cost = roofline(card.gpu, card.model, server=card.server, **(cost_overrides or {}))
        got = predict(card, cost, **kwargs)
        ref = published(card)
        for name, value in got.items():
            pub = ref[name]
            out.append({"seed": card.seed, "reference": card.reference, "gpu": card.gpu, "metric": name,
                        "predicted": value, "published": pub, "ratio": value / pub if pub else math.nan,
                        "note": card.note(name)})
    return out
