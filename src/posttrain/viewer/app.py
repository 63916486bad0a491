"""The viewer's web app: the page (``static/``, shipped in the package: nothing is fetched
from elsewhere, and FastAPI's own docs pages, which would be, are off) and a JSON API over the
runs it was given (``views``). Requests must name the host the viewer listens on (a page of
another site that a DNS record points at 127.0.0.1 cannot read the runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from posttrain.viewer.runs import RunFiles
from posttrain.viewer.views import (
    SORTS,
    EpisodeQuery,
    NoTokenizer,
    episode_detail,
    episode_page,
    group_view,
)

STATIC = Path(__file__).parent / "static"


def run_names(paths: Sequence[Path]) -> list[str]:
    """Each run's name: the fewest last parts of its path that tell it from the others
    (``a/qs`` and ``b/qs``, not ``qs`` twice)."""
    parts = [p.resolve().parts for p in paths]
    for n in range(1, max(map(len, parts), default=1) + 1):
        names = ["/".join(p[-n:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def create_viewer_app(run_dirs: Sequence[str | Path], host: str = "127.0.0.1") -> FastAPI:
    """A viewer of ``run_dirs`` (each a run's ``out_dir``), listening on ``host``."""
    paths = [Path(d) for d in run_dirs]
    runs = [RunFiles(p, name) for p, name in zip(paths, run_names(paths))]
    app = FastAPI(title="posttrain view", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware,
                       allowed_hosts=list({host, "127.0.0.1", "localhost", "::1", "[::1]"}))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(NoTokenizer)
    async def no_tokenizer(request, exc: NoTokenizer) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 409)

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
                          "metrics": (r.path / "metrics.jsonl").is_file(),
                          "episodes": (r.path / "episodes.jsonl").is_file()}
                         for i, r in enumerate(runs)]}

    @app.get("/api/runs/{run_id}/metrics")
    def metrics(run_id: int, after: int = 0) -> dict:
        run = run_of(run_id)
        run.refresh_metrics()
        return {"rows": run.rows[after:], "next": len(run.rows), "warnings": run.warnings[-20:],
                "skipped": run.skipped}

    @app.get("/api/runs/{run_id}/summary")
    def summary(run_id: int) -> dict:
        run = run_of(run_id)
        return {"summary": run.summary_file(), "config": run.config()}

    @app.get("/api/runs/{run_id}/episodes")
    def episodes(run_id: int, offset: int = 0, limit: int = 50, sort: str = "index",
                 finish: str = "", task: str = "", q: str = "", step_min: str = "",
                 step_max: str = "", reward_min: str = "", reward_max: str = "",
                 length_min: str = "", length_max: str = "", response: str = "",
                 traced: str = "") -> dict:
        if sort not in SORTS:
            raise HTTPException(422, f"sort must be one of {', '.join(SORTS)}")

        def number(text: str, kind: type):
            return kind(text) if text else None

        try:
            query = EpisodeQuery(
                finish or None, task or None, q or None, number(step_min, int),
                number(step_max, int), number(reward_min, float), number(reward_max, float),
                number(length_min, int), number(length_max, int), sort, max(offset, 0),
                min(max(limit, 1), 500), response or None,
                {"": None, "yes": True, "no": False}[traced])
        except KeyError:
            raise HTTPException(422, "traced must be yes, no or empty") from None
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
