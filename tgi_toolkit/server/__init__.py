"""Start, watch and stop text-generation servers: embedded engine, TGI, TGI in Docker, vLLM, or a URL."""

from tgi_toolkit.server.base import ServerError, ServerHandle
from tgi_toolkit.server.ports import free_port
from tgi_toolkit.server.server import BACKENDS, Server

__all__ = ["BACKENDS", "Server", "ServerError", "ServerHandle", "free_port"]
