# %% [markdown]
# # 1. Configure and launch a text-generation server
#
# A server's launcher settings decide how many requests it batches, how long a prompt may be, and
# how much memory the KV cache gets; most latency and throughput trade-offs of the later notebooks
# come from these few knobs. This notebook builds a `LauncherConfig` (every `text-generation-launcher`
# option, checked the way TGI checks it), shows the exact command for TGI, TGI in Docker and vLLM,
# launches a server with it, reads back what the server decided at start-up, and asks it a question.
#
# By default the server is this package's **embedded engine**: a TGI-compatible HTTP server running
# SmolLM2-135M-Instruct on the CPU, with TGI's flags and batching rules. Set `backend` to `"tgi"`,
# `"tgi-docker"` or `"vllm"` where those are installed: the same cells run unchanged.

# %% tags=["parameters"]
backend = "embedded"  # embedded | tgi | tgi-docker | vllm
model_id = None  # None: the default model (SmolLM2-135M-Instruct for the embedded engine)
max_input_tokens = 1024  # longest prompt accepted
max_total_tokens = 1536  # prompt + generated tokens of one request
max_batch_prefill_tokens = None  # None: the launcher's FLOPs formula (4096 where the card is unknown, as here)
cuda_memory_fraction = 1.0  # share of the KV memory (embedded engine: of TGI_TOOLKIT_KV_CACHE_GIB, default 2 GiB)
max_batch_size = 8  # None: no limit beyond the token budgets
max_concurrent_requests = 128
waiting_served_ratio = 0.3
max_waiting_tokens = 20
quantize = None  # e.g. "bitsandbytes", "eetq" (the embedded engine: int8/nf4/fp4 on the CPU)
dtype = None  # None: bfloat16 where the CPU computes in it, else float32 (GPU: float16/bfloat16)
question = "What is the capital of France?"
max_new_tokens = 48
show_form = True  # the ipywidgets form (needs a front-end to be useful; harmless headless)
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %%
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

from tgi_toolkit.config import LauncherConfig, to_vllm_args
from tgi_toolkit.server import Server

# %% [markdown]
# ## The knobs, and what each one does
#
# | knob | why it matters | TGI flag (env) | vLLM counterpart |
# |---|---|---|---|
# | `max_input_tokens` | longest prompt; without prefill chunking a prompt must also fit `max_batch_prefill_tokens` whole | `--max-input-tokens` (`MAX_INPUT_TOKENS`) | none: prompt + output must fit `--max-model-len` |
# | `max_total_tokens` | a request's memory budget (prompt + output): larger values mean fewer requests fit in the KV cache | `--max-total-tokens` | `--max-model-len` |
# | `max_batch_prefill_tokens` | prompt tokens one forward may compute: bounds the prefill's memory and how long running requests wait for it; with chunking (TGI 3's default) a longer prompt is cut in chunks. Default: the launcher's FLOPs formula (4096 where the card is unknown), capped by the context | `--max-batch-prefill-tokens` | `--max-num-batched-tokens` (counts decode tokens too) |
# | `max_batch_total_tokens` | the KV-cache capacity in tokens: how many tokens all running requests may hold together, hence how many requests run at once on either path. TGI 3 infers it from the KV memory (on a GPU what warm-up leaves of `--cuda-memory-fraction` of it; on the embedded engine `TGI_TOOLKIT_KV_CACHE_GIB`, default 2, GiB x `--cuda-memory-fraction`, in whole blocks); a given value is ignored with TGI's "deprecated" warning | `--max-batch-total-tokens` (ignored); set the memory with `--cuda-memory-fraction` | derived from `--gpu-memory-utilization` |
# | `max_batch_size` | on the older path (`PREFILL_CHUNKING=0`), most requests in one batch; on TGI 3's default path it caps only the group admitted when the server is idle, and a running batch grows past it (`03_sweep` shows both) | `--max-batch-size` | `--max-num-seqs` |
# | `waiting_served_ratio`, `max_waiting_tokens` | on the older path only (TGI 3 ignores them with chunking): when waiting requests may interrupt the running batch with a prefill; low values favour TTFT, high values the running requests' ITL | same names | no equivalent (vLLM's scheduler always mixes) |
# | `quantize`, `dtype` | weight format: less memory for weights leaves more for the KV cache, but is not always faster | `--quantize`, `--dtype` | `--quantization`, `--dtype` |
# | `max_concurrent_requests` | requests accepted at once; beyond it the server answers 429 instead of queueing | `--max-concurrent-requests` | none (vLLM queues everything) |
#
# Settings left at `None` take TGI's defaults, which depend on the model (see the resolved values
# after launch below).

# %%
settings = dict(model_id=model_id, max_input_tokens=max_input_tokens, max_total_tokens=max_total_tokens,
                max_batch_prefill_tokens=max_batch_prefill_tokens, cuda_memory_fraction=cuda_memory_fraction,
                max_batch_size=max_batch_size, max_concurrent_requests=max_concurrent_requests,
                waiting_served_ratio=waiting_served_ratio, max_waiting_tokens=max_waiting_tokens,
                quantize=quantize, dtype=dtype)
config = LauncherConfig(**{k: v for k, v in settings.items() if v is not None})
config.to_dict(non_default_only=True)

# %% [markdown]
# ## The same settings as a command
#
# TGI's launcher, TGI's Docker image and vLLM take these settings under different names. The vLLM
# mapping also lists what has no counterpart, and why: check it before comparing the two servers.

# %%
vllm = to_vllm_args(config)
print("text-generation-launcher " + " ".join(config.to_cli()))
print()
print(" ".join(config.docker_command()))
print()
print(" ".join(vllm.argv))
for field, why in {**vllm.unmapped, **vllm.notes}.items():
    print(f"  {field}: {why}")

# %% [markdown]
# ## The launcher form
#
# The form below holds every launcher option in groups, checks each value as you type (the same
# rules as TGI: for example `max_input_tokens` must be below `max_total_tokens`) and shows the command
# it would run. `form.config` is the `LauncherConfig` it holds; pass it to `Server` as below.

# %% tags=["nbval-ignore-output"]
if show_form:
    from tgi_toolkit.config.widgets import launcher_form

    form = launcher_form(config, target=backend if backend in ("embedded", "tgi", "tgi-docker", "vllm") else "embedded")
    display(form)

# %% [markdown]
# ## Launch
#
# `Server` starts the process, waits until `/health` answers, and keeps its log. It stops the server
# when you call `stop()` (or at the end of a `with Server(...)` block, or when Python exits).

# %% tags=["nbval-ignore-output"]
server = Server(config, backend=backend).start()
info = server.info()
{k: info.get(k) for k in ("model_id", "model_dtype", "max_input_tokens", "max_total_tokens",
                          "max_batch_prefill_tokens", "max_batch_total_tokens", "max_batch_size")}

# %% [markdown]
# ## What the server decided at start-up
#
# `max_batch_total_tokens` is the server's KV-cache capacity: TGI 3 infers it during warm-up (what is
# left of `--cuda-memory-fraction` of the GPU memory after the weights and a prefill of
# `max_batch_prefill_tokens`) and ignores a value given on the command line, vLLM logs it as its
# KV-cache size, and the embedded engine divides its KV memory, `TGI_TOOLKIT_KV_CACHE_GIB` (default 2)
# GiB x `--cuda-memory-fraction`, by the bytes one block of tokens' keys and values takes. The
# capacity planner predicts it before launching; its `explain()` shows each step. Capacity /
# `max_total_tokens` is how many worst-case requests fit at once.

# %%
from tgi_toolkit.planner import compare, parse_reported_capacity

reported = parse_reported_capacity("\n".join(server.logs(None)))
print("reported by the server:", reported.kv_capacity_tokens, "tokens")
if backend == "embedded":
    from tgi_toolkit.models.files import converted_model_dir, resolve_model
    from tgi_toolkit.planner import plan_embedded

    source = resolve_model(config.model_id)
    model_dir = converted_model_dir(source) if source.gguf_file else source.path
    plan = plan_embedded(model_dir, dtype=info.get("model_dtype"), max_input_tokens=info["max_input_tokens"],
                         max_total_tokens=info["max_total_tokens"], memory_fraction=config.cuda_memory_fraction)
    print(f"planned: {plan.capacity.kv_capacity_tokens} tokens (error {compare(plan, reported):+.1%})")
    print(plan.explain())

# %% [markdown]
# ## Ask a question
#
# A streaming chat request on the OpenAI route; the time to first token (TTFT) includes the prompt's
# prefill, the rest of the time is decoding one token after another.

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.quickstart import ask

answer = ask(server.url, question, max_tokens=max_new_tokens)
print(f"Q: {question}\nA: {answer.text}")
print(f"TTFT {answer.ttft_s * 1000:.0f} ms, {answer.tokens} chunks in {answer.total_s:.2f} s")

# %% tags=["nbval-ignore-output"]
print("\n".join(server.logs(8)))
server.stop()

# %% [markdown]
# Next: `02_benchmark` measures this server under load, the way `text-generation-benchmark` and
# happy_vllm's benchmark do.
