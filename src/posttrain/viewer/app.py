"""The viewer's web app: the page (``static/``, shipped in the package: nothing is fetched
from elsewhere) and a JSON API over the runs it was given (``views``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from posttrain.viewer.runs import RunFiles
from posttrain.viewer.views import SORTS, EpisodeQuery, episode_detail, episode_page, group_view

STATIC = Path(__file__).parent / "static"


def create_viewer_app(run_dirs: Sequence[str | Path]) -> FastAPI:
    """A viewer of ``run_dirs`` (each a run's ``out_dir``)."""
    runs = [RunFiles(Path(d)) for d in run_dirs]
    app = FastAPI(title="posttrain view")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def run_of(run_id: int) -> RunFiles:
        if not 0 <= run_id < len(runs):
            raise HTTPException(404, f"no run #{run_id} (there are {len(runs)})")
        return runs[run_id]

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/runs")
    def run_list() -> dict:
        return {"runs": [{"id": i, "name": r.name, "path": str(r.path), "stages": r.stages(),
                          "episodes": (r.path / "episodes.jsonl").is_file()}
                         for i, r in enumerate(runs)]}

    @app.get("/api/runs/{run_id}/metrics")
    def metrics(run_id: int, after: int = 0) -> dict:
        run = run_of(run_id)
        run.refresh()
        return {"rows": run.rows[after:], "next": len(run.rows)}

    @app.get("/api/runs/{run_id}/episodes")
    def episodes(run_id: int, offset: int = 0, limit: int = 50, sort: str = "index",
                 finish: str = "", task: str = "", q: str = "", step_min: str = "",
                 step_max: str = "", reward_min: str = "", reward_max: str = "",
                 length_min: str = "", length_max: str = "") -> dict:
        if sort not in SORTS:
            raise HTTPException(422, f"sort must be one of {', '.join(SORTS)}")

        def number(text: str, kind: type):
            return kind(text) if text else None

        try:
            query = EpisodeQuery(
                finish or None, task or None, q or None, number(step_min, int),
                number(step_max, int), number(reward_min, float), number(reward_max, float),
                number(length_min, int), number(length_max, int), sort, max(offset, 0),
                min(max(limit, 1), 500))
        except ValueError as exc:
            raise HTTPException(422, f"a filter is not a number: {exc}") from None
        return episode_page(run_of(run_id), query)

    @app.get("/api/runs/{run_id}/episodes/{index}")
    def episode(run_id: int, index: int) -> dict:
        try:
            return episode_detail(run_of(run_id), index)
        except IndexError as exc:
            raise HTTPException(404, str(exc)) from None

    @app.get("/api/runs/{run_id}/groups")
    def group(run_id: int, group: str, step: int | None = None) -> dict:
        return group_view(run_of(run_id), step, group)

    return app
