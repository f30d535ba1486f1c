"""The benchmark's own errors: bad input (named field, allowed values) and a server lost mid-run."""

from __future__ import annotations

from pathlib import Path


class BenchError(ValueError):
    """A scenario parameter the benchmark refuses before sending anything.

    `field` names the parameter, `allowed` says what would be accepted; the CLI prints the message
    alone (no traceback).
    """

    def __init__(self, field: str, message: str, allowed: str | None = None) -> None:
        self.field, self.allowed = field, allowed
        text = f"{field}: {message}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)


class ServerDiedError(RuntimeError):
    """The server stopped answering during a run. Finished points stay on disk (`output`)."""

    def __init__(self, message: str, *, url: str, point_id: str | None, finished: int, total: int,
                 output: Path | None) -> None:
        self.url, self.point_id, self.finished, self.total, self.output = url, point_id, finished, total, output
        where = f"; they are saved in {output}" if output is not None else ""
        during = f"during point {point_id!r}" if point_id else "between points"
        super().__init__(f"the server at {url} stopped answering {during} ({finished} of {total} points "
                         f"finished{where}); last error: {message}")


def check_positive_ints(field: str, values: list[int] | tuple[int, ...], *, minimum: int = 1) -> list[int]:
    """`values` as a non-empty list of ints >= minimum, else BenchError naming `field`."""
    out = list(values)
    if not out:
        raise BenchError(field, "needs at least one value", f"integers >= {minimum}")
    for value in out:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise BenchError(field, f"{value!r} is not allowed", f"integers >= {minimum}")
    return out
