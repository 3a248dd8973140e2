"""Images made safe and stable for a model: opened with care, downscaled, re-encoded.

llama-server knows an image by a hash of its pixels, and its KV cache only helps a request that
repeats the earlier one byte for byte, so an image must reach the model as the same bytes in
every request of a session, across restarts too.

Invariants:
- Opening is guarded: only PNG, JPEG, GIF, WebP and BMP are decoded (a PNG's damaged
  ancillary chunks dropped first, as libpng does: ``luna.attachments.png_chunks``); an image over
  ``MAX_PIXELS`` (Pillow's decompression-bomb limit) is refused from its header, before any
  pixel is decoded; a file Pillow cannot decode to the end is "damaged", never half-used.
- ``normalize`` is deterministic: the same bytes and longest side give the same output bytes.
  Only the first frame of an animation is kept; EXIF orientation is applied and then all
  metadata (EXIF, GPS, ICC, text chunks) dropped, the pixels copied into a fresh image;
  transparency is flattened onto white; the result is RGB, a JPEG (quality 90) when the source
  was a JPEG, else a PNG.
- ``ImageCache`` keeps each derived image on disk under (sha256, longest side), so the bytes a
  model saw stay the bytes it sees, even after a Pillow upgrade would encode them differently.
- Blocking functions (decoding is CPU work); ``ImageCache`` runs them in a worker thread.
"""

from __future__ import annotations

import asyncio
import io
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from luna.attachments.png_chunks import without_damaged_ancillary_chunks
from luna.attachments.sniff import sniff
from luna.attachments.store import DERIVED, AttachmentStore, write_atomic
from luna.errors import AttachmentError
from luna.messages import Attachment

log = logging.getLogger(__name__)

FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
MAX_PIXELS = int(Image.MAX_IMAGE_PIXELS or 89_478_485)  # about 9,459 x 9,459
JPEG_QUALITY = 90
PNG_LEVEL = 6

# Luna refuses an image over MAX_PIXELS itself, from its header; Pillow's own warning for one
# between its limit and twice that would only repeat it.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class NotAnImageError(AttachmentError):
    """The bytes are no image Luna decodes."""


class ImageBombError(AttachmentError):
    """The header promises more pixels than ``MAX_PIXELS``: a decompression bomb, or a scan
    too large to be worth decoding."""


class DamagedImageError(AttachmentError):
    """An image whose header reads but whose pixels do not decode (truncated, corrupt)."""


@dataclass(frozen=True)
class NormalizedImage:
    """An image as a model gets it: re-encoded bytes, their type and size in pixels."""

    mime: str  # image/png or image/jpeg
    data: bytes
    width: int
    height: int
    frames: int = 1  # of the source: more than one means only the first was kept


def open_image(data: bytes) -> Image.Image:
    """The image in ``data``, its header read and its size checked, no pixel decoded yet."""
    data = without_damaged_ancillary_chunks(data)
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError as e:
        raise ImageBombError(f"too many pixels to open safely ({e})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise NotAnImageError("not an image Luna can read (PNG, JPEG, GIF, WebP, BMP)") from e
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ImageBombError(
            f"{width}x{height} pixels is over the {MAX_PIXELS:,}-pixel limit (a decompression "
            "bomb, or a scan too large to read)"
        )
    if width < 1 or height < 1:
        raise DamagedImageError("an image with no pixels")
    return image


def _frames(image: Image.Image) -> int:
    """1, or 2 for an animation (counting every frame would decode them all)."""
    return 2 if getattr(image, "is_animated", False) else 1


def _flatten(image: Image.Image) -> Image.Image:
    """RGB, transparency painted onto white (a model's decoder drops alpha to black)."""
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    return image.convert("RGB")


def normalize(data: bytes, longest_side: int) -> NormalizedImage:
    """``data`` as a model gets it: first frame, upright, at most ``longest_side`` pixels on
    its longest side, RGB, no metadata, re-encoded (see the module invariants)."""
    image = open_image(data)
    source = image.format or ""
    frames = _frames(image)
    try:
        if source == "JPEG":  # decode at 1/2, 1/4 or 1/8 scale when that is still large enough
            image.draft("RGB", (longest_side, longest_side))
        image.load()
        image = ImageOps.exif_transpose(image) or image
        image = _flatten(image)
        image.thumbnail((longest_side, longest_side), Image.Resampling.LANCZOS)
    except Image.DecompressionBombError as e:
        raise ImageBombError(f"too many pixels to open safely ({e})") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError) as e:
        raise DamagedImageError(f"the image is damaged and cannot be decoded ({e})") from e
    clean = Image.frombytes("RGB", image.size, image.tobytes())  # the pixels, nothing else
    out = io.BytesIO()
    if source == "JPEG":
        clean.save(out, "JPEG", quality=JPEG_QUALITY, optimize=False, progressive=False)
        mime = "image/jpeg"
    else:
        clean.save(out, "PNG", compress_level=PNG_LEVEL, optimize=False)
        mime = "image/png"
    return NormalizedImage(mime, out.getvalue(), clean.width, clean.height, frames)


def _suffix(mime: str) -> str:
    return ".jpg" if mime == "image/jpeg" else ".png"


class ImageCache:
    """Derived images of the store's files, by (sha256, longest side), kept on disk."""

    def __init__(self, store: AttachmentStore, longest_side: int) -> None:
        self.store = store
        self.longest_side = longest_side
        self._busy: dict[str, tuple[asyncio.Lock, int]] = {}  # sha256 -> (lock, users)

    def folder(self, sha256: str) -> Path:
        return self.store.root / DERIVED / str(self.longest_side) / sha256[:2]

    def _cached(self, sha256: str) -> NormalizedImage | None:
        self.store.path(sha256)  # checks the reference before it names a file
        for path in self.folder(sha256).glob(f"{sha256}.*"):
            mime = "image/jpeg" if path.suffix == ".jpg" else "image/png"
            try:
                data = path.read_bytes()
                with Image.open(io.BytesIO(data)) as image:
                    return NormalizedImage(mime, data, image.width, image.height)
            except (OSError, UnidentifiedImageError) as e:  # damaged: made again from the file
                log.warning("derived image %s is unreadable (%s); making it again", path, e)
                path.unlink(missing_ok=True)
        return None

    def keep(self, sha256: str, made: NormalizedImage) -> None:
        """Cache an image already derived from the stored file ``sha256`` (blocking)."""
        if self._cached(sha256) is None:
            write_atomic(self.folder(sha256) / f"{sha256}{_suffix(made.mime)}", made.data)

    def derive_now(self, sha256: str, data: bytes | None = None) -> NormalizedImage:
        """The derived image (blocking): from the cache, else made from ``data`` (or the
        stored file) and cached."""
        cached = self._cached(sha256)
        if cached is not None:
            return cached
        made = normalize(self.store.read(sha256) if data is None else data, self.longest_side)
        write_atomic(self.folder(sha256) / f"{sha256}{_suffix(made.mime)}", made.data)
        return made

    def load(self, attachment: Attachment) -> tuple[str, bytes] | None:
        """(mime, bytes) of a stored image as a model gets it, or None when it cannot be had
        (blocking; ``luna.agent.image_parts.StoredImages`` calls it in a thread)."""
        try:
            made = self.derive_now(attachment.sha256)
        except (AttachmentError, OSError) as e:
            log.warning("image %s cannot be loaded: %s", attachment.sha256[:12], e)
            return None
        return made.mime, made.data

    def save(self, data: bytes, mime: str, name: str) -> Attachment | None:
        """Store an image a tool returned (blocking); None when its bytes are no image Luna
        reads. ``mime`` is the tool's claim: the stored type is the one the bytes show."""
        try:
            made = normalize(data, self.longest_side)
        except AttachmentError as e:
            log.info("a tool's %s is not kept: %s", mime, e)
            return None
        sha = self.store.write(data)
        self.keep(sha, made)
        return Attachment("image", sniff(data).mime, name, len(data), sha)

    async def derived(self, sha256: str, data: bytes | None = None) -> NormalizedImage:
        """The derived image of a stored file, made once (one at a time per file).

        Raises AttachmentMissingError when the file is gone, or another AttachmentError when
        it is no image Luna reads."""
        lock, users = self._busy.get(sha256) or (asyncio.Lock(), 0)
        self._busy[sha256] = (lock, users + 1)
        try:
            async with lock:
                return await asyncio.to_thread(self.derive_now, sha256, data)
        finally:
            lock, users = self._busy[sha256]
            if users == 1:
                del self._busy[sha256]
            else:
                self._busy[sha256] = (lock, users - 1)
