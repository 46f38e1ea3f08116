"""MkDocs hook: links from a page to a file of the repository outside docs/ (a preset, a module).

Such links are right on GitHub and in an editor, where the file sits beside the page, but the built site
holds only docs/. The generated findings report links each finding's preset this way, so the hook turns a
link to an existing repository file into plain text naming the file in code style (or into a link to it
under `repo_url`, when mkdocs.yml sets one) before MkDocs validates the page's links. A link to a file that does
not exist is left alone, so `mkdocs build --strict` still fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def outside_docs(target: str, page: str, docs_dir: Path, root: Path) -> str | None:
    """The repository path a page's relative link points at when that file exists outside docs/."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return None
    resolved = (docs_dir / PurePosixPath(page).parent / target).resolve()
    if resolved.is_relative_to(docs_dir.resolve()) or not resolved.is_relative_to(root.resolve()):
        return None
    if not resolved.exists():
        return None
    return resolved.relative_to(root.resolve()).as_posix()


def rewrite_links(markdown: str, page: str, docs_dir: Path, root: Path, repo_url: str | None = None) -> str:
    """`markdown` with every link to a repository file outside docs/ made a code path (or a repo_url link)."""

    def replace(m: re.Match) -> str:
        path = outside_docs(m.group(2), page, docs_dir, root)
        if path is None:
            return m.group(0)
        if repo_url:
            return f"[{m.group(1)}]({repo_url.rstrip('/')}/blob/main/{path})"
        if m.group(1).startswith("`"):  # the text already names the file
            return m.group(1)
        return f"{m.group(1)} (`{path}`)"

    return LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    docs_dir = Path(config["docs_dir"])
    return rewrite_links(markdown, page.file.src_uri, docs_dir, docs_dir.parent, config.get("repo_url"))
