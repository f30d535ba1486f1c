"""Run the app as the browser tests see it: `python tests/app_server.py PORT WORK_DIR NET_LOG`.

An audit hook writes to NET_LOG every connection and name lookup this process attempts towards a
host that is not loopback: the app must work offline (no analytics, fonts, version checks, tunnels).
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Any

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}


def _local(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str) or host in LOCAL_NAMES:
        return True  # unix sockets (a path) and the like
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a name other than localhost


def main() -> None:
    port, work_dir, net_log = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    log = net_log.open("a", buffering=1)

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and isinstance(args[1], tuple) and not _local(args[1][0]):
            log.write(f"connect {args[1]!r}\n")
        elif event == "socket.getaddrinfo" and not _local(args[0]):
            log.write(f"getaddrinfo {args[0]!r}\n")

    sys.addaudithook(audit)
    from tgi_toolkit.app import create_app

    app = create_app(work_dir=work_dir)
    app.launch(server_port=port, quiet=True)


if __name__ == "__main__":
    main()
