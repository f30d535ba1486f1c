"""A model's files: where the model is found (a local directory, a GGUF file, the offline hub cache or the bundled
SmolLM2-135M), its config.json fields read without loading weights (a GGUF's from its header, a published shape's
from data/models/ by id), and loading its weights with the GGUF converted once into a shared cache.

Below the configuration, the planner and the engine: each of them reads a model through here, and nothing here
imports torch at module level. Modules: `files` (resolve_model, model_config, the conversion cache and the
loaders), `gguf_config` (a GGUF's header as config.json fields), `shipped` (the shapes of data/models/ by id).
"""
