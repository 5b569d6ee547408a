"""Jinja rendering of everything lo-orch writes for people and agents to read."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2

from loop_orchestrator.resources import templates_dir


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` with ``context`` (undefined names are errors)."""
    return environment().get_template(template).render(**context)
