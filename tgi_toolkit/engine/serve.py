"""Start-up of the embedded engine: launcher settings -> model -> warm-up -> HTTP server.

Everything that can fail (a refused flag, a missing model) fails before the port opens, so a
client never sees a half-started server; `/health` is 200 from the first moment it answers.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

# The rules live below both the engine and the configuration (the form and the planner show them
# without importing the engine); re-exported here, where the engine applies them.
from tgi_toolkit.config.embedded import (
    COMPILE_SIZES_DEFAULT,
    GC_FREEZE_ENV,
    STALL_MS_ENV,
    UnsupportedSetting,
    refusals,
)
from tgi_toolkit.engine.watchdog import StallWatch, from_environment
from tgi_toolkit.models.files import DEFAULT_MODEL_ID

log = logging.getLogger("tgi_toolkit.engine")
# The engine's log lines (unless --json-output); the GPU probe reads its stall lines back in this form
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class EngineOptions:
    """The engine's own flags beyond text-generation-launcher's (engine/cli.py parses them)."""

    device: str | None = None  # --device cuda|cpu; None: cuda where torch sees a GPU, else cpu
    random_weights: bool = False  # --random-weights: --model-id is a config.json, weights random, timing only
    compile_sizes: tuple[int, ...] | None = None  # --compile-sizes; None: COMPILE_SIZES_DEFAULT on a CUDA card


@dataclass
class Built:
    app: Any
    engine: Any
    api: Any
    seconds_to_ready: float


def build(cfg: Any, *, started: float | None = None, options: EngineOptions | None = None) -> Built:
    """Load and warm the model described by a LauncherConfig (and the engine's own `options`); return the ready
    app."""
    from tgi_toolkit.engine.device import resolve_device

    started = time.perf_counter() if started is None else started
    options = options or EngineOptions()
    # Every rule that needs no model is checked before loading it (tens of seconds on a small CPU), so
    # a contradictory flag is a one-line error at once; the limits derived from the model come after.
    device = resolve_device(options.device)
    cfg.check(os.environ, backend="embedded")
    refused = refusals(cfg, device)
    if refused:
        raise UnsupportedSetting("\n".join(refused))
    graph_sizes, compile_sizes = decode_step_sizes(cfg.cuda_graphs, options.compile_sizes, device)
    trace = _open_trace(os.environ.get("TGI_TOOLKIT_FORWARD_TRACE"))
    pace = _pace(os.environ.get("TGI_TOOLKIT_PACE"))
    watch = _stall_watch()

    from tgi_toolkit.engine.api import Api, ServerInfo
    from tgi_toolkit.engine.backend import ModelBackend
    from tgi_toolkit.engine.infer import ComputeThread, Engine
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.engine.validation import RequestLimits

    if cfg.huggingface_hub_cache:
        os.environ["HF_HUB_CACHE"] = str(cfg.huggingface_hub_cache)
    # Every torch computation, loading included, happens in one thread (see ComputeThread).
    compute = ComputeThread()
    try:
        source, loaded, runner, config = compute.call(_load, cfg, device, options.random_weights)
        compute.call(_warm_up, runner, graph_sizes, compile_sizes)
    except BaseException:
        compute.close()
        raise

    backend = ModelBackend(runner, loaded.tokenizer, loaded.eos_token_ids, pace=pace, watch=watch)
    metrics = Metrics(trace=trace, split=backend.split)
    metrics.batch_max_total_tokens.set(config.max_batch_total_tokens)
    engine = Engine(backend, config, metrics)
    engine.start(compute)
    api = Api(
        engine, loaded.tokenizer,
        RequestLimits(max_best_of=cfg.max_best_of, max_stop_sequences=cfg.max_stop_sequences,
                      max_top_n_tokens=cfg.max_top_n_tokens, max_input_tokens=config.max_input_tokens,
                      max_total_tokens=config.max_total_tokens, disable_grammar_support=cfg.disable_grammar_support,
                      random_weights=loaded.random_weights),
        ServerInfo(model_id=cfg.model_id if cfg.model_id else DEFAULT_MODEL_ID, model_sha=source.sha,
                   max_concurrent_requests=cfg.max_concurrent_requests,
                   max_client_batch_size=cfg.max_client_batch_size,
                   validation_workers=cfg.validation_workers, api_key=cfg.api_key,
                   cors_allow_origin=tuple(cfg.cors_allow_origin or ()),
                   model_dtype=str(loaded.dtype).removeprefix("torch."), quantize=cfg.quantize,
                   payload_limit=cfg.payload_limit, device_type=device, random_weights=loaded.random_weights),
        metrics,
    )
    return Built(api.app, engine, api, time.perf_counter() - started)


def _open_trace(path: str | None) -> IO[str] | None:
    """TGI_TOOLKIT_FORWARD_TRACE's file (appended to, a line per forward), opened before the model loads so
    that a path it cannot write is a one-line error at once."""
    if not path:
        return None
    try:
        return open(path, "a", buffering=1)  # noqa: SIM115 (the engine writes to it until it exits)
    except OSError as exc:
        raise UnsupportedSetting(f"TGI_TOOLKIT_FORWARD_TRACE: cannot write {path!r} ({exc.strerror})") from None


def _stall_watch() -> StallWatch | None:
    """TGI_TOOLKIT_STALL_MS's watch (engine.watchdog), read before the model loads so that a bad value is a
    one-line error at once."""
    try:
        watch = from_environment(STALL_MS_ENV)
    except ValueError as exc:
        raise UnsupportedSetting(str(exc)) from None
    if watch is not None:
        log.info("A forward running past %.0f ms has its thread's stack logged (%s)", watch.threshold_s * 1e3,
                 STALL_MS_ENV)
    return watch


def _pace(path: str | None) -> Callable[[Any], float] | None:
    """TGI_TOOLKIT_PACE's cost model (a `tgi-toolkit simulate profile` JSON): every forward then lasts at least
    the seconds it prices (ModelBackend's `pace`), read before the model loads so that a bad file is a
    one-line error at once."""
    if not path:
        return None
    from tgi_toolkit.costs.features import shape_of
    from tgi_toolkit.costs.linear import load_linear

    try:
        cost = load_linear(path)
    except (OSError, ValueError) as exc:
        raise UnsupportedSetting(f"TGI_TOOLKIT_PACE: {path!r} is not a cost model this engine can read ({exc})") \
            from None
    log.info("Every forward lasts at least its price in %s (TGI_TOOLKIT_PACE): %s", path,
             getattr(cost, "name", "") or type(cost).__name__)
    return lambda forward: cost.seconds(shape_of(forward))


def _load(cfg: Any, device: str = "cpu", random_weights: bool = False) -> tuple[Any, Any, Any, Any]:
    """Resolve and load the model onto `device` (or build it with random weights), derive TGI 3's router settings
    for it, build its runner (quantized if asked).

    Returns the source, the loaded model, the runner and the SchedulerConfig.
    """
    import torch

    from tgi_toolkit.config.scheduling import scheduler_config
    from tgi_toolkit.engine.device import describe
    from tgi_toolkit.engine.kv_cache import kv_bytes_per_token
    from tgi_toolkit.engine.model import load_model, load_random
    from tgi_toolkit.engine.runner import LlamaRunner
    from tgi_toolkit.models.files import resolve_model

    if random_weights:
        log.info("Building %s with random weights on %s (timing only)", cfg.model_id, describe(device))
        loaded = load_random(cfg.model_id, dtype=cfg.dtype, tokenizer_config_path=cfg.tokenizer_config_path,
                             device=device)
        source = loaded.source
    else:
        source = resolve_model(cfg.model_id, cfg.revision)
        log.info("Loading %s on %s", source.describe(), describe(device))
        loaded = load_model(source, dtype=cfg.dtype, tokenizer_config_path=cfg.tokenizer_config_path, device=device)
    model_max_length = getattr(loaded.tokenizer, "model_max_length", None)
    if not isinstance(model_max_length, int) or model_max_length > 10**8 or random_weights:
        model_max_length = None  # transformers' "no limit" sentinel; or another model's tokenizer
    per_token = kv_bytes_per_token(loaded.config, loaded.dtype)
    config = scheduler_config(cfg, os.environ, model_config=loaded.config.to_dict(), kv_bytes_per_token=per_token,
                              max_position_embeddings=loaded.max_position_embeddings,
                              model_max_length=model_max_length,
                              kv_bytes=_cuda_kv_bytes(cfg, loaded) if device == "cuda" else None)
    # Rows: with chunking the running batch has no size cap (B5); each request (or best_of sequence)
    # holds one row while it runs, and the concurrency limit bounds the requests. The KV cache is the
    # scheduler's budget (max_batch_total_tokens), allocated now, or less where that many rows of the
    # longest request need less.
    rows, positions = max(cfg.max_concurrent_requests * max(cfg.max_best_of, 1), 1), config.max_total_tokens + 1
    runner = LlamaRunner(loaded.model, max_rows=rows, max_positions=positions,
                         kv_capacity_tokens=min(rows * positions, config.max_batch_total_tokens + positions),
                         pool_slots=config.slots if config.prefix_caching else None)
    log.info("KV cache: %d rows x %d positions (%.0f MiB, allocated at start-up)", runner.cache.rows,
             runner.cache.positions, 2 * runner.cache.k.numel() * runner.cache.k.element_size() / 2**20)
    if cfg.quantize:
        from tgi_toolkit.engine.quantization import quantize_runner

        quantize_runner(runner, cfg.quantize)
    # The runner holds its own (fused, maybe quantized) copies of the decoder weights.
    loaded.model.model.layers = torch.nn.ModuleList()
    log.info("Weights: %.1f MiB (%s%s)", runner.weight_bytes() / 2**20, runner.dtype,
             f", {cfg.quantize}" if cfg.quantize else "")
    return source, loaded, runner, config


def _cuda_kv_bytes(cfg: Any, loaded: Any) -> int:
    """The KV bytes a CUDA card leaves after the weights, as TGI's warm-up measures them (engine.device): less a
    forward's activations at --max-batch-prefill-tokens, and the runner's fused q/k/v and gate/up copies (made
    after this; the model's own are freed then); halved where the prefix cache's pool keeps a second copy."""
    from tgi_toolkit.config.scheduling_mode import resolve_mode
    from tgi_toolkit.engine.device import activation_bytes, cuda_kv_bytes

    model = loaded.model
    fused = sum(p.numel() * p.element_size() for layer in model.model.layers
                for p in (layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                          layer.self_attn.v_proj.weight, layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight))
    rows = max(cfg.max_concurrent_requests * max(cfg.max_best_of, 1), 1)
    reserve = fused + activation_bytes(loaded.config, cfg.max_batch_prefill_tokens or 4096, rows,
                                       loaded.dtype.itemsize)
    kv = cuda_kv_bytes(cfg.cuda_memory_fraction or 1.0, reserve)
    mode = resolve_mode(os.environ, speculate=cfg.speculate or 0, model_config=loaded.config.to_dict(),
                        lora=bool(cfg.lora_adapters))
    log.info("KV memory on the card: %.1f GiB (free after the weights, less %.1f GiB of activations and fused "
             "weights)%s", kv / 2**30, reserve / 2**30, ", halved for the prefix cache's pool" if mode.prefix_caching
             else "")
    return kv // 2 if mode.prefix_caching else kv


# TGI's --cuda-graphs default, taken on a CUDA card when the flag is not given
CUDA_GRAPHS_DEFAULT = (1, 2, 4, 8, 16, 32)


def decode_step_sizes(cuda_graphs: list[int] | None, compile_sizes: tuple[int, ...] | None, device: str
                      ) -> tuple[list[int], list[int]]:
    """The batch sizes the decode step is captured (or, on a CPU, compiled) at, and those whose CUDA graphs hold
    the compiled layers, with their defaults on a CUDA card; a contradiction is refused naming both flags."""
    graphs = list(CUDA_GRAPHS_DEFAULT) if cuda_graphs is None and device == "cuda" else \
        [n for n in cuda_graphs or () if n > 0]
    if device != "cuda":
        if compile_sizes:
            raise UnsupportedSetting("--compile-sizes compiles the layers inside a CUDA card's decode-step graphs, "
                                     "and a CPU has none: there --cuda-graphs' sizes compile the step (docs/engine.md)")
        return graphs, []
    if compile_sizes is None:
        return graphs, [n for n in COMPILE_SIZES_DEFAULT if n in graphs]
    outside = [n for n in compile_sizes if n not in graphs]
    if outside:
        raise UnsupportedSetting(f"--compile-sizes {','.join(map(str, outside))}: not among the --cuda-graphs batch "
                                 f"sizes ({', '.join(map(str, graphs)) or 'none'}); the layers compile inside those "
                                 "graphs")
    return graphs, list(compile_sizes)


def _warm_up(runner: Any, graph_sizes: list[int], compile_sizes: list[int]) -> None:
    """One prefill and one decode step (pages in every weight); with `--cuda-graphs` sizes, the decode step
    captured as CUDA graphs at those batch sizes on a GPU (TGI's sizes by default, `--cuda-graphs 0` for none; the
    layers compiled inside those of `compile_sizes`), or compiled and warmed at them on a CPU, so that no request
    pays a capture or a compile.

    On a CPU not by default: there the compiled step was no faster than the eager one, and it took minutes
    of start-up (docs/engine.md, "The decode step's speed")."""
    seqs, logits = runner.prefill([[0, 1, 2, 3]])
    runner.decode([int(logits[0][-1].argmax())])
    for seq in seqs:
        runner.release(seq)
    sizes = [n for n in graph_sizes if n <= runner.cache.max_rows]
    if sizes:
        runner.compile_decode(sizes, compile_sizes)


def configure_logging(json_output: bool) -> None:
    handler = logging.StreamHandler(sys.stdout)
    if json_output:
        import json

        class JsonFormatter(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                return json.dumps({"timestamp": self.formatTime(record), "level": record.levelname,
                                   "target": record.name, "fields": {"message": record.getMessage()}})

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def freeze_heap() -> int:
    """Leave every object alive now (the model's modules, the tokenizer, torch's, transformers' and the web server's
    own) out of the collector's passes from now on, and return how many that is. Why: a pass over the oldest
    generation walks every tracked object and holds the GIL throughout, so the whole engine stops for it; served on
    this CPU a pass took 0.29-0.35 s over 409,000-447,000 objects, nearly all of them start-up's
    (benchmarks/engine_gc_pauses.py), and one card's process holds more (vLLM, SGLang and TensorRT-LLM freeze their
    heaps after warm-up for the same pauses). Objects made after it are still collected. TGI_TOOLKIT_GC_FREEZE=0
    leaves the heap as it is."""
    from tgi_toolkit.engine.metrics import CollectorClock

    if os.environ.get(GC_FREEZE_ENV, "1") == "0":
        return 0
    with CollectorClock.paused():  # start-up's, not a forward's: the trace's first line would carry it
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def serve(cfg: Any, options: EngineOptions | None = None) -> int:
    """Run the server in the foreground until SIGTERM/SIGINT; the process's whole life."""
    import uvicorn

    started = time.perf_counter()
    configure_logging(bool(cfg.json_output))
    log.info("%s", cfg.to_args_log(redact=True))
    built = build(cfg, started=started, options=options)
    config = uvicorn.Config(built.app, host=cfg.hostname, port=cfg.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=3, log_config=None)
    server = uvicorn.Server(config)

    original_startup = server.startup

    async def startup(sockets: Any = None) -> None:
        await original_startup(sockets)
        if server.started:
            frozen = freeze_heap()
            if frozen:
                log.info("Start-up's %d objects left out of the garbage collector's passes (%s=0 keeps them in)",
                         frozen, GC_FREEZE_ENV)
            log.info("Connected: serving on http://%s:%d (ready in %.1f s)", cfg.hostname, cfg.port,
                     time.perf_counter() - started)

    server.startup = startup  # type: ignore[method-assign]

    def died(error: BaseException) -> None:
        # TGI's router exits when its shards are gone; /health already answers 503 (engine.failure).
        log.error("Shutting down: the engine's compute side died (%s: %s)", type(error).__name__, error)
        server.should_exit = True

    built.engine.on_death = died
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal under the handler
    # that was there before; a quiet one makes a clean shutdown exit 0, as TGI's router does.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        built.engine.stop()
    if built.engine.failure is not None:
        return 1
    return 0 if server.started else 1
