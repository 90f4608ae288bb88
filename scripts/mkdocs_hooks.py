"""MkDocs hook: the docstrings' Sphinx roles (``:class:`Results```, ``:func:`~fedbandits.api.run```) read as
plain code on the site, as they do in ``help()`` (mkdocstrings renders the docstrings as Markdown)."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):(<code>)~?")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(r"\1", html)
