"""The addresses a server binds and its clients use, and which TCP ports are free: what `Server` needs to
pick a port (server.py), apart from the process it runs."""

from __future__ import annotations

import socket


def client_host(hostname: str) -> str:
    """The address a client on this machine uses for a server bound to `hostname`."""
    if hostname in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if hostname in ("::", "[::]"):
        return "[::1]"
    return f"[{hostname}]" if ":" in hostname and not hostname.startswith("[") else hostname


def _bind_host(hostname: str) -> tuple[int, str]:
    host = hostname.strip("[]") or "0.0.0.0"
    return (socket.AF_INET6 if ":" in host else socket.AF_INET), host


def free_port(hostname: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS's choice)."""
    family, host = _bind_host(hostname)
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(hostname: str, port: int) -> bool:
    family, host = _bind_host(hostname)
    with socket.socket(family) as s:
        # as servers do: a port whose old connections linger in TIME_WAIT is free for a listener
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

