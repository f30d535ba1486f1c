#!/usr/bin/env bash
# Start JupyterLab with the tgi_toolkit cookbook on the Space's port (7860), the first notebook open.
# The notebooks launch TGI themselves: Server(config, backend="tgi") runs text-generation-launcher.
set -euo pipefail

TOOLKIT_HOME="${TOOLKIT_HOME:-/opt/tgi_toolkit}"
PORT="${JUPYTER_PORT:-7860}"
FIRST_NOTEBOOK="notebooks/01_configure_and_launch.ipynb"

# A JupyterLab without a token lets anyone who can open the Space run code on its (paid) GPU.
if [ -z "${JUPYTER_TOKEN:-}" ]; then
  echo "JUPYTER_TOKEN is not set: add a secret named JUPYTER_TOKEN in the Space's settings" \
       "(Settings > Variables and secrets), then restart the Space." >&2
  exit 1
fi
if [ ! -f "$TOOLKIT_HOME/$FIRST_NOTEBOOK" ]; then
  echo "$FIRST_NOTEBOOK is missing under $TOOLKIT_HOME: the image was built without the notebooks" >&2
  exit 1
fi

# Model weights: persistent storage (/data) when the Space has it, else the home folder (lost on restart).
if [ -d /data ] && [ -w /data ]; then
  cache=/data/huggingface
else
  cache="$HOME/.cache/huggingface"
fi
export HF_HOME="$cache" HUGGINGFACE_HUB_CACHE="$cache/hub"
mkdir -p "$HUGGINGFACE_HUB_CACHE" "${TGI_TOOLKIT_OUT:-$HOME/out}"

if ! command -v text-generation-launcher >/dev/null; then
  echo "warning: text-generation-launcher is not on PATH; the notebooks' tgi backend will not start" >&2
fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
fi

# The Space shows JupyterLab in an iframe on huggingface.co: allow that framing, and cookies across it.
exec jupyter lab \
  --ip=0.0.0.0 \
  --port="$PORT" \
  --no-browser \
  --ServerApp.root_dir="$TOOLKIT_HOME" \
  --IdentityProvider.token="$JUPYTER_TOKEN" \
  --ServerApp.tornado_settings="{'headers': {'Content-Security-Policy': \"frame-ancestors 'self' https://huggingface.co https://*.hf.space\"}}" \
  --ServerApp.cookie_options="{'SameSite': 'None', 'Secure': True}" \
  --LabApp.news_url=None \
  --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
  --LabApp.default_url="/lab/tree/$FIRST_NOTEBOOK"
