"""The capacity plan: the KV token budget that fits a card, the users it serves and the launcher settings that follow.

How TGI 3 sizes its KV cache (docs/tgi-rules.md, section 6 L2; flash_causal_lm.py
`warmup`): it loads the weights, runs one prefill of `max_batch_prefill_tokens` (the warm-up batch holds
its own KV blocks meanwhile), measures free memory, leaves `(1 - cuda_memory_fraction * TGI_WIGGLE_ROOM)
* total` of it (TGI_WIGGLE_ROOM = 0.90) for CUDA graphs and fragmentation, and fills the rest with KV
blocks, adding back the warm-up batch's blocks. The router then logs "Setting max batch total tokens to
<blocks x block size>". The planner reproduces that from the config alone:

    free     = memory - weights/shard - fixed reserve - prefill activations - warm-up batch's KV
    blocks   = floor(max(0, free - (1 - memory_fraction x 0.90) x memory) / bytes per block) + warm-up blocks

The fixed reserve (default 1 GiB) stands for what torch does not account as tensors: the CUDA
context (~0.5 GiB on recent cards), cuBLAS workspaces and, with shards, NCCL buffers. Prefill
activations are estimated as `max_batch_prefill_tokens x dtype bytes x (4 x hidden + q/k/v widths +
gated-MLP widths)`: the residual stream, its normalised copy, the attention and MLP outputs and the
widest intermediates alive at once. The default `max_batch_prefill_tokens` is the launcher's FLOPs
formula (L1) and the default lengths TGI 3's warm-up ones (L3), from tgi_toolkit.config.prefill_default
and tgi_toolkit.config.scheduling.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from tgi_toolkit.config.prefill_default import GPU_FP16_FLOPS, launcher_max_batch_prefill_tokens
from tgi_toolkit.config.scheduling import (
    derive_limits,
    embedded_kv_bytes,
    kv_capacity_tokens,
    warmup_blocks,
    warmup_requests,
)
from tgi_toolkit.planner.capacity_plan import (
    TGI_DEFAULT_MAX_CONCURRENT_REQUESTS,
    Capacity,
    Hardware,
    LauncherLimits,
    ModelMemory,
    Plan,
)
from tgi_toolkit.planner.dtypes import canonical_dtype, kv_dtype_bytes, quant_scheme
from tgi_toolkit.planner.gpus import GiB, Gpu, resolve_gpu
from tgi_toolkit.planner.lengths import Lengths, check_positive, known_lengths, prefill_budget, request_limits
from tgi_toolkit.planner.memory import (
    activation_bytes_per_token,
    gib,
    kv_bytes_per_token,
    kv_heads_per_shard,
    num,
)
from tgi_toolkit.planner.shape import ModelConfigSource, ModelShape

TGI_WIGGLE_ROOM = 0.90
DEFAULT_OVERHEAD_BYTES = 1 * GiB
TGI_DEFAULT_CUDA_GRAPHS = (1, 2, 4, 8, 16, 32)
# Methods whose kernels TGI cannot capture in CUDA graphs (the launcher turns them off).
_NO_CUDA_GRAPHS = {"bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4", "exl2"}
_SUGGESTED_QUANTIZATION = ("fp8", "eetq", "awq", "bitsandbytes-nf4")


def _padded(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


def _finish(shape: ModelShape, model: ModelMemory, hardware: Hardware, lengths: Lengths, kv_capacity_tokens: int, *,
            steps: list[str], warnings: list[str], chunking: bool = True) -> Plan:
    """Requests that fit in `kv_capacity_tokens`, and the launcher settings that follow; shared by every plan."""
    tokens, server, block_size = kv_capacity_tokens, hardware.server, hardware.block_size
    quantize, budget = model.quantize, hardware.kv_budget_bytes
    request = (lengths.prompt + lengths.output) if lengths.prompt is not None else lengths.max_total
    reserved = min(request, shape.sliding_window) if shape.sliding_window else request
    reserved = _padded(reserved, block_size)
    users = tokens // reserved if reserved else 0
    what = (f"{num(lengths.prompt)} prompt + {num(lengths.output)} output = {num(request)} tokens per "
            "request" if lengths.prompt is not None
            else f"a request of max_total_tokens = {num(request)} tokens (worst case)")
    if shape.sliding_window and request > shape.sliding_window:
        what += f", capped at the sliding window {num(shape.sliding_window)}"
    if block_size > 1 and reserved != min(request, shape.sliding_window or request):
        what += f", padded to whole {block_size}-token blocks = {num(reserved)}"
    steps.append(f"Concurrent users: {what}; floor({num(tokens)} / {num(reserved)}) = **{num(users)}**")

    weights_fit = budget > 0
    fits = weights_fit and users >= 1
    prefill = lengths.prefill
    if fits and tokens < prefill:
        steps.append(f"max_batch_prefill_tokens {num(prefill)} capped at max_batch_total_tokens {num(tokens)}")
        # The router needs max_batch_prefill_tokens <= max_batch_total_tokens (and, unchunked, >= max_input_tokens).
        prefill = tokens if chunking else max(tokens, lengths.max_input)
    if fits and tokens < lengths.max_total and not shape.sliding_window:
        fits = False
    graphs: tuple[int, ...] = ()
    if server == "tgi" and users >= 1 and (quantize or "") not in _NO_CUDA_GRAPHS:
        graphs = tuple(g for g in TGI_DEFAULT_CUDA_GRAPHS if g <= users)
    if server == "tgi":
        why = ("off: TGI cannot capture this quantization's kernels" if (quantize or "") in _NO_CUDA_GRAPHS
               else f"TGI's default {list(TGI_DEFAULT_CUDA_GRAPHS)} trimmed to sizes <= {num(users)} users")
        steps.append(f"CUDA graphs: {list(graphs) or 'none'} ({why})")

    if not weights_fit:
        left = hardware.usable_bytes - hardware.overhead_bytes - hardware.activation_bytes
        warnings.append(f"the weights do not fit: {gib(model.weight_bytes / hardware.num_shard)} per shard "
                        f"against {gib(left)} left after the reserve; quantize or add shards")
    elif users < 1:
        warnings.append(f"one request of {num(reserved)} tokens needs {gib(reserved * model.kv_bytes_per_token)} "
                        f"of KV cache, but only {gib(max(budget, 0))} is left: lower max_total_tokens, quantize "
                        "or add shards")
    elif tokens < lengths.max_total and not shape.sliding_window:
        warnings.append(f"max_batch_total_tokens {num(tokens)} is below max_total_tokens "
                        f"{num(lengths.max_total)}: the launcher refuses that; lower max_total_tokens")
    if users > TGI_DEFAULT_MAX_CONCURRENT_REQUESTS and server == "tgi":
        warnings.append(f"{num(users)} concurrent users exceed TGI's default --max-concurrent-requests "
                        f"{TGI_DEFAULT_MAX_CONCURRENT_REQUESTS}; raise it too, or the extra clients get 429")
    warnings += [n.removeprefix("warning: ") for n in lengths.notes if n.startswith("warning: ")]
    warnings += list(shape.notes)

    limits = LauncherLimits(max_input_tokens=lengths.max_input, max_total_tokens=lengths.max_total,
                            max_batch_prefill_tokens=prefill, max_batch_size=users if users >= 1 else None,
                            cuda_graphs=graphs)
    capacity = Capacity(kv_capacity_tokens=tokens, prompt_tokens=lengths.prompt, output_tokens=lengths.output,
                        tokens_per_request=reserved, concurrent_users=users)
    return Plan(model=model, hardware=hardware, limits=limits, capacity=capacity, fits=fits, steps=tuple(steps),
                warnings=tuple(warnings))


def _parameter_step(shape: ModelShape) -> str:
    parts = {k: v for k, v in shape.parameter_breakdown().items() if v}
    step = f"Parameters: {' + '.join(f'{k} {num(v)}' for k, v in parts.items())} = **{num(sum(parts.values()))}**"
    if shape.num_experts:
        step += f" ({num(shape.active_parameters())} active per token)"
    return step


def _kv_step(shape: ModelShape, dtype: str, kv_cache_dtype: str | None, num_shard: int) -> str:
    heads = kv_heads_per_shard(shape, num_shard)
    nbytes = kv_dtype_bytes(kv_cache_dtype, dtype)
    head_note = f"{shape.num_kv_heads} KV heads" if num_shard == 1 else \
        f"max(1, {shape.num_kv_heads} KV heads // {num_shard} shards) = {heads}"
    kv_name = kv_cache_dtype or canonical_dtype(dtype)
    return (f"KV cache per token: 2 (K, V) x {shape.num_layers} layers x {head_note} x {shape.head_dim} head dim "
            f"x {nbytes} B ({kv_name}) = **{num(kv_bytes_per_token(shape, dtype, kv_cache_dtype, num_shard))} B**"
            + (" per shard" if num_shard > 1 else ""))


EMBEDDED_GPU_NAMES = ("embedded", "cpu")


def check_arguments(gpu: str | int | Gpu, *, dtype: str | None = None, kv_cache_dtype: str | None = None,
                    num_shard: int = 1, memory_fraction: float = 1.0, prompt_tokens: int | None = None,
                    output_tokens: int | None = None, max_input_tokens: int | None = None,
                    max_total_tokens: int | None = None, max_batch_prefill_tokens: int | None = None) -> None:
    """`plan`'s checks of its own arguments, which need no model: ValueError naming the argument. `plan` runs
    them first, and `tgi-toolkit plan` before it reads the model, so a typo answers at once."""
    if isinstance(gpu, str) and gpu.strip().lower() in EMBEDDED_GPU_NAMES:
        if kv_cache_dtype or num_shard != 1:
            raise ValueError("gpu 'embedded' runs one CPU process: kv_cache_dtype and num_shard do not apply")
        if dtype is not None:
            canonical_dtype(dtype)
    else:
        resolve_gpu(gpu)
        kv_dtype_bytes(kv_cache_dtype, canonical_dtype(dtype or "bfloat16"))  # validates both names
        check_positive("num_shard", num_shard)
    if isinstance(memory_fraction, bool) or not 0 < float(memory_fraction) <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1]; got {memory_fraction!r}")
    known_lengths(prompt_tokens, output_tokens, max_input_tokens, max_total_tokens, max_batch_prefill_tokens)


def plan(model_config: ModelShape | ModelConfigSource, gpu: str | int | Gpu, *, dtype: str | None = None,
         quantize: str | None = None, kv_cache_dtype: str | None = None, num_shard: int = 1,
         memory_fraction: float = 1.0, prompt_tokens: int | None = None, output_tokens: int | None = None,
         max_input_tokens: int | None = None, max_total_tokens: int | None = None,
         max_batch_prefill_tokens: int | None = None, overhead_bytes: int | None = None,
         wiggle_room: float = TGI_WIGGLE_ROOM, block_size: int = 1, model_id: str | None = None, chunking: bool = True,
         _suggest: bool = True) -> Plan:
    """Plan a TGI deployment of `model_config` on `gpu` before launching it.

    `model_config`: a config.json dict, a path to one or to a model directory, or a transformers
    config. `gpu`: a known card name (see KNOWN_GPUS), a memory size ("24GiB", "80GB", bytes), or
    "embedded"/"cpu" for this toolkit's CPU engine (then see `plan_embedded`). `dtype` defaults to
    bfloat16. `memory_fraction` is TGI's --cuda-memory-fraction; `overhead_bytes` the fixed reserve
    per GPU (default 1 GiB). `prompt_tokens`/`output_tokens` describe the workload whose
    concurrent users are counted; without them the plan uses TGI's default lengths.

    `wiggle_room` is TGI's TGI_WIGGLE_ROOM (0.90). `block_size` is the KV block (TGI: 1 with
    flashinfer, 16 paged, 256 flashdecoding). To predict vLLM instead, pass
    `memory_fraction=<gpu_memory_utilization, 0.9>`, `wiggle_room=1.0`, `block_size=16`.
    """
    check_arguments(gpu, dtype=dtype, kv_cache_dtype=kv_cache_dtype, num_shard=num_shard,
                    memory_fraction=memory_fraction, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                    max_input_tokens=max_input_tokens, max_total_tokens=max_total_tokens,
                    max_batch_prefill_tokens=max_batch_prefill_tokens)
    if isinstance(gpu, str) and gpu.strip().lower() in EMBEDDED_GPU_NAMES:
        return plan_embedded(model_config, dtype=dtype, quantize=quantize, memory_fraction=memory_fraction,
                             prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                             max_input_tokens=max_input_tokens, max_total_tokens=max_total_tokens,
                             max_batch_prefill_tokens=max_batch_prefill_tokens, model_id=model_id)
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    card = resolve_gpu(gpu)
    dtype = canonical_dtype(dtype or "bfloat16")
    check_positive("block_size", block_size)
    if not 0 < float(wiggle_room) <= 1:
        raise ValueError(f"wiggle_room must be in (0, 1]; got {wiggle_room!r}")
    scheme = quant_scheme(quantize, shape.quantization_config)
    quantize = scheme.name if scheme else None
    if quantize == "exl2" and num_shard > 1:
        raise ValueError("quantize 'exl2' does not support num_shard > 1 (TGI's launcher refuses it)")
    known_input, known_total = known_lengths(prompt_tokens, output_tokens, max_input_tokens, max_total_tokens,
                                              max_batch_prefill_tokens)
    default_prefill, default_steps = launcher_max_batch_prefill_tokens(
        shape.config or None, gpu_fp16_flops=GPU_FP16_FLOPS.get(card.name), gpu_memory_bytes=card.memory_bytes,
        num_shard=num_shard, cuda_memory_fraction=float(memory_fraction))
    prefill, prefill_notes = prefill_budget(max_batch_prefill_tokens, default_prefill, default_steps, known_input,
                                             chunking)
    model = model_id or shape.name

    warnings: list[str] = []
    if dtype == "float32":
        warnings.append("TGI's --dtype takes float16 or bfloat16 only; float32 is planned but cannot be launched")
    if dtype == "bfloat16" and not card.bf16 and not quantize:
        warnings.append(f"{card.name} has no native bfloat16; use dtype float16")
    if (quantize == "fp8" or kv_cache_dtype) and not card.fp8:
        warnings.append(f"{card.name} has no FP8 tensor cores: fp8 runs through weight-only kernels, slower")
    if scheme and scheme.needs_prequantized and str((shape.quantization_config or {}).get("quant_method", "")
                                                    ).lower() != quantize:
        warnings.append(f"quantize {quantize!r} needs a checkpoint already quantized with it")
    if shape.num_kv_heads % num_shard and shape.num_kv_heads > num_shard:
        warnings.append(f"{shape.num_kv_heads} KV heads do not split evenly over {num_shard} shards")
    if shape.num_heads % num_shard:
        warnings.append(f"{shape.num_heads} attention heads do not split evenly over {num_shard} shards; "
                        "TGI will refuse this sharding")

    steps = [f"Model: {shape.describe()}", _parameter_step(shape)]
    memory, weights_note = ModelMemory.of(shape, model, dtype=dtype, quantize=quantize, kv_cache_dtype=kv_cache_dtype,
                                          num_shard=num_shard)
    per_shard = memory.weight_bytes_per_shard
    sharded = f"; per shard / {num_shard} = {gib(per_shard)}" if num_shard > 1 else ""
    steps.append(f"Weights: {weights_note}{sharded}")
    steps.append(_kv_step(shape, dtype, kv_cache_dtype, num_shard))
    steps += prefill_notes

    usable = int(card.memory_bytes * memory_fraction * wiggle_room)
    reserve = card.memory_bytes - usable
    steps.append(f"Left out of the KV cache by TGI's warm-up: (1 - {memory_fraction:g} memory fraction x "
                 f"{wiggle_room:g} wiggle room) x {gib(card.memory_bytes)} ({card.name}) = {gib(reserve)}")
    overhead = DEFAULT_OVERHEAD_BYTES if overhead_bytes is None else int(overhead_bytes)
    act_per_token = activation_bytes_per_token(shape, dtype, num_shard)
    activation = prefill * act_per_token
    per_block = memory.kv_bytes_per_token * block_size
    requests = warmup_requests(prefill, known_input, known_total)
    warm_blocks = warmup_blocks(requests, block_size)
    warm_bytes = warm_blocks * per_block
    free = card.memory_bytes - per_shard - overhead - activation - warm_bytes
    steps.append(f"Free after weights and warm-up: {gib(card.memory_bytes)} - {gib(per_shard)} weights - "
                 f"{gib(overhead)} fixed (CUDA context, workspaces) - {gib(activation)} prefill activations "
                 f"({num(prefill)} max_batch_prefill_tokens x {num(act_per_token)} B) - {gib(warm_bytes)} KV of the "
                 f"warm-up batch ({len(requests)} request(s), {num(warm_blocks)} blocks) = {gib(free)}")
    budget = usable - per_shard - overhead - activation  # the KV space, warm-up blocks included
    kv_free = max(0, free - reserve)
    if budget >= warm_bytes:
        tokens = kv_capacity_tokens(kv_free, per_block, block_size, warm_blocks)
    else:  # TGI's warm-up itself runs out of memory here; count what fits, the plan will not
        tokens = max(budget, 0) // per_block * block_size
        if budget > 0:
            warnings.append(f"the warm-up batch's KV ({gib(warm_bytes)}) does not fit: TGI fails its warm-up; "
                            "lower max_batch_prefill_tokens")
    steps.append(f"KV blocks: floor(max(0, {gib(free)} - {gib(reserve)}) / {num(per_block)} B per "
                 f"{block_size}-token block) + {num(warm_blocks)} warm-up blocks; max_batch_total_tokens = blocks x "
                 f"{block_size} = **{num(tokens)}**" + (" (the weights do not fit)" if budget <= 0 else ""))
    lengths = request_limits(shape, prompt_tokens, output_tokens, known_input, known_total, prefill, chunking=chunking,
                       kv_capacity_tokens=tokens, warmup_prompt_tokens=sum(p for p, _ in requests), prefill_notes=[])
    steps += [n for n in lengths.notes if not n.startswith("warning: ")]

    hardware = Hardware(server="tgi", gpu=card.name, gpu_memory_bytes=card.memory_bytes, num_shard=num_shard,
                        memory_fraction=float(memory_fraction), wiggle_room=float(wiggle_room), block_size=block_size,
                        usable_bytes=usable, overhead_bytes=overhead, activation_bytes=activation,
                        kv_budget_bytes=budget)
    result = _finish(shape, memory, hardware, lengths, tokens, steps=steps, warnings=warnings, chunking=chunking)
    if not result.fits and _suggest:
        suggestions = _suggestions(shape, card, dtype=dtype, quantize=quantize, kv_cache_dtype=kv_cache_dtype,
                                   num_shard=num_shard, memory_fraction=memory_fraction, lengths=lengths,
                                   overhead_bytes=overhead_bytes, wiggle_room=wiggle_room, block_size=block_size,
                                   chunking=chunking)
        result = replace(result, suggestions=tuple(suggestions))  # a new plan: the one built stays as it was
    return result


def _suggestions(shape: ModelShape, card: Gpu, *, quantize: str | None, num_shard: int, lengths: Lengths,
                 **kwargs: object) -> list[str]:
    """Alternatives that fit: a quantization, or more shards (powers of two up to 8)."""
    common = dict(prompt_tokens=lengths.prompt, output_tokens=lengths.output,
                  max_input_tokens=lengths.max_input, max_total_tokens=lengths.max_total,
                  max_batch_prefill_tokens=lengths.prefill, _suggest=False, **kwargs)
    out = []
    for method in _SUGGESTED_QUANTIZATION:
        if method == quantize or (method == "fp8" and not card.fp8):
            continue
        alt = plan(shape, card, quantize=method, num_shard=num_shard, **common)
        if alt.fits:
            need = " (needs an AWQ checkpoint)" if method == "awq" else ""
            out.append(f"--quantize {method}{need}: weights {gib(alt.model.weight_bytes_per_shard)} per shard, "
                       f"max_batch_total_tokens {num(alt.capacity.kv_capacity_tokens)}, "
                       f"{num(alt.capacity.concurrent_users)} users")
            break
    for shards in (2, 4, 8):
        if shards <= num_shard or shape.num_heads % shards:
            continue
        alt = plan(shape, card, quantize=quantize, num_shard=shards, **common)
        if alt.fits:
            out.append(f"--num-shard {shards} ({shards} x {card.name}): weights "
                       f"{gib(alt.model.weight_bytes_per_shard)} per shard, max_batch_total_tokens "
                       f"{num(alt.capacity.kv_capacity_tokens)}, {num(alt.capacity.concurrent_users)} users")
            break
    if not out:
        out.append("nothing tried fits (4-bit quantization, up to 8 shards); use a larger GPU or a smaller model")
    return out


def plan_embedded(model_config: ModelShape | ModelConfigSource, *, dtype: str | None = None,
                  quantize: str | None = None, memory_fraction: float = 1.0, prompt_tokens: int | None = None,
                  output_tokens: int | None = None, max_input_tokens: int | None = None,
                  max_total_tokens: int | None = None, max_batch_prefill_tokens: int | None = None,
                  model_id: str | None = None, env: Mapping[str, str] | None = None) -> Plan:
    """Predict what the embedded CPU engine logs as "Setting max batch total tokens to N".

    The engine follows TGI 3 (tgi_toolkit.config.scheduling and its neighbours, the same functions): its scheduling mode
    from ATTENTION / PREFIX_CACHING / PREFILL_CHUNKING in `env` (None: this process's environment), a
    fixed KV space of TGI_TOOLKIT_KV_CACHE_GIB (default 2) GiB x --cuda-memory-fraction in whole blocks
    (keys and values in the model dtype whatever --quantize says), TGI's warm-up defaults for
    max_total_tokens / max_input_tokens and the launcher's default max_batch_prefill_tokens (no GPU:
    4096, capped at the context). `dtype` None is the engine's own default on this machine: bfloat16
    where the CPU computes in it, else float32. Raises ValueError where the engine refuses to start.
    """
    from tgi_toolkit.config.embedded import cpu_has_bf16
    from tgi_toolkit.config.scheduling_mode import resolve_mode

    env = os.environ if env is None else env
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    dtype = canonical_dtype(dtype or ("bfloat16" if cpu_has_bf16() else "float32"))
    if isinstance(memory_fraction, bool) or not 0 < float(memory_fraction) <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1]; got {memory_fraction!r}")
    scheme = quant_scheme(quantize, shape.quantization_config)
    quantize = scheme.name if scheme else None
    mode = resolve_mode(env, model_config=shape.config or None)
    known_input, known_total = known_lengths(prompt_tokens, output_tokens, max_input_tokens, max_total_tokens,
                                              max_batch_prefill_tokens)
    default_prefill, default_steps = launcher_max_batch_prefill_tokens(shape.config or None, gpu_fp16_flops=None)
    prefill, notes = prefill_budget(max_batch_prefill_tokens, default_prefill, default_steps, known_input,
                                     mode.chunking)
    warnings = []
    if dtype == "float32":
        warnings.append("the engine runs float32 by default on CPUs without native bfloat16; "
                        "its --dtype takes float16 or bfloat16 only")
    steps = [f"Model: {shape.describe()}", _parameter_step(shape)]
    memory, weights_note = ModelMemory.of(shape, model_id or shape.name, dtype=dtype, quantize=quantize,
                                          kv_cache_dtype=None, num_shard=1)
    steps.append(f"Weights (in RAM, outside the KV space): {weights_note}")
    steps.append(_kv_step(shape, dtype, None, 1))
    steps.append(f"Scheduling: attention {mode.attention} (block size {mode.block_size}), prefix caching "
                 f"{'on' if mode.prefix_caching else 'off'}, prefill chunking {'on' if mode.chunking else 'off'}")
    steps += notes
    notes = []
    per_token = memory.kv_bytes_per_token
    budget = embedded_kv_bytes(env, float(memory_fraction))
    capacity = kv_capacity_tokens(budget, per_token * mode.block_size, mode.block_size)
    if max_batch_prefill_tokens is None and prefill > capacity:
        # The router refuses a prefill budget above the KV capacity (L4): the plan recommends one that fits.
        prefill = max(capacity, 1) if mode.chunking else max(capacity, known_input or 0)
        steps.append(f"max_batch_prefill_tokens capped at the KV capacity {num(capacity)} (TGI's router refuses "
                     "a larger one)")
    limits = derive_limits(kv_bytes=budget, bytes_per_block=per_token * mode.block_size, block_size=mode.block_size,
                           chunking=mode.chunking, max_batch_prefill_tokens=prefill, max_input_tokens=known_input,
                           max_total_tokens=known_total, max_position_embeddings=shape.max_position_embeddings)
    tokens = limits.max_batch_total_tokens
    steps.append(f"KV space: TGI_TOOLKIT_KV_CACHE_GIB {budget / memory_fraction / GiB:g} GiB x {memory_fraction:g} "
                 f"cuda_memory_fraction = {num(budget)} B")
    steps.append(f"max_batch_total_tokens = floor({num(budget)} B / {num(per_token * mode.block_size)} B per "
                 f"{mode.block_size}-token block) x {mode.block_size} = **{num(tokens)}**")
    if prompt_tokens is not None:
        notes.append(f"max_total_tokens {num(limits.max_total_tokens)} and max_input_tokens "
                     f"{num(limits.max_input_tokens)} from the workload")
    else:
        notes.append(f"max_total_tokens {num(limits.max_total_tokens)}, max_input_tokens {num(limits.max_input_tokens)}"
                     + (" (TGI 3's warm-up defaults)" if known_total is None else ""))
    lengths = Lengths(limits.max_input_tokens, limits.max_total_tokens, prefill, prompt_tokens, output_tokens, notes)
    steps += notes
    hardware = Hardware(server="embedded", gpu="embedded CPU engine", gpu_memory_bytes=budget, num_shard=1,
                        memory_fraction=float(memory_fraction), wiggle_room=1.0, block_size=mode.block_size,
                        usable_bytes=budget, overhead_bytes=0, activation_bytes=0, kv_budget_bytes=budget)
    return _finish(shape, memory, hardware, lengths, tokens, steps=steps, warnings=warnings, chunking=mode.chunking)
