"""Progress that reads well wherever it goes: tqdm bars on a terminal or in a notebook, and one line per
finished step where nothing can be redrawn (CI logs, `make quickstart > log`, a pipe).

Written to a file, every tqdm refresh is one more line of carriage returns and escape codes, and
nested bars (a sweep's configurations, a run's points, a point's requests) interleave into noise.
"""

from __future__ import annotations

import contextlib
import sys
from typing import IO, Any


def redraws_in_place(stream: Any = None) -> bool:
    """True where a progress line can be redrawn: a terminal, or a Jupyter kernel (tqdm.auto draws a
    widget there). Written to a pipe or a file, every redraw would be one more line."""
    stream = sys.stderr if stream is None else stream
    with contextlib.suppress(Exception):
        if stream.isatty():
            return True
    shell = sys.modules.get("IPython")  # imported by every kernel; never imported here for the check
    get_ipython = getattr(shell, "get_ipython", None)
    kernel = get_ipython() if get_ipython is not None else None
    return kernel is not None and "IPKernelApp" in getattr(kernel, "config", {})


class StepLines:
    """tqdm's `update`, `set_postfix_str` and `close`, printing one line each time a step finishes:
    `sweep configurations: 1/2 (max_batch_size=1: complete)`."""

    def __init__(self, total: int | None, desc: str, initial: int = 0, stream: IO[str] | None = None) -> None:
        self.total, self.desc, self.n = total, desc, initial
        self.postfix = ""
        self.stream = stream

    def update(self, n: int = 1) -> None:
        self.n += n
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        postfix = f" ({self.postfix})" if self.postfix else ""
        print(f"{self.desc}: {count}{postfix}", file=self.stream or sys.stderr, flush=True)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        pass


def progress_bar(total: int | None, desc: str, *, unit: str = "it", initial: int = 0, transient: bool = False,
                 stream: IO[str] | None = None) -> Any:
    """A tqdm bar where it can be redrawn; elsewhere a StepLines, or None for a `transient` bar (one
    that tqdm would erase when done, such as a point's requests: its lines would only repeat the
    finished steps the enclosing bar prints)."""
    if redraws_in_place(stream):
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=not transient, file=stream)
    return None if transient else StepLines(total, desc, initial, stream)
