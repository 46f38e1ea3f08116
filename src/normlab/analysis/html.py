"""report.md as one self-contained HTML page: figures and linked files embedded as data: URIs, styles
inline, nothing fetched from anywhere, so the page can be mailed or opened offline as a single file. Only
files inside the report's own folder are embedded: whatever a Markdown line points at, nothing else on the
machine ends up in the page."""

from __future__ import annotations

import base64
import html
import mimetypes
from pathlib import Path

from markdown_it import MarkdownIt

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; line-height: 1.45;
       max-width: 1180px; margin: 2em auto; padding: 0 1.2em; color: #1f2328; }
h1 { border-bottom: 2px solid #d0d7de; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; display: block; overflow-x: auto; }
th, td { border: 1px solid #d0d7de; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
blockquote { margin: 1em 0; padding: .6em 1em; background: #fff8e5; border-left: 4px solid #d4a72c; }
code { background: #f3f4f6; padding: 0 .25em; border-radius: 3px; font-size: 0.92em; }
"""


def data_uri(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, links followed, is a file within `folder` (the report's own)."""
    try:
        return path.resolve().is_relative_to(folder.resolve()) and path.is_file()
    except OSError:
        return False


def _embed(tokens, base_dir: Path) -> None:
    """Point every relative image and link at its file's contents — only files inside `base_dir`, the
    report's own folder (a path out of it, absolute or `../`, or a link that leads out, is never read into
    the page); leave URLs and anchors alone."""
    for token in tokens:
        if token.children:
            _embed(token.children, base_dir)
        attr = "src" if token.type == "image" else "href" if token.type == "link_open" else None
        if attr is None:
            continue
        target = str(token.attrGet(attr) or "")
        if not target or target.startswith(("#", "data:")) or "://" in target:
            continue
        path = base_dir / target
        if inside(path, base_dir):
            token.attrSet(attr, data_uri(path))
            if token.type == "link_open":
                token.attrSet("download", Path(target).name)


def markdown_to_html(text: str, base_dir: str | Path, title: str = "normlab report") -> str:
    """Render Markdown (CommonMark + tables) to a standalone page; files it links are read from base_dir."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    _embed(tokens, Path(base_dir))
    body = md.renderer.render(tokens, md.options, {})
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )
