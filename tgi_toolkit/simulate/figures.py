"""A published figure predicted two ways: in closed form from the roofline's forward times (`steady`, cheap
enough for a fit to call thousands of times), and by the simulator itself (`simulated`, TGI's scheduler on a
virtual clock), which is what the accuracy benchmark reports.

The closed form follows the simulator's workloads: a batch (or closed-loop users, who send in waves) prefills
its prompts together and then decodes them side by side; an open-loop rate settles where the requests in
flight equal rate x latency (Little's law), each newcomer's prefill stalling the decoding rows once.
"""

from __future__ import annotations

import math
from typing import Any

from scipy.optimize import brentq

from tgi_toolkit.costs.features import Shape, row_pairs
from tgi_toolkit.costs.linear import CostModel
from tgi_toolkit.costs.roofline import RooflineCostModel
from tgi_toolkit.simulate.corpus import METRICS, Figure

VLLM_MAX_NUM_SEQS = 256  # vLLM's default --max-num-seqs
INGESTION_SHORTEST = 32  # benchmark_llm_serving's shortest ingestion prompt, about


def decode_step(cost: CostModel, rows: float, context: float) -> float:
    """One forward of `rows` sequences emitting a token each, every row `context` tokens long."""
    return cost.seconds(Shape(rows, rows, rows * context, rows * context, False))  # rows: a mean, may be fractional


def prefill(cost: CostModel, rows: int, prompt: int) -> float:
    """One forward prefilling `rows` prompts of `prompt` tokens."""
    return cost.seconds(Shape(rows, rows * prompt, rows * prompt, rows * row_pairs(0, prompt), True))


def _metrics(ttft: float, tpot: float, streams: float, figure: Figure, compute: float) -> dict[str, float]:
    out = figure.output_tokens
    e2e = ttft + max(out - 1, 0) * tpot
    return {"ttft_ms": 1e3 * ttft, "prefill_ms": 1e3 * ttft, "tpot_ms": 1e3 * tpot,
            "decode_tok_s_per_user": 1 / tpot, "e2e_s": e2e, "output_tok_s": streams * out / e2e,
            "total_tok_s": streams * (out + figure.input_tokens) / e2e, "requests_s": streams / e2e,
            "tgi_time_per_token_ms": 1e3 * (compute + max(out - 1, 0) * tpot) / out}


def steady(figure: Figure, cost: RooflineCostModel) -> float:
    """The figure's metric in closed form (NaN when an open-loop rate saturates the server).

    A batch prefills together and decodes side by side. Users and rates are out of phase, as real clients
    are: each newcomer's prompt stalls the decoding rows once, in a forward of its own (the older servers) or
    merged into theirs (chunking servers), and the requests in flight settle at rate x latency."""
    p, o = figure.input_tokens, figure.output_tokens
    mid = p + o / 2
    front = cost.request_overhead_s
    if figure.scheduler_steps > 1:
        cost = MultiStep(cost, figure.scheduler_steps)
    if figure.metric == "ingestion_tok_s":
        low = min(INGESTION_SHORTEST, p // 2)
        return (p - low) / (prefill(cost, 1, p) - prefill(cost, 1, low))
    if figure.batch_size is not None:  # a served burst too: the fit's proxy, `simulated` runs it through the router
        b = figure.batch_size
        first = prefill(cost, b, p)
        return _metrics(front + first, decode_step(cost, b, mid), b, figure, first)[figure.metric]
    if figure.request_rate is None:  # closed loop: the users are the requests in flight
        n = float(figure.users or 1)
        return _loaded(figure, cost, n, None)[figure.metric]
    rate = figure.request_rate
    # open loop: the requests in flight n settle where n = rate x latency(n); latency grows with n
    def excess(n: float) -> float:
        e2e = _loaded(figure, cost, n, rate)["e2e_s"]
        return rate * e2e - n if e2e == e2e else math.inf
    if excess(1.0) <= 0:
        return _loaded(figure, cost, 1.0, rate)[figure.metric]
    cap = batch_cap(figure, cost)
    low = 1.0
    while low < cap:  # the first (stable) balance: double until the latency no longer keeps up
        high = min(2 * low, cap)
        if excess(high) < 0:
            return _loaded(figure, cost, brentq(excess, low, high, xtol=1e-9), rate)[figure.metric]
        low = high
    # beyond the server: it runs full, at its own pace, and the queue (so TTFT and e2e) grows without bound
    if figure.metric in ("ttft_ms", "prefill_ms", "e2e_s"):
        return math.nan
    return _loaded(figure, cost, cap, None)[figure.metric]


def _loaded(figure: Figure, cost: Any, n: float, rate: float | None) -> dict[str, float]:
    """The metrics with `n` requests in flight, out of phase: users (`rate` None: they pace themselves) or an
    open-loop `rate`. The prompts arriving during a decode step are prefilled together and stall the decoding
    rows once, in a forward of their own (the older servers) or merged into theirs (chunking servers); a
    closed-loop user's own prompt stalls neither its decoding nor its wait, only the other users' do. With
    multi-step scheduling (vLLM's --num-scheduler-steps) the host's per-forward time is paid once per steps
    and a newcomer waits for the steps under way."""
    p, o = figure.input_tokens, figure.output_tokens
    mid, steps = p + o / 2, figure.scheduler_steps
    step = decode_step(cost, n, mid)
    others = (n - 1) / n if rate is None else 1.0
    arriving = 1.0  # prompts prefilled together: found with the rate, below
    for _ in range(3):
        if cost.profile.chunking:
            first = cost.seconds(Shape(n + arriving, n + arriving * p, n * mid + arriving * p,
                                       n * mid + arriving * row_pairs(0, p), True, n, n * mid))
            extra = (first - step) / arriving
        else:
            first = prefill(cost, arriving, p)
            extra = first / arriving
        ttft = cost.request_overhead_s + others * steps * step / 2 + first
        if rate is None:
            # e2e = ttft + (o - 1) step / (1 - c / e2e), c = the others' prompt time per request cycle:
            # e2e^2 - (ttft + c + (o - 1) step) e2e + ttft c = 0
            c = others * n * extra
            b = ttft + c + (o - 1) * step
            per_s = n / ((b + math.sqrt(b * b - 4 * ttft * c)) / 2)
        else:
            per_s = rate
        arriving = max(1.0, others * per_s * step * steps)
    busy = others * per_s * extra  # the share of time newcomers' prompts hold the decoding rows
    if busy >= 1:
        return dict.fromkeys(METRICS, math.nan)
    tpot = step / (1 - busy)
    m = _metrics(ttft, tpot, n, figure, first)
    m["output_tok_s"], m["requests_s"], m["total_tok_s"] = per_s * o, per_s, per_s * (o + p)
    return m


class MultiStep:
    """`cost` under vLLM's multi-step scheduling: a decode-only forward pays the host's per-forward time once per
    `steps` forwards. (The wait of a newcomer for the steps under way is not simulated.)"""

    def __init__(self, cost: Any, steps: int) -> None:
        self.cost, self.steps = cost, steps

    def seconds(self, shape: Shape) -> float:
        saved = 0.0 if shape.prefilling else self.cost.forward_overhead_s * (1 - 1 / self.steps)
        return self.cost.seconds(shape) - saved

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cost, name)


def batch_cap(figure: Figure, cost: RooflineCostModel) -> float:
    """The most requests the server runs at once: its KV capacity over a request's tokens, and vLLM's
    max_num_seqs (256 unless the figure's set-up says otherwise)."""
    cap = float(figure.max_batch_size or (VLLM_MAX_NUM_SEQS if getattr(cost.profile, "name", "").startswith("vllm")
                                                  else math.inf))
    plan = getattr(cost, "plan", None)
    if callable(plan):
        cap = min(cap, plan().capacity.kv_capacity_tokens / (figure.input_tokens + figure.output_tokens))
    return max(1.0, cap)


def _limits(figure: Figure, cost: Any, max_input: int, total: int, prefill: int) -> list[str]:
    """The server's flags that let the figure's requests in: TGI's length limits and prefill budget, or for a vLLM V1
    server (scheduled by vLLM's rules) its max_model_len and max_num_seqs, its token budget left at its default."""
    from tgi_toolkit.simulate.target import VLLM_V1

    if getattr(cost, "server", None) == VLLM_V1:
        return ["--max-model-len", str(total), "--max-num-seqs", str(figure.max_batch_size or VLLM_MAX_NUM_SEQS)]
    return ["--max-input-tokens", str(max_input), "--max-total-tokens", str(total),
            "--max-batch-prefill-tokens", str(prefill)]


def simulated(figure: Figure, cost: RooflineCostModel, *, waves: int = 3) -> float:
    """The figure's metric from the simulator: the server profile's scheduler (vLLM V1's for vllm-v1, else TGI's
    with the profile's batching rule) on a virtual clock; medians over requests, as the corpus's figures mostly
    are."""
    from tgi_toolkit import schema as S
    from tgi_toolkit.simulate.api import run_concurrency, run_rate
    from tgi_toolkit.simulate.target import make_target

    p, o = figure.input_tokens, figure.output_tokens
    if figure.metric == "ingestion_tok_s":
        return _ingestion(figure, cost)
    if figure.batch_size is not None and not figure.burst:
        # an offline static batch (TensorRT-LLM's gptSessionBenchmark, vLLM's benchmark_latency) is no served
        # workload: a router admits a burst in waves, the static batch prefills it whole; the closed form is exact
        return steady(figure, cost)
    limits = _limits(figure, cost, p + 1, p + o + 2, max(4096, p + 1))
    target = make_target(MultiStep(cost, figure.scheduler_steps) if figure.scheduler_steps > 1 else cost, limits,
                         environ={})
    if figure.burst:  # a served burst: every prompt at once, and the router admits them as its rules say
        b = figure.streams
        run = run_concurrency(target, users=[b], prompt_tokens=p, max_new_tokens=o, requests=b, ramp_up=0,
                              light=True)
    elif figure.request_rate is None:
        b = figure.streams  # users keep sending, `waves` requests each
        run = run_concurrency(target, users=[b], prompt_tokens=p, max_new_tokens=o, requests=b * waves, light=True)
    else:
        run = run_rate(target, rates=[figure.request_rate], arrival="poisson", prompt_tokens=p, max_new_tokens=o,
                       requests=200, light=True)
    point = run.point_rows[0]
    if figure.metric == "tgi_time_per_token_ms":  # TGI's log: (prefill + decode) / tokens, queue excluded
        return 1e3 * (point["ttft_p50_s"] + (o - 1) * point["tpot_p50_s"]) / o
    pick = {"ttft_ms": (S.TTFT_S, 1e3), "prefill_ms": (S.TTFT_S, 1e3), "tpot_ms": (S.TPOT_S, 1e3),
            "e2e_s": (S.E2E_S, 1.0)}
    if figure.metric in pick:
        column, scale = pick[figure.metric]
        return scale * point[column.removesuffix("_s") + "_p50_s"]
    if figure.metric == "decode_tok_s_per_user":
        return 1 / point["tpot_p50_s"]
    per_s = {"output_tok_s": S.OUTPUT_THROUGHPUT, "requests_s": S.REQUEST_THROUGHPUT}
    if figure.metric in per_s:
        return point[per_s[figure.metric]]
    return point[S.OUTPUT_THROUGHPUT] + point[S.INPUT_THROUGHPUT]


def _ingestion(figure: Figure, cost: Any) -> float:
    """benchmark_llm_serving's prompt ingestion speed: prompts up to `input_tokens` one at a time, one output
    token each, 1 / slope of TTFT against length."""
    from tgi_toolkit.bench.api import spread_lengths
    from tgi_toolkit.bench.stats import ingestion_fit
    from tgi_toolkit.simulate.api import measure_ingestion
    from tgi_toolkit.simulate.target import make_target

    p = figure.input_tokens
    lengths = spread_lengths(min(INGESTION_SHORTEST, p // 2), p, 8)
    target = make_target(cost, _limits(figure, cost, p + 1, p + 2, p + 1), environ={})
    rows = measure_ingestion(target, prompt_tokens=lengths, repeats=1, light=True).request_rows
    return ingestion_fit([r["input_tokens"] for r in rows], [r["ttft_s"] for r in rows])["speed_tok_s"]
