"""Replay a scenario through vLLM V1's own scheduler (vllm.v1.core.sched.scheduler.Scheduler), step by step.

Run with the Python of the venv holding vLLM (`make vllm`: .venv-vllm/bin/python), not the toolkit's: it reads a
scenario (or a list of them) as JSON on stdin and prints, as JSON, every step's (request, first position, tokens)
and the requests preempted (sorted).
No model runs: each step "samples" a token for every request whose scheduled tokens reach its end, as the model
runner would. tests/test_router_vllm_v1.py compares tgi_toolkit.router.vllm_v1 with it.

Scenario: {"block_size", "num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
"enable_prefix_caching", "scheduler_reserve_full_isl", "requests": [{"name", "prompt": [ids], "max_tokens",
"step": the step before which it arrives}]}.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

# A config.json is all vLLM's ModelConfig reads with skip_tokenizer_init; the scheduler never touches weights.
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1, "vocab_size": 1000,
         "max_position_embeddings": 1 << 20, "torch_dtype": "float32"}


def replay(scenario: dict) -> dict:
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    bs, blocks = scenario["block_size"], scenario["num_gpu_blocks"]
    with tempfile.TemporaryDirectory() as model:
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(MODEL, f)
        sched = SchedulerConfig(max_num_seqs=scenario["max_num_seqs"],
                                max_num_batched_tokens=scenario["max_num_batched_tokens"],
                                max_model_len=scenario["max_model_len"], enable_chunked_prefill=True,
                                async_scheduling=False, is_encoder_decoder=False,
                                scheduler_reserve_full_isl=scenario["scheduler_reserve_full_isl"])
        config = VllmConfig(scheduler_config=sched,
                            model_config=ModelConfig(model=model, dtype="float32", seed=0, skip_tokenizer_init=True,
                                                     max_model_len=scenario["max_model_len"]),
                            cache_config=CacheConfig(block_size=bs, cache_dtype="auto",
                                                     enable_prefix_caching=scenario["enable_prefix_caching"]))
        config.cache_config.num_gpu_blocks = blocks
        kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[
            KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1,
                                                          dtype=torch.float32))])
        scheduler = Scheduler(vllm_config=config, kv_cache_config=kv, log_stats=True, block_size=bs,
                              structured_output_manager=StructuredOutputManager(config))
    init_none_hash(sha256)
    hasher = get_request_block_hasher(bs, sha256)
    pending = sorted(scenario["requests"], key=lambda r: r["step"])
    names = {r["name"]: i for i, r in enumerate(scenario["requests"])}
    steps, preempted = [], []
    for step in range(100_000):
        while pending and pending[0]["step"] <= step:
            r = pending.pop(0)
            scheduler.add_request(Request(r["name"], r["prompt"], SamplingParams(max_tokens=r["max_tokens"],
                                                                                 ignore_eos=True),
                                          None, block_hasher=hasher))
        out = scheduler.schedule()
        if not out.num_scheduled_tokens:
            if not pending and not scheduler.has_requests():
                break
            steps.append([])
            if not pending:  # nothing will ever change: a request that cannot be scheduled
                break
            continue
        rows, sampled = [], []
        for rid, n in out.num_scheduled_tokens.items():
            req = scheduler.requests[rid]
            rows.append([rid, req.num_computed_tokens - n, n])
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([10**6 + 1000 * names[rid] + req.num_output_tokens] if done else [])
        preempted += sorted(out.preempted_req_ids or ())
        steps.append(rows)
        ids = list(out.num_scheduled_tokens)
        scheduler.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in
                                                                                         enumerate(ids)},
                                                            sampled_token_ids=sampled))
    return {"steps": steps, "preempted": sorted(preempted)}


if __name__ == "__main__":
    given = json.load(sys.stdin)  # one scenario, or a list of them (vLLM is imported once)
    json.dump([replay(s) for s in given] if isinstance(given, list) else replay(given), sys.stdout)
