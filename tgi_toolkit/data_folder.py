"""Where the data folder is: `data/` of a checkout (or of a staged Space), `tgi_toolkit/data` in an installed wheel,
or a copy of one's own named by $TGI_TOOLKIT_DATA. It holds the seeds' published results and the GPU fit
(`reference/`), an example result set (`examples/`) and the published model shapes (`models/`).

Standard library only, so that what reads these files at any level (the cost models' fit, the shipped model
shapes, the reference result sets, the cookbook) finds them through one rule.
"""

from __future__ import annotations

import os
from pathlib import Path

REFERENCE_SUBDIR = "reference"
EXAMPLES_SUBDIR = "examples"
DATA_ENV = "TGI_TOOLKIT_DATA"  # a data folder of one's own (a copy of the repository's data/)
# The repository keeps data/ at its top level; a wheel ships it inside the package as tgi_toolkit/data
# (pyproject.toml maps it there), so both an installed package and a checkout find it.
_PACKAGE_DATA = Path(__file__).resolve().parent / "data"
_CHECKOUT_DATA = Path(__file__).resolve().parents[1] / "data"  # also a staged Space's, beside tgi_toolkit/


def data_dirs() -> list[Path]:
    """Where the data folder is looked for, in order: $TGI_TOOLKIT_DATA alone when it is set (a
    wrong path should say so, not fall back); else the installed package's, then the checkout's."""
    own = os.environ.get(DATA_ENV)
    return [Path(own)] if own else [_PACKAGE_DATA, _CHECKOUT_DATA]


def default_data_dir() -> Path:
    """The data folder (holding reference/ and examples/): the first of `data_dirs()` that has one.
    FileNotFoundError naming every place looked when none has."""
    looked = data_dirs()
    for path in looked:
        if (path / REFERENCE_SUBDIR).is_dir() or (path / EXAMPLES_SUBDIR).is_dir():
            return path
    raise FileNotFoundError(
        f"no data folder (with {REFERENCE_SUBDIR}/ or {EXAMPLES_SUBDIR}/) at {' nor at '.join(map(str, looked))}; "
        f"set {DATA_ENV} to a copy of the repository's data/, or pass data_dir=")
