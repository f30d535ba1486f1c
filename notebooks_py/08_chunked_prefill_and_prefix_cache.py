# %% [markdown]
# # 8. Chunked prefill and the prefix cache (TGI 3 scheduling)
#
# TGI 3 schedules a batch differently from the TGI 2 most tuning advice was written for. Two behaviours
# change what users see, and this notebook measures both on the embedded engine, which follows TGI
# 3.1.1 to 3.3.7's rules (the v3 router's queue, radix cache and block allocator, and the shard's chunk sizing):
#
# - **Chunked prefill** (TGI >= 2.4, PR #2600; the default in 3.x with `flashinfer` or `flashdecoding`
#   attention, i.e. CUDA GPUs of compute capability 8.0 and up). A new prompt joins the running batch
#   in chunks: each forward computes at most `max_batch_prefill_tokens` tokens, one token for every
#   running request and the rest from the prompt, so the running streams keep getting tokens while a
#   long prompt is read. Prompts longer than `max_batch_prefill_tokens` are accepted (cut into chunks),
#   and `waiting_served_ratio` and `max_waiting_tokens` are ignored.
# - **Prefix caching** (the v3 router's radix cache, TGI >= 2.3, PRs #2392/#2402; on by default in 3.x
#   with `flashinfer` (block size 1: any prefix length) or `flashdecoding` (256-token blocks); off with
#   `paged` attention). The KV of a finished request's prompt stays in a cache; a later prompt that
#   starts with it (a system prompt, a document, the history of a conversation) computes only the rest.
#   Only finished requests fill it, and only their prompts (never generated tokens).
# - **The older, non-chunking path** is what TGI runs with `PREFILL_CHUNKING=0`, with `ATTENTION=paged`
#   (no CUDA, GPUs below sm 8.0, TGI's AMD image), with any speculation (Medusa, MLP, n-gram), and for
#   Gemma3, Qwen2-VL, Qwen2.5-VL and Mllama: new requests are prefilled alone while the running batch
#   waits, `waiting_served_ratio`/`max_waiting_tokens` decide when, and a prompt must fit
#   `max_batch_prefill_tokens` whole (TGI refuses to start if `max_input_tokens` is larger).
#
# How to switch, on TGI and on the embedded engine alike (environment variables, as TGI reads them):
#
# | variable | values | what it does |
# |---|---|---|
# | `ATTENTION` | `flashinfer` (default, sm >= 8), `flashdecoding`, `paged` | KV block size 1 / 256 / 16; `paged` turns off both features |
# | `PREFIX_CACHING` | `1` (default), `0` | the radix prefix cache |
# | `PREFILL_CHUNKING` | `1` (default), `0` | chunked prefill (off: the older path) |
#
# `docker run -e PREFILL_CHUNKING=0 ...`, or exported before `text-generation-launcher` (it passes its
# environment to the shards); here `Server(config, env={"PREFILL_CHUNKING": "0"})`.

# %% tags=["parameters"]
streams = 4  # requests decoding when the long prompt arrives
long_prompt = 512  # tokens of the prompt that joins them
stream_tokens = 48  # tokens each stream generates: they must outlast the long prompt's prefill
chunk_tokens = 64  # max_batch_prefill_tokens of the chunked server: prompt tokens one forward computes at most
repeats = 1  # measured rounds per server (after one warm-up round)
system_tokens = 384  # the system prompt every request repeats
requests_per_group = 3  # requests sharing it: the first computes it, the later ones find it cached
question_tokens = 16  # tokens each request (and each conversation turn) adds
max_new_tokens = 8
turns = 3  # turns of each conversation (each resends the history)
output_dir = None  # None: out/08_chunked_prefill_and_prefix_cache/results in the checkout
progress = True
plotly_renderer = None  # None: plotly's choice for your front-end; "plotly_mimetype" keeps saved notebooks small

# %% tags=["nbval-ignore-output"]
import plotly.io as pio

if plotly_renderer:
    pio.renderers.default = plotly_renderer

import contextlib

import pandas as pd

from tgi_toolkit import plots
from tgi_toolkit.bench import run_decode_stall, run_multi_turn, run_shared_prefix
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.cookbook import out_dir
from tgi_toolkit.server import Server

output_dir = output_dir or str(out_dir("08_chunked_prefill_and_prefix_cache", "results"))
longest = max(long_prompt, system_tokens + question_tokens + (turns - 1) * (max_new_tokens + question_tokens))
limits = {"max_input_tokens": longest, "max_total_tokens": longest + max(stream_tokens, max_new_tokens, 4)}
# TGI 3's default: the chunk budget may be far below the longest prompt.
chunked = LauncherConfig(**limits, max_batch_prefill_tokens=chunk_tokens)
# The older path prefills a prompt whole: its budget must hold the longest one (TGI's start-up check).
unchunked = LauncherConfig(**limits, max_batch_prefill_tokens=longest)
CHUNKED = f"chunked, {chunk_tokens}-token budget"
UNCHUNKED = "PREFILL_CHUNKING=0"


def mode_lines(server):
    # what the engine logged about its scheduling mode at start-up
    return [line.split(": ", 1)[-1] for line in server.logs(None)
            if "chunking" in line.lower() or "prefix" in line.lower()]


stack = contextlib.ExitStack()
server = stack.enter_context(Server(chunked, startup_progress=progress))
print("\n".join(mode_lines(server)))
print("results go to", output_dir)

# %% [markdown]
# ## Chunked prefill: the running streams keep flowing
#
# `run_decode_stall` starts `streams` requests; when each has a few tokens, one prompt of
# `long_prompt` tokens arrives. Every gap between two tokens of a running stream, from that moment to
# the long prompt's first token, is a stall the stream's user saw. Each server gets one warm-up round,
# then `repeats` measured rounds with fresh prompts (so no cache hides the prefill).

# %% tags=["nbval-ignore-output"]
stall = {CHUNKED: run_decode_stall(server, streams=streams, long_prompt=long_prompt, stream_tokens=stream_tokens,
                                   repeats=repeats, output=output_dir, progress=progress)}
with Server(unchunked, env={"PREFILL_CHUNKING": "0"}, startup_progress=progress) as older:
    print("\n".join(mode_lines(older)))
    stall[UNCHUNKED] = run_decode_stall(older, streams=streams, long_prompt=long_prompt, stream_tokens=stream_tokens,
                                        repeats=repeats, output=output_dir, progress=progress)
summary = plots.label_sets({name: r.points for name, r in stall.items()})
summary[["config_label", "stall_max_gap_s", "stall_p99_gap_s", "stall_baseline_gap_s", "long_prompt_ttft_s"]]

# %% [markdown]
# **How to read it**: each marker is one gap between two tokens of a running stream, placed at the
# later token's arrival; 0 is when the long prompt was sent, and the dashed line of each colour its
# first token. Without chunking, the streams wait out the whole prefill of the long prompt: one tall gap
# per stream (and, since TGI waits for `max_waiting_tokens` decode steps before prefilling a lone new
# request, the long prompt's first token comes late too). With chunking, every forward carries one
# chunk of at most `chunk_tokens` tokens beside the streams' tokens: more, shorter gaps, the largest
# about one chunk's forward.

# %% tags=["nbval-ignore-output"]
plots.decode_stall(plots.label_sets({name: r.requests for name, r in stall.items()}))

# %% tags=["nbval-ignore-output"]
plots.decode_stall_summary(summary)

# %% tags=["nbval-ignore-output"]
from tgi_toolkit.cookbook import check

largest = summary.set_index("config_label")["stall_max_gap_s"]
check("with chunking, the largest gap a running stream saw is shorter than without",
      largest[CHUNKED] < largest[UNCHUNKED], largest.to_dict(), busy=summary["machine_busy"].fillna(False).any())

# %% [markdown]
# ## The prefix cache: a repeated system prompt
#
# `run_shared_prefix` sends `requests_per_group` requests that all start with the same system prompt of
# `system_tokens` tokens and add `question_tokens` of their own. The first is sent alone; the others
# after it ended, because TGI fills its cache only when a request finishes (two requests in flight at
# once share nothing). `prefix_cache_hit_rate` is the share of prompt tokens the cache served, from the
# engine's own counters (`tgi_toolkit_prefix_cache_*` in `/metrics`; TGI has no such counters, so it is
# NaN there and the cache shows only in TTFT).

# %% tags=["nbval-ignore-output"]
shared = run_shared_prefix(server, groups=1, requests_per_group=requests_per_group, prefix_tokens=system_tokens,
                           suffix_tokens=question_tokens, max_new_tokens=max_new_tokens, users=1,
                           output=output_dir, progress=progress)
rate = shared.points["prefix_cache_hit_rate"].iloc[0]
print(f"prefix-cache hit rate: {rate:.2f} (at best {(requests_per_group - 1) * system_tokens} of "
      f"{requests_per_group * (system_tokens + question_tokens)} prompt tokens)")
plots.shared_prefix_ttft(shared.requests)

# %% tags=["nbval-ignore-output"]
measured = shared.requests[~shared.requests["warmup"] & shared.requests["error"].isna()]
ttft_by_turn = measured.groupby("turn")["ttft_s"].median()  # turn 0: the group's first request
first = ttft_by_turn.index.min()
check("the later requests, which find the system prompt cached, have a shorter TTFT than the first",
      rate > 0 and (ttft_by_turn.drop(first) < ttft_by_turn[first]).all(), ttft_by_turn.to_dict(),
      busy=rate > 0 and shared.points["machine_busy"].fillna(False).any())

# %% [markdown]
# **How to read it**: the first request computes all `system_tokens + question_tokens` tokens; the later
# ones only their `question_tokens`, so their TTFT is a fraction of it. On a GPU the same holds, with
# far larger prompts: a cached 1,000-token system prompt is the difference between one prefill forward
# and a few tokens.
#
# ## Conversations: each turn resends the history
#
# A chat client sends the whole conversation every turn. With the cache, turn t finds turn t-1's prompt
# and computes only the last answer and the new message, so TTFT stays flat while the prompt grows.

# %% tags=["nbval-ignore-output"]
chat = run_multi_turn(server, conversations=2, turns=turns, user_tokens=question_tokens,
                      max_new_tokens=max_new_tokens, system_tokens=system_tokens, output=output_dir,
                      progress=progress)
print(f"prefix-cache hit rate: {chat.points['prefix_cache_hit_rate'].iloc[0]:.2f}")
print(chat.requests.groupby("turn")[["prompt_tokens", "ttft_s"]].median())
plots.ttft_by_turn(chat.requests)

# %%
stack.close()  # stops the server this notebook launched
