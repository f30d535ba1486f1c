#!/usr/bin/env bash
# Prepare what benchmarks/gpu_probe.py needs on a lent GPU machine (docs/gpu-probe.md): run once, here, in the
# repository's root, where PyPI can be reached. The GPU machine's python3 (PyTorch 2.11 with CUDA, transformers,
# pandas, pyarrow, httpx, pyyaml, prometheus-client, psutil, tqdm) lacks the web server's packages and the bundled
# model's tokenizer; this puts them in two ignored folders that the `run` call carries:
#   .whl/                Python 3.12 wheels of the packages the device lacks (found by running the probe here with
#                        every package missing from the device's list made unimportable)
#   .gpu_probe/tokenizer the bundled SmolLM2 tokenizer (the random-weight model's prompts are tokenized with it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        typing-extensions==4.16.0 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 orjson==3.13.0
        python-multipart==0.0.34 opentelemetry-api==1.45.2 sniffio==1.3.1)

grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -qxF '/.gpu_probe/' .git/info/exclude 2>/dev/null || echo '/.gpu_probe/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl .gpu_probe/tokenizer
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"
"$PY" - <<'PY'
import shutil
from pathlib import Path

from tgi_toolkit.models.files import DEFAULT_MODEL_ID, converted_model_dir, resolve_model

source = converted_model_dir(resolve_model(DEFAULT_MODEL_ID))
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (source / name).is_file():
        shutil.copy(source / name, Path(".gpu_probe/tokenizer") / name)
PY
du -sh .whl .gpu_probe
ls .whl
