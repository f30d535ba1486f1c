"""How a server's start-up shows while `Server.start()` waits for health: one line redrawn in place on a
terminal or in a notebook, else each log line printed once; `Server` picks one (server.py)."""

from __future__ import annotations

from typing import Any

# `server` below is a Server, typed Any: server.py imports this module, and an import back would close a circle.


class StartupDisplay:
    """What start-up progress shows: log lines as they arrive, the time each poll, the end."""

    def log_line(self, line: str) -> None:  # from the log reader thread
        pass

    def tick(self, elapsed: float) -> None:
        pass

    def close(self, healthy_after: float | None) -> None:  # None: start-up failed (the error says why)
        pass


class RedrawnLine(StartupDisplay):
    """One tqdm line redrawn in place: the time since start and the latest log line."""

    def __init__(self, server: Any) -> None:
        from tqdm.auto import tqdm

        self.server = server
        self.bar = tqdm(total=None, desc=f"starting {server.backend} server at {server.url}",
                        bar_format="{desc}: {elapsed} {postfix}", leave=False)

    def tick(self, elapsed: float) -> None:
        self.bar.update(elapsed - self.bar.n)
        if tail := self.server.logs(1):
            self.bar.set_postfix_str(tail[0][-100:], refresh=False)

    def close(self, healthy_after: float | None) -> None:
        self.bar.close()


class LogLines(StartupDisplay):
    """Where nothing is redrawn (CI, papermill --log-output, a redirected stderr): each log line
    printed once as it arrives, and one line when the server is healthy. A redrawn progress line
    there came out as one new line per refresh, each repeating the same log tail."""

    def __init__(self, server: Any, stream: Any) -> None:
        self.server, self.stream = server, stream
        self.prefix = f"[{server.backend} server] "
        log = f" (log: {server.log_path})" if server.log_path is not None else ""
        self._print(f"starting {server.backend} server at {server.url}{log}")

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def log_line(self, line: str) -> None:
        self._print(self.prefix + line)

    def close(self, healthy_after: float | None) -> None:
        if healthy_after is not None:
            self._print(f"{self.server.backend} server healthy at {self.server.url} after {healthy_after:.1f} s")
