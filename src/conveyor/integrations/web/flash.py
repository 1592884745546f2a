"""The outcome of an action, shown once on the page it leads back to: kept in
a short-lived cookie rather than the address, so no link can make the
dashboard print a message of its choosing. A refused action is marked as such
and keeps the fields its form was sent with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "conveyor_flash"
MAX_BYTES = 3000  # a cookie holds about 4 KiB: a larger form is not kept


@dataclass(frozen=True, slots=True)
class Flash:
    message: str
    refused: bool = False
    form: dict[str, str] = field(default_factory=dict)


def remember(
    request: Request, response: Response, message: str, *, refused: bool, form: dict[str, str]
) -> None:
    """Keep `message` (and a refused form's fields) for the next page."""
    value = json.dumps({"m": message, "r": refused, "f": form if refused else {}})
    if len(value.encode()) > MAX_BYTES:
        value = json.dumps({"m": message[:1000], "r": refused, "f": {}})
    response.set_cookie(
        COOKIE, value, max_age=60, httponly=True, samesite="strict", path=_path(request)
    )


def read(request: Request) -> Flash | None:
    """The message left for this page (forget() it once shown)."""
    raw = request.cookies.get(COOKIE)
    if raw is None:
        return None
    try:
        found: Any = json.loads(raw)
        form = {str(k): str(v) for k, v in dict(found.get("f") or {}).items()}
        return Flash(str(found["m"]), refused=bool(found.get("r")), form=form)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def forget(request: Request, response: Response) -> None:
    if COOKIE in request.cookies:
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", path=_path(request))


def _path(request: Request) -> str:
    return str(request.scope.get("root_path") or "/")
