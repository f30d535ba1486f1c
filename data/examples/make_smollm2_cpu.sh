#!/usr/bin/env bash
# Makes data/examples/smollm2-135m-cpu/: the embedded engine (SmolLM2-135M-Instruct on the CPU) measured
# by the benchmark harness, one server launch per scenario, all with the same launcher settings (so one
# config_id). About 4 minutes on 2 cores. Run from the repository root: bash data/examples/make_smollm2_cpu.sh
set -euo pipefail
out=${1:-data/examples/smollm2-135m-cpu}
launcher=(--max-batch-size 16 --max-input-tokens 1536 --max-total-tokens 2048)
tk=${TGI_TOOLKIT:-.venv/bin/tgi-toolkit}
"$tk" bench ingestion --backend embedded --no-progress --output "$out" \
    --prompt-tokens 32 --prompt-tokens 256 --prompt-tokens 512 --prompt-tokens 768 --prompt-tokens 1024 \
    --repeats 3 -- "${launcher[@]}"
"$tk" bench batch --backend embedded --no-progress --output "$out" \
    -b 1 -b 2 -b 4 -b 8 --sequence-length 128 --decode-length 16 --runs 3 --warmups 1 -- "${launcher[@]}"
"$tk" bench concurrency --backend embedded --no-progress --output "$out" \
    -u 1 -u 2 -u 4 -u 10 --prompt-tokens 128 --max-new-tokens 32 --requests 10 -- "${launcher[@]}"
# happy_vllm's card point: 10 parallel requests, 1024-token prompts, 128 tokens generated.
"$tk" bench concurrency --backend embedded --no-progress --output "$out" \
    -u 10 --prompt-tokens 1024 --max-new-tokens 128 --requests 10 -- "${launcher[@]}"
rm -f "$out/.lock"
