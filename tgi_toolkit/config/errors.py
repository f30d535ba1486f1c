"""What is wrong with a launcher configuration, all of it at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One broken rule: the fields it involves and a sentence naming their flags."""

    fields: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return self.message


class ConfigError(ValueError):
    """A configuration that the launcher (or its router) would refuse; `problems` lists every reason."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__(self._text())

    def _text(self) -> str:
        if len(self.problems) == 1:
            return f"invalid launcher configuration: {_line(self.problems[0])}"
        lines = [f"invalid launcher configuration ({len(self.problems)} problems):"]
        lines += [f"  - {_line(problem)}" for problem in self.problems]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._text()

    @property
    def fields(self) -> set[str]:
        """Every field named by some problem."""
        return {name for problem in self.problems for name in problem.fields}


def _line(problem: Problem) -> str:
    # The message names flags (for the command line); the field names serve Python callers.
    return f"{problem.message} [{', '.join(problem.fields)}]" if problem.fields else problem.message
