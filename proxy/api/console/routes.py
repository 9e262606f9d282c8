"""The console's pages: sign-in, containers, one container, the search playground, models and jobs.

Every page but the login form runs after :func:`proxy.api.console.access.console_middleware` has found a
signed-in administrator; every read goes through the core, as the APIs' own routes do.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from proxy.api.console.access import COOKIE, LOGIN_PATH, credentials_from_form, session_cookie
from proxy.api.console.charts import Chart, score_curve, timeline_chart
from proxy.api.console.playground import MODES, Outcome, Playground, PlaygroundQuery, parse_query
from proxy.api.console.render import render
from proxy.api.console.vector_map import build_map
from proxy.api.console.views import (
    ContainerRow,
    MemoryView,
    local_embedder_rows,
    registered_model_rows,
    startup_model_rows,
)
from proxy.api.identity import CONSOLE_PREFIX, identify
from proxy.app_keys import EMBEDDERS, IDENTITY, JOBS, PRINCIPAL, SERVICES, SETTINGS
from proxy.core.container_record import MEMORY_TYPES, Container, parse_memory_type
from proxy.core.containers import get_container
from proxy.core.inspection import (
    find_containers,
    get_memory,
    index_details,
    memories_over_time,
    memory_counts,
    sample_memories,
    vector_sample,
)
from proxy.core.recall_canary import IndexRecall
from proxy.core.tasks import gather
from proxy.errors import BadRequest, Forbidden, MemproxyError, Unauthenticated

__all__ = ["routes"]

routes = web.RouteTableDef()

PAGE_SIZE = 50
# How many containers the playground's menu lists (newest first).
CHOICES = 500
SAMPLE_SIZE = 10
# The kinds of model the registry holds besides the local ones (connectors, groups and tasks are
# ml-commons' bookkeeping, not models).
MODEL_KINDS = ("embedder", "remote", "reranker", "llm")


def see_other(path: str) -> web.Response:
    return web.Response(status=303, headers={"Location": path})


@routes.get("")
@routes.get("/")
async def index(request: web.Request) -> web.Response:
    return see_other(CONSOLE_PREFIX + "/containers")


# --- sign-in ------------------------------------------------------------------------------------------


async def _login_page(request: web.Request, error: str | None = None, status: int = 200) -> web.Response:
    cluster_login = await request.config_dict[IDENTITY].cluster_security()
    return render(request, "login.html", {"error": error, "cluster_login": cluster_login}, status=status)


@routes.get("/login")
async def login_form(request: web.Request) -> web.Response:
    return await _login_page(request)


@routes.post("/login")
async def login(request: web.Request) -> web.Response:
    form = await request.post()
    try:
        creds = credentials_from_form(form)
        principal = await identify(request, creds)
    except (BadRequest, Unauthenticated) as exc:
        return await _login_page(request, exc.message, status=exc.status)
    if not principal.is_admin:
        # Not signed in: the cookie is only ever given to an administrator.
        raise Forbidden("The console is for administrators: this credential is not one.")
    response = see_other(CONSOLE_PREFIX + "/containers")
    response.set_cookie(
        COOKIE,
        session_cookie(creds),
        path=CONSOLE_PREFIX,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )
    return response


@routes.post("/logout")
async def logout(request: web.Request) -> web.Response:
    response = see_other(LOGIN_PATH)
    response.del_cookie(COOKIE, path=CONSOLE_PREFIX)
    return response


# --- containers -----------------------------------------------------------------------------------------


async def _row(request: web.Request, container: Container) -> ContainerRow:
    return ContainerRow.of(container, await memory_counts(request.config_dict[SERVICES], container))


@routes.get("/containers")
async def containers(request: web.Request) -> web.Response:
    try:
        start = max(0, int(request.query.get("from", "0")))
    except ValueError:
        raise BadRequest("from must be an integer") from None
    text = request.query.get("q", "").strip()
    page = await find_containers(request.config_dict[SERVICES], text, size=PAGE_SIZE, from_=start)
    rows = await gather([_row(request, c) for c in page.containers]) if page.containers else []
    return render(
        request,
        "containers.html",
        {
            "q": text,
            "rows": rows,
            "total": page.total,
            "start": start,
            "page_size": PAGE_SIZE,
            "memory_types": MEMORY_TYPES,
            "canary": _canary_rows(request),
        },
    )


def _canary_rows(request: web.Request) -> list[tuple[str, IndexRecall]] | None:
    """The recall canary's figures per index, worst first; ``None`` when the canary is off."""
    canary = request.config_dict[SERVICES].canary
    if canary is None:
        return None
    return sorted(canary.indices.items(), key=lambda row: (row[1].recall, row[0]))


@routes.get("/containers/{container_id}")
async def container_page(request: web.Request) -> web.Response:
    svc = request.config_dict[SERVICES]
    container = await get_container(svc, request.match_info["container_id"])
    enabled = [t for t in MEMORY_TYPES if container.index_name(t) is not None]
    memory_type = request.query.get("type") or ("long-term" if "long-term" in enabled else enabled[0])
    if memory_type not in MEMORY_TYPES:
        raise BadRequest(f"Unknown memory type: {memory_type}")
    row, details, samples, timeline = await asyncio.gather(
        _row(request, container),
        index_details(svc, container),
        sample_memories(svc, container, memory_type, SAMPLE_SIZE),
        memories_over_time(svc, container),
    )
    return render(
        request,
        "container.html",
        {
            "row": row,
            "details": details,
            "memory_type": memory_type,
            "enabled_types": enabled,
            "samples": [MemoryView.of(doc) for doc in samples],
            "timeline": timeline_chart(timeline) if timeline is not None else None,
        },
    )


@routes.get("/containers/{container_id}/map")
async def vector_map_page(request: web.Request) -> web.Response:
    svc = request.config_dict[SERVICES]
    container = await get_container(svc, request.match_info["container_id"])
    row, sample = await asyncio.gather(_row(request, container), vector_sample(svc, container))
    # PCA and the nxn cosines are CPU work of up to a few hundred ms: off the event loop.
    drawn = await asyncio.to_thread(build_map, sample) if sample is not None and sample.ids else None
    return render(request, "vector_map.html", {"row": row, "vector_map": drawn})


@routes.get("/containers/{container_id}/memories/{memory_type}/{memory_id}")
async def memory_page(request: web.Request) -> web.Response:
    svc = request.config_dict[SERVICES]
    container = await get_container(svc, request.match_info["container_id"])
    memory_type = parse_memory_type(request.match_info["memory_type"])
    doc = await get_memory(svc, container, memory_type, request.match_info["memory_id"])
    return render(
        request,
        "memory.html",
        {
            "row": await _row(request, container),
            "memory_type": memory_type,
            "memory": MemoryView.of(doc),
        },
    )


# --- the playground -------------------------------------------------------------------------------------


async def _choices(request: web.Request, selected: str) -> list[Container]:
    """The containers the playground offers, newest first, the selected one always among them."""
    svc = request.config_dict[SERVICES]
    containers = (await find_containers(svc, size=CHOICES)).containers
    if selected and selected not in {c.id for c in containers}:
        containers = (await find_containers(svc, selected, size=1)).containers + containers
    return containers


async def _search_page(
    request: web.Request,
    query: PlaygroundQuery,
    outcome: Outcome | None,
    *,
    form_error: str | None = None,
    status: int = 200,
) -> web.Response:
    return render(
        request,
        "search.html",
        {
            "containers": await _choices(request, query.container_id),
            "query": query,
            "modes": MODES,
            "outcome": outcome,
            "score_chart": _score_chart(query, outcome),
            "form_error": form_error,
        },
        status=status,
    )


def _score_chart(query: PlaygroundQuery, outcome: Outcome | None) -> Chart | None:
    """The hits' score curve, with the rule where the query's min_score (or retrieve's threshold) cuts."""
    if outcome is None or outcome.error is not None:
        return None
    if query.mode == "retrieve":
        # The cosine, higher is better, whichever sign --goodmem-vector-score gives the wire score.
        cosines = [h.cosine for h in outcome.hits if h.cosine is not None]
        return (
            score_curve(cosines, query.relevance_threshold, "relevance_threshold", "cosine")
            if cosines
            else None
        )
    scores = [h.score for h in outcome.hits if h.score is not None]
    return score_curve(scores, query.min_score, "min_score") if scores else None


@routes.get("/search")
async def search_form(request: web.Request) -> web.Response:
    query = PlaygroundQuery(container_id=request.query.get("container", ""))
    return await _search_page(request, query, None)


@routes.post("/search")
async def search(request: web.Request) -> web.Response:
    form = await request.post()
    try:
        query = parse_query(form)
    except BadRequest as exc:
        typed = PlaygroundQuery(
            container_id=str(form.get("container") or ""), form={k: str(v) for k, v in form.items()}
        )
        return await _search_page(request, typed, None, form_error=exc.message, status=exc.status)
    svc = request.config_dict[SERVICES]
    container = await get_container(svc, query.container_id)
    playground = Playground(svc, request.config_dict[IDENTITY], request.config_dict[SETTINGS])
    outcome = await playground.run(request[PRINCIPAL], container, query)
    return await _search_page(request, query, outcome)


# --- models and jobs ------------------------------------------------------------------------------------


@routes.get("/models")
async def models(request: web.Request) -> web.Response:
    registry = request.config_dict[SERVICES].models
    registered = await registry.find(list(MODEL_KINDS))  # type: ignore[arg-type]
    return render(
        request,
        "models.html",
        {
            "local": local_embedder_rows(request.config_dict[EMBEDDERS].infos()),
            "startup": startup_model_rows(registry.startup, sorted(registry.rerankers)),
            "registered": registered_model_rows(registered),
        },
    )


@routes.get("/jobs")
async def jobs(request: web.Request) -> web.Response:
    try:
        health = await request.config_dict[JOBS].health()
        error = None
    except MemproxyError as exc:  # no job index reachable: the page says so instead of failing whole
        health, error = {}, exc.message
    return render(request, "jobs.html", {"health": health, "error": error})
