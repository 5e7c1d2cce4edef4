"""MkDocs hook: the README is the site's guide page, and links between it and docs/ work.

The README stays the one copy of the story (GitHub and the package index show it); here it
becomes ``guide.md``. Links are written for GitHub: the README points at ``docs/cli.md``,
the pages at ``../README.md#...``; both are rewritten to their place on the site, so
``mkdocs build --strict`` checks every one of them, anchors included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

README = Path(__file__).resolve().parent.parent / "README.md"
GUIDE = "guide.md"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, GUIDE, abs_src_path=str(README)))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    if page.file.src_uri == GUIDE:
        return re.sub(r"\]\(docs/", "](", markdown)
    return re.sub(r"\]\(\.\./README\.md", f"]({GUIDE}", markdown)
