"""`advise`: the cheapest deployment that meets your latency objectives at your traffic, with error bars.

    from tgi_toolkit.advise import advise

    advice = advise("config.json", rate=20, prompt_tokens=512, max_new_tokens=128, ttft=1.0, tpot=0.05,
                    gpus=["A10G", "L4", "A100-80GB", "H100"], shards=[1, 2, 4], output="results/advise")
    advice.table        # ranked: cost per million output tokens, replicas, GPUs, predicted TTFT/TPOT and errors
    advice.refused      # candidates the planner refused, with the reason
    advice.command      # the winner's text-generation-launcher command
    advice.figure()     # cost against latency, Pareto set marked
    print(advice.summary())

Each candidate (GPU kind x GPUs per replica x quantization) goes through the planner's memory check, TGI 3's
default launcher settings, the knobs tuned in simulation, and a search for the load one replica sustains
(tgi_toolkit.advise.evaluate); the ranking (tgi_toolkit.advise.ranking) prices them (tgi_toolkit.advise.prices).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tgi_toolkit.advise.advice import Advice
from tgi_toolkit.advise.candidates import DEFAULT_GPUS, DEFAULT_SHARDS, Candidate, enumerate_candidates
from tgi_toolkit.advise.evaluate import evaluate
from tgi_toolkit.advise.prices import load_prices
from tgi_toolkit.advise.ranking import rank
from tgi_toolkit.advise.traffic import Traffic, load_lengths, objectives

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.planner.shape import ModelConfigSource


def advise(model: ModelConfigSource, *, rate: float | None = None, users: int | None = None, prompt_tokens: int = 512,
           max_new_tokens: int = 128, ttft: float | None = None, tpot: float | None = None,
           percentile: int | str = 90, gpus: Sequence[str] = DEFAULT_GPUS, shards: Sequence[int] = DEFAULT_SHARDS,
           quantize: Sequence[str | None] = ("none",), prices: Any = None, dataset: str | Path | None = None,
           candidates: Sequence[Candidate] | None = None, requests: int = 120, tune: bool = True,
           output: str | Path | None = None, progress: bool = True, seed: int = 0,
           cost_model: str = "auto") -> Advice:
    """Rank deployments of `model` (config.json path, model directory, dict, or a name in
    costs.roofline.PUBLISHED_MODELS) for the traffic and objectives.

    rate (requests/s, Poisson) or users (closed loop); prompt_tokens / max_new_tokens, or dataset (a file of
    prompt/output lengths); ttft / tpot: limits in seconds at `percentile`; gpus x shards x quantize: the
    candidates (or `candidates`: Candidate objects, e.g. a calibrated cost model of this machine); prices: a
    YAML path or mapping (default: the shipped dated table); output: a results folder with one simulated
    configuration per candidate and advise.json; cost_model: how a GPU is priced, measured (kernel times from
    NVIDIA's operator database), roofline (the datasheet) or auto (measured where the database covers the card).
    """
    from tgi_toolkit.costs.roofline import PUBLISHED_MODELS
    from tgi_toolkit.planner.shape import load_config
    from tgi_toolkit.progress import progress_bar

    began = time.perf_counter()
    if ttft is None and tpot is None:
        raise ValueError("objectives: give ttft and/or tpot (seconds at the percentile)")
    goals = objectives(ttft, tpot, percentile)
    lengths = load_lengths(dataset) if dataset is not None else ()
    traffic = Traffic(rate_rps=rate, users=users, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                      lengths=lengths, dataset=str(dataset) if dataset else None, requests=requests)
    published = isinstance(model, str) and model in PUBLISHED_MODELS
    config = dict(PUBLISHED_MODELS[model]) if published else load_config(model)
    table_prices = load_prices(prices)
    prompt, output_tokens = traffic.longest
    if candidates is None:
        from tgi_toolkit.costs.measured import COST_MODELS

        if cost_model not in COST_MODELS:
            raise ValueError(f"cost_model: {cost_model!r} is not one of {', '.join(COST_MODELS)}")
        kept, refused = enumerate_candidates(config, gpus, shards, quantize, prompt, output_tokens)
        kept = [dataclasses.replace(c, pricing=cost_model) for c in kept]
    else:
        kept, refused = list(candidates), []
    unpriced = sorted({c.gpu for c in kept} - set(table_prices.per_gpu_hour))
    if unpriced:
        raise ValueError(f"prices: no price for {', '.join(unpriced)} in {table_prices.path} "
                         f"(priced: {', '.join(table_prices.per_gpu_hour)}); give --prices")
    folder = Path(output).resolve() if output is not None else None
    evaluations = []
    bar = progress_bar(len(kept), "advise: candidates", unit="candidate") if progress else None
    try:
        for candidate in kept:
            evaluations.append(evaluate(candidate, config, traffic, goals, tune=tune, output=folder, seed=seed))
            if bar is not None:
                bar.set_postfix_str(candidate.name)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    table, missed = rank(evaluations, traffic, goals, table_prices)
    advice = Advice(table=table, refused=refused, missed=missed, traffic=traffic, objectives=goals,
                    prices=table_prices, evaluations=evaluations, model=str(config.get("_name_or_path") or model),
                    seconds=time.perf_counter() - began, output=folder)
    if folder is not None:
        advice.save(folder)
    return advice
