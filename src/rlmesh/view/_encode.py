"""Frame encoders for the HTTP backend (VIEW-18): JPEG via ``simplejpeg`` (or Pillow), PNG via Pillow.

Both libraries release the GIL while they encode, so the encoder thread does not
hold up the run's thread. Imported lazily: only the HTTP backend needs them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["make_encoder"]


def make_encoder(fmt: str, quality: int) -> tuple[Callable[[np.ndarray[Any, Any]], bytes], str]:
    """An ``encode(frame) -> bytes`` for HxWx3 uint8 RGB frames and its Content-Type.

    Raises:
        ImportError: neither ``simplejpeg`` nor Pillow is installed (the ``view`` extra).
    """
    if fmt == "jpeg":
        try:
            import simplejpeg

            def encode_sj(frame: np.ndarray[Any, Any]) -> bytes:
                return bytes(
                    simplejpeg.encode_jpeg(
                        frame, quality=quality, colorspace="RGB", colorsubsampling="420"
                    )
                )

            return encode_sj, "image/jpeg"
        except ImportError:
            pass
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            f"the HTTP viewer needs simplejpeg or Pillow to encode {fmt} frames: pip install simplejpeg pillow (the 'view' extra of rlmesh-py)"
        ) from exc
    pil_format = "JPEG" if fmt == "jpeg" else "PNG"
    opts: dict[str, Any] = {"quality": quality} if fmt == "jpeg" else {"compress_level": 1}

    def encode_pil(frame: np.ndarray[Any, Any]) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(frame, "RGB").save(buf, pil_format, **opts)
        return buf.getvalue()

    return encode_pil, "image/jpeg" if fmt == "jpeg" else "image/png"
