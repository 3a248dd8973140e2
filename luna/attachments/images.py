"""Image normalization: what the model gets for a stored image, the same bytes every time.

Invariants:
- Only the formats ``luna.attachments.store`` sniffs are decoded (PNG, JPEG, GIF, WebP, BMP);
  an image with more than ``max_pixels`` pixels (a decompression bomb) is refused before its
  pixels are decoded, and a corrupt one is refused, each with an ``ImageRefusedError`` whose
  text is one line for the user.
- The first frame of an animation; turned upright by its EXIF orientation, then RGB (alpha over
  white); downscaled so the longest side is at most ``max_side`` (never upscaled).
- Re-encoded with fixed settings and no metadata (no EXIF, ICC, text chunks): a JPEG source as
  JPEG at quality 90, anything else as PNG. Same input, same settings: same bytes.
- Blocking (decoding): async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, ImageOps, UnidentifiedImageError

from luna.errors import LunaError

DEFAULT_MAX_SIDE = 1024  # 1024×768 costs 770 tokens on Qwen3.5 (README: Images)
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own bomb limit (about 0.25 GB of RGBA)
JPEG_QUALITY = 90
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")


class ImageRefusedError(LunaError):
    """An image that cannot be used: corrupt, or too many pixels. The text is for the user."""


def normalize(
    data: bytes, max_side: int = DEFAULT_MAX_SIDE, max_pixels: int = DEFAULT_MAX_PIXELS
) -> tuple[str, bytes]:
    """``(mime, bytes)`` of ``data`` normalized as the module docstring says."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below
            image = Image.open(io.BytesIO(data), formats=FORMATS)
        with image:
            width, height = image.size
            if width * height > max_pixels:
                raise ImageRefusedError(
                    f"image refused: {width}×{height} pixels is more than {max_pixels:,} "
                    "(a decompression bomb, or far too large)"
                )
            source_format = image.format
            image.seek(0)  # the first frame of an animation
            upright = ImageOps.exif_transpose(image)
            rgb = _rgb(upright)
    except Image.DecompressionBombError as e:
        raise ImageRefusedError(f"image refused: too many pixels ({e})") from e
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise ImageRefusedError("image refused: its bytes are corrupt or not an image") from e
    if max(rgb.size) > max_side:
        rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    if source_format == "JPEG":
        rgb.save(out, format="JPEG", quality=JPEG_QUALITY, optimize=False, progressive=False)
        return "image/jpeg", out.getvalue()
    rgb.save(out, format="PNG", optimize=False, compress_level=6)
    return "image/png", out.getvalue()


def _rgb(image: Image.Image) -> Image.Image:
    """RGB pixels only (alpha composited over white), detached from the source and its info."""
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    rgb = image.convert("RGB")
    rgb.load()
    clean = Image.new("RGB", rgb.size)
    clean.paste(rgb)
    return clean
