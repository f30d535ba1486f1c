"""Where a run's tables go as its points finish (`RunTables`): its own module because measured runs
(run_record.py) and simulated ones (tgi_toolkit.simulate.record) both save through one."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from tgi_toolkit.bench.results import Results, ResultsFolder, frame, load_results


class RunTables:
    """A run's tables as its points finish: appended to its results folder (if any) and kept in memory."""

    def __init__(self, folder: ResultsFolder | None) -> None:
        self.folder = folder
        self.memory: dict[str, list[pd.DataFrame]] = {"requests": [], "points": [], "batch": [], "server": []}

    def save(self, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            if not df.empty:
                self.memory[name].append(df)
        if self.folder is not None:
            self.folder.append(tables)

    def results(self, run_id: str, provenance: dict[str, Any]) -> Results:
        """Run `run_id`'s tables: read back from the folder (with earlier sessions' points) or from memory."""
        if self.folder is not None:
            return load_results(self.folder.path, run_id=run_id)
        tables = {name: frame(pd.concat(dfs, ignore_index=True), name) if dfs else frame([], name)
                  for name, dfs in self.memory.items()}
        return Results(tables["requests"], tables["points"], tables["batch"], tables["server"],
                       [json.loads(json.dumps(provenance, default=str))])
