"""``GET /api/skills`` and ``GET /api/skills/{name}``: the skills the page lists and shows.

Job: the same scan and JSON as ``luna skills list --json`` (``Catalog.to_json``), and one
skill with its instructions as ``luna skills show`` prints them. Read-only: installing,
removing and enabling stay with the owner's command line, which works on the folders; a skill
the model wants to save (``save_skill``) waits on the Approvals tab with its whole text.

Invariants: folder scans and file reads run in a worker thread; an unknown name is a 404 with
one line; everything reaches the page as JSON text (the page renders the body through its one
sanitized Markdown path).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from luna.frontends.web.inputs import error
from luna.frontends.web.state import state
from luna.skills.folder import Problem, current_body
from luna.skills.library import Catalog, SkillLibrary, skill_json


def _library(request: web.Request) -> SkillLibrary | None:
    return state(request).registry.skills


async def list_skills(request: web.Request) -> web.Response:
    library = _library(request)
    catalog = await library.catalog() if library is not None else Catalog()
    return web.json_response({"enabled": library is not None, **catalog.to_json()})


async def get_skill(request: web.Request) -> web.Response:
    library = _library(request)
    name = request.match_info["name"]
    catalog = await library.catalog() if library is not None else Catalog()
    skill = catalog.skills.get(name) or catalog.disabled.get(name)
    if skill is None:
        return error(404, f"there is no skill {name!r}")
    body = await asyncio.to_thread(current_body, skill)
    if isinstance(body, Problem):
        return error(409, f"the skill {name!r} cannot be read now: {body.what}")
    data = skill_json(skill, enabled=name in catalog.skills)
    return web.json_response({**data, "body": body})


def routes() -> list[web.RouteDef]:
    return [web.get("/api/skills", list_skills), web.get("/api/skills/{name}", get_skill)]
