"""A figure check stronger than a file size: the PNG decodes and is not one flat colour."""

from __future__ import annotations

from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_drawn(path: Path, *, min_height: int = 200, min_width: int = 300) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > min_height and image.shape[1] > min_width, (path.name, image.shape)
    assert image[..., :3].std() > 0.05, f"{path.name} is one flat colour: nothing was drawn"
