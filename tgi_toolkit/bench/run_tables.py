"""Where a run's tables go as its points finish (`RunTables`): its own module because measured runs
(run.py) and simulated ones (tgi_toolkit.simulate.record) both save through it."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from tgi_toolkit.bench.results import Results, ResultsFolder, frame, load_results


class RunTables:
    """Where a run's tables go as its points finish: its folder (if any) and memory. Shared by measured
    runs and simulated ones (tgi_toolkit.simulate), which set `folder`, `run_id`, `provenance`, `_memory`."""

    folder: ResultsFolder | None
    run_id: str
    provenance: dict[str, Any]
    _memory: dict[str, list[pd.DataFrame]]

    def _save(self, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            if not df.empty:
                self._memory[name].append(df)
        if self.folder is not None:
            self.folder.append(tables)

    def results(self) -> Results:
        """This run's tables: read back from the folder (with earlier sessions' points) or from memory."""
        if self.folder is not None:
            return load_results(self.folder.path, run_id=self.run_id)
        tables = {name: frame(pd.concat(dfs, ignore_index=True), name) if dfs else frame([], name)
                  for name, dfs in self._memory.items()}
        return Results(tables["requests"], tables["points"], tables["batch"], tables["server"],
                       [json.loads(json.dumps(self.provenance, default=str))])
