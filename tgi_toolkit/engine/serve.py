"""Start-up of the embedded engine: launcher settings -> model -> warm-up -> HTTP server.

Everything that can fail (a refused flag, a missing model) fails before the port opens, so a
client never sees a half-started server; `/health` is 200 from the first moment it answers.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

# The rules live below both the engine and the configuration (the form and the planner show them
# without importing the engine); re-exported here, where the engine applies them.
from tgi_toolkit.config.embedded import DEFAULT_KV_CACHE_BYTES, UnsupportedSetting, refusals
from tgi_toolkit.config.model_files import DEFAULT_MODEL_ID

log = logging.getLogger("tgi_toolkit.engine")

@dataclass
class Built:
    app: Any
    engine: Any
    api: Any
    config: Any
    seconds_to_ready: float


def build(cfg: Any, *, started: float | None = None) -> Built:
    """Load and warm the model described by a LauncherConfig; return the ready app."""
    started = time.perf_counter() if started is None else started
    refused = refusals(cfg)
    if refused:
        raise UnsupportedSetting("\n".join(refused))

    from tgi_toolkit.engine.api import Api, ServerInfo
    from tgi_toolkit.engine.infer import ComputeThread, Engine, ModelBackend
    from tgi_toolkit.engine.metrics import Metrics
    from tgi_toolkit.engine.scheduler import BatchingLimits
    from tgi_toolkit.engine.validation import Limits

    if cfg.huggingface_hub_cache:
        os.environ["HF_HUB_CACHE"] = str(cfg.huggingface_hub_cache)
    # Every torch computation, loading included, happens in one thread (see ComputeThread).
    compute = ComputeThread()
    try:
        source, loaded, cfg, runner = compute.call(_load, cfg)
        max_total = cfg.max_total_tokens
        batch_total = cfg.max_batch_total_tokens
        if batch_total is None:
            fraction = getattr(cfg, "cuda_memory_fraction", 1.0) or 1.0
            batch_total = int(DEFAULT_KV_CACHE_BYTES * fraction // runner.cache.bytes_per_token())
            batch_total = max(batch_total, max_total)
            cfg = cfg.model_copy(update={"max_batch_total_tokens": batch_total})
            log.info("Setting max batch total tokens to %d", batch_total)
        cfg.validate()
        compute.call(_warm_up, runner)
    except BaseException:
        compute.close()
        raise

    metrics = Metrics()
    metrics.batch_max_total_tokens.set(batch_total)
    limits = BatchingLimits(
        max_batch_prefill_tokens=cfg.max_batch_prefill_tokens, max_batch_total_tokens=batch_total,
        waiting_served_ratio=cfg.waiting_served_ratio, max_waiting_tokens=cfg.max_waiting_tokens,
        max_batch_size=cfg.max_batch_size,
    )
    backend = ModelBackend(runner, loaded.tokenizer, loaded.eos_token_ids)
    engine = Engine(backend, limits, metrics)
    engine.start(compute)
    api = Api(
        engine, loaded.tokenizer,
        Limits(max_best_of=cfg.max_best_of, max_stop_sequences=cfg.max_stop_sequences,
               max_top_n_tokens=cfg.max_top_n_tokens, max_input_tokens=cfg.max_input_tokens,
               max_total_tokens=max_total, disable_grammar_support=cfg.disable_grammar_support),
        ServerInfo(model_id=cfg.model_id if cfg.model_id else DEFAULT_MODEL_ID, model_sha=source.sha,
                   max_concurrent_requests=cfg.max_concurrent_requests,
                   max_client_batch_size=cfg.max_client_batch_size,
                   validation_workers=cfg.validation_workers, api_key=cfg.api_key,
                   cors_allow_origin=tuple(cfg.cors_allow_origin or ()),
                   model_dtype=str(loaded.dtype).removeprefix("torch."), quantize=cfg.quantize),
        metrics,
    )
    return Built(api.app, engine, api, cfg, time.perf_counter() - started)


def _load(cfg: Any) -> tuple[Any, Any, Any, Any]:
    """Resolve and load the model, build its runner (quantized if asked); the config resolved for it."""
    import torch

    from tgi_toolkit.engine.model import load_model, resolve_model
    from tgi_toolkit.engine.runner import LlamaRunner

    source = resolve_model(cfg.model_id, cfg.revision)
    log.info("Loading %s", source.describe())
    loaded = load_model(source, dtype=cfg.dtype, tokenizer_config_path=cfg.tokenizer_config_path)
    cfg = cfg.resolved(loaded.max_position_embeddings)
    rows = cfg.max_batch_size or cfg.max_concurrent_requests
    runner = LlamaRunner(loaded.model, max_rows=rows, max_positions=cfg.max_total_tokens + 1)
    if cfg.quantize:
        from tgi_toolkit.engine.quantization import quantize_runner

        quantize_runner(runner, cfg.quantize)
    # The runner holds its own (fused, maybe quantized) copies of the decoder weights.
    loaded.model.model.layers = torch.nn.ModuleList()
    log.info("Weights: %.1f MiB (%s%s)", runner.weight_bytes() / 2**20, runner.dtype,
             f", {cfg.quantize}" if cfg.quantize else "")
    return source, loaded, cfg, runner


def _warm_up(runner: Any) -> None:
    # One prefill and one decode step: allocates the cache and pages in every weight.
    seqs, logits = runner.prefill([[0, 1, 2, 3]])
    runner.decode([int(logits[0][-1].argmax())])
    for seq in seqs:
        runner.release(seq)


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
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def serve(cfg: Any) -> int:
    """Run the server in the foreground until SIGTERM/SIGINT; the process's whole life."""
    import uvicorn

    started = time.perf_counter()
    configure_logging(bool(cfg.json_output))
    log.info("%s", cfg.to_args_log(redact=True))
    built = build(cfg, started=started)
    cfg = built.config
    config = uvicorn.Config(built.app, host=cfg.hostname, port=cfg.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=3, log_config=None)
    server = uvicorn.Server(config)

    original_startup = server.startup

    async def startup(sockets: Any = None) -> None:
        await original_startup(sockets)
        if server.started:
            log.info("Connected: serving on http://%s:%d (ready in %.1f s)", cfg.hostname, cfg.port,
                     time.perf_counter() - started)

    server.startup = startup  # type: ignore[method-assign]
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal under the handler
    # that was there before; a quiet one makes a clean shutdown exit 0, as TGI's router does.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        built.engine.stop()
    return 0 if server.started else 1
