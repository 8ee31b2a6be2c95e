"""MkDocs hook: the notebooks of notebooks/ link the documentation as ``../docs/<page>.md``, which is right in
Jupyter and on GitHub; on the notebooks' site pages those links go to the pages' URLs instead. A link to a page the
site does not have is a warning, so ``mkdocs build --strict`` fails on it."""

from __future__ import annotations

import logging
import re

from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.notebook_links")
LINK = re.compile(r'href="\.\./docs/([^"#]+\.md)(#[^"]*)?"')


def on_page_content(html: str, page: Page, config, files: Files) -> str:
    """The notebook page's HTML with each ``../docs/<page>.md`` link made relative to the page's own URL."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html

    def site_link(match: re.Match) -> str:
        target = files.get_file_from_path(match.group(1))
        if target is None:
            log.warning("%s links ../docs/%s, which is not a page of the site", page.file.src_uri, match.group(1))
            return match.group(0)
        return f'href="{target.url_relative_to(page.file)}{match.group(2) or ""}"'

    return LINK.sub(site_link, html)
