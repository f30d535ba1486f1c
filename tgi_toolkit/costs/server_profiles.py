"""Which server a GPU prediction stands for: the host (CPU) time each server generation adds to a forward,
and how it schedules (TGI 3 and vLLM V1 chunk prompts into the running batch; the older ones prefill a
newcomer in a forward of its own).

A forward's kernel time transfers across servers (the same GPU reads the same weights); the host time does
not: it is the Python or Rust loop around the kernels, which each generation rewrote. So each profile has
its own three host terms, fitted to the published figures of that server (benchmarks/gpu_accuracy.py) and
bounded by HOST_BOUNDS so a server with few figures cannot wander off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOST_TERMS = ("forward_overhead_s", "row_overhead_s", "host_token_s", "request_overhead_s", "allreduce_latency_s")
HOST_HELP = {
    "forward_overhead_s": "host seconds every forward costs beyond its kernels (scheduling, launches, sampling)",
    "row_overhead_s": "host seconds per sequence in a forward (per-row bookkeeping and input preparation)",
    "host_token_s": "host seconds per token a forward computes (prompt tokenization and per-token inputs)",
    "request_overhead_s": "seconds from a request's arrival to its joining the queue (HTTP, validation, tokenizer)",
    "allreduce_latency_s": "seconds per tensor-parallel all-reduce whatever its size (the runtime's collective: "
                           "NCCL launched eagerly, or a custom all-reduce in a CUDA graph)",
}
# Host time is at least microseconds and at most tens of milliseconds on any server measured; an all-reduce
# inside a node takes from a few microseconds (custom, graphed) to a few hundred (eager NCCL).
HOST_BOUNDS = {"forward_overhead_s": (1e-4, 30e-3), "row_overhead_s": (1e-6, 300e-6),
               "host_token_s": (1e-7, 30e-6), "request_overhead_s": (1e-4, 0.2),
               "allreduce_latency_s": (5e-6, 500e-6)}


@dataclass(frozen=True)
class ServerProfile:
    name: str  # the --server value
    label: str
    chunking: bool  # prompts join the running batch's forward (TGI 3, vLLM V1) or run alone (older)
    versions: str  # which releases the profile stands for
    forward_overhead_s: float  # starting point of the fit (the prior), replaced by the fitted value
    row_overhead_s: float
    host_token_s: float
    request_overhead_s: float
    allreduce_latency_s: float
    # vLLM V0 prefills whatever waits before the next decode step ("prefill first"): TGI's older path does
    # the same with waiting_served_ratio 0; None keeps TGI's own rule
    waiting_served_ratio: float | None = None

    def host(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in HOST_TERMS}


# Priors: a few milliseconds a forward for a Python engine loop, less with CUDA graphs and a Rust router.
SERVERS: dict[str, ServerProfile] = {p.name: p for p in (
    ServerProfile("tgi-3", "TGI 3", True, ">= 3.0", 2e-3, 20e-6, 2e-6, 5e-3, 25e-6),
    ServerProfile("tgi-2", "TGI 2", False, "2.x", 3e-3, 20e-6, 2e-6, 5e-3, 25e-6),
    ServerProfile("tgi-1", "TGI 1", False, "1.x and 0.9", 5e-3, 30e-6, 3e-6, 5e-3, 50e-6),
    # vLLM ran every forward eagerly until CUDA graphs came in 0.2.7 (PR #1926, merged 2023-12-17); its priors
    # are TGI 1's, the other eager Python loop of that year
    ServerProfile("vllm-eager", "vLLM before CUDA graphs (< 0.2.7)", False, "< 0.2.7", 5e-3, 30e-6, 3e-6, 5e-3,
                  50e-6, 0.0),
    ServerProfile("vllm-v0", "vLLM V0 (0.2.7 to 0.5)", False, ">= 0.2.7, < 0.6", 4e-3, 40e-6, 5e-6, 10e-3, 25e-6,
                  0.0),
    # 0.6 moved the API server to its own process and overlapped output processing with the GPU: the vLLM
    # team's own post on 0.6.0 puts most of its 2.7x throughput on the host's time
    ServerProfile("vllm-v0.6", "vLLM V0 (0.6, 0.7)", False, ">= 0.6, < 0.8, or VLLM_USE_V1=0", 2e-3, 20e-6, 2e-6,
                  5e-3, 25e-6, 0.0),
    ServerProfile("vllm-v1", "vLLM V1", True, ">= 0.8", 2e-3, 15e-6, 2e-6, 5e-3, 25e-6),
    ServerProfile("tensorrt-llm", "TensorRT-LLM", True, "any (C++ runtime)", 1e-3, 5e-6, 1e-6, 2e-3, 15e-6),
    ServerProfile("sglang", "SGLang", True, "any", 2e-3, 15e-6, 2e-6, 5e-3, 25e-6),
    ServerProfile("lmdeploy", "LMDeploy (TurboMind)", True, "any", 1e-3, 5e-6, 1e-6, 2e-3, 15e-6),
)}
DEFAULT_SERVER = "tgi-3"


def server_profile(name: str) -> ServerProfile:
    """The profile called `name`; a ValueError naming the allowed values otherwise."""
    if name not in SERVERS:
        raise ValueError(f"server {name!r} is not a server profile; use one of {', '.join(SERVERS)}")
    return SERVERS[name]


# When a version is not stated (or is a build of a main branch), the source's date says which generation ran:
# TGI 2.0 was released on 2024-04-12 and 3.0 on 2024-12-10; vLLM 0.6.0 on 2024-09-05, and it made V1 its
# default in 0.8.0 (2025-03-18).
RELEASES = {"tgi": (("2024-12-10", "tgi-3"), ("2024-04-12", "tgi-2"), ("", "tgi-1")),
            "vllm": (("2025-03-18", "vllm-v1"), ("2024-09-05", "vllm-v0.6"), ("2023-12-17", "vllm-v0"),
                     ("", "vllm-eager"))}


def server_of(server: str, version: str, date: str = "") -> str:
    """The profile a published figure's server, version and date stand for (e.g. 'vllm', '0.6.0')."""
    server = server.strip().lower().removeprefix("other:")
    if server in ("tensorrt-llm", "trt-llm", "tensorrt_llm"):
        return "tensorrt-llm"
    if server in ("sglang", "lmdeploy"):
        return server
    if server not in RELEASES:
        raise ValueError(f"server {server!r} has no profile; use one of tgi, vllm, tensorrt-llm, sglang, lmdeploy")
    release = version_tuple(version)
    if release is None or release[0] > 100:  # not stated, a commit or a nightly: the date decides
        return next(name for since, name in RELEASES[server] if (date or version or "") >= since)
    if server == "tgi":
        return "tgi-3" if release[0] >= 3 else ("tgi-2" if release[0] == 2 else "tgi-1")
    if release >= (0, 8):
        return "vllm-v1"
    if release >= (0, 6):
        return "vllm-v0.6"
    return "vllm-v0" if release >= (0, 2, 7) else "vllm-eager"


def version_tuple(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release number (missing parts 0); None for a commit or a nightly."""
    m = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)
