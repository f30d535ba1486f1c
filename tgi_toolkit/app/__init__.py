"""The toolkit as a web app (Gradio): launcher settings checked as you type, a benchmark of the
embedded engine with live progress, the cookbook's figures and tables, a download of the results,
and an explorer that compares result sets (published references, examples, runs, uploads).

    from tgi_toolkit.app import create_app
    create_app().launch()          # http://127.0.0.1:7860; or `tgi-toolkit app`

It is the Hugging Face Space's app (`space/`). Gradio is an optional dependency (the `app` extra):
importing this package does not import it, `create_app` does. The logic lives in modules tests call
without a browser: `settings` (the launcher form), `runner` (the engine and a run as updates),
`views` (tables and figures of a run), `explorer` (result sets, zips, comparisons), `space`
(publishing the Space); `ui` only wires them to components.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tgi_toolkit.app.ui import ToolkitApp


def create_app(**kwargs: Any) -> ToolkitApp:
    """Build the Gradio app without launching it; see `tgi_toolkit.app.ui.create_app` for the options."""
    from tgi_toolkit.app.ui import create_app as build

    return build(**kwargs)


__all__ = ["create_app"]
