"""Raster images with Pillow: frames, the decompression-bomb guard, and PNG encoding."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

from PIL import Image, ImageChops, ImageOps, UnidentifiedImageError

from proxy.documents.errors import CorruptDocument, ImageTooLarge, Stage, reason

__all__ = ["decode_frame", "dpi_of", "for_ocr", "frame_count", "neutral_to_grey", "open_image", "png_bytes"]

# Pillow's own bomb check is a process-wide setting (Image.MAX_IMAGE_PIXELS), and a limit is per call, so
# the size is checked here from the header instead, before any pixel is decoded; Pillow's check stays on at
# its default as a second net (its error, past twice that, reads as ImageTooLarge too).
_PILLOW_ERRORS = (
    UnidentifiedImageError,
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    Image.DecompressionBombError,
)


def _check_size(size: tuple[int, int], max_pixels: int, what: str) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise CorruptDocument(f"{what} has no pixels ({width}x{height})")
    if width * height > max_pixels:
        raise ImageTooLarge(
            f"{what} is {width}x{height} pixels, more than the limit of {max_pixels:,} pixels"
        )


@contextmanager
def open_image(data: bytes, max_pixels: int) -> Iterator[Image.Image]:
    """The image in ``data``, its header checked against ``max_pixels``; decoding errors become
    ``CorruptDocument``."""
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"the image is too large to decode: {reason(exc)}") from exc
    except _PILLOW_ERRORS as exc:
        raise CorruptDocument(f"cannot read the image: {reason(exc)}") from exc
    with image:
        _check_size(image.size, max_pixels, "the image")
        yield image


def frame_count(image: Image.Image) -> int:
    try:
        return int(getattr(image, "n_frames", 1))
    except _PILLOW_ERRORS as exc:
        raise CorruptDocument(f"cannot count the image's frames: {reason(exc)}") from exc


def decode_frame(image: Image.Image, index: int, max_pixels: int) -> Image.Image:
    """Frame ``index`` (a TIFF's page, a GIF's frame) decoded, upright (EXIF orientation) and on white
    where transparent."""
    try:
        image.seek(index)
        _check_size(image.size, max_pixels, f"frame {index}")
        return _flatten(ImageOps.exif_transpose(image))
    except _PILLOW_ERRORS as exc:
        raise CorruptDocument(f"cannot decode frame {index} of the image: {reason(exc)}") from exc


def _flatten(frame: Image.Image) -> Image.Image:
    """RGB or L pixels; transparency composed on white (black text on a transparent PNG would otherwise
    come out black on black)."""
    if frame.mode in ("RGBA", "LA", "PA") or (frame.mode == "P" and "transparency" in frame.info):
        rgba = frame.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if frame.mode in ("RGB", "L"):
        return frame.copy()
    if frame.mode == "1":
        return frame.convert("L")
    return frame.convert("RGB")


def neutral_to_grey(image: Image.Image) -> Image.Image:
    """``image`` in greyscale when it has no colour (a page of black text): a third of the pixels to encode
    and a PNG about half the size, for a check that costs a few per cent of the encoding."""
    if image.mode != "RGB":
        return image
    red, green, blue = image.split()
    if ImageChops.difference(red, green).getbbox() or ImageChops.difference(green, blue).getbbox():
        return image
    return red


def for_ocr(frame: Image.Image) -> bytes:
    """A frame as the PNG Tesseract reads: grey (Tesseract binarises anyway; a third of the bytes to pipe)."""
    return png_bytes(frame if frame.mode == "L" else frame.convert("L"), fast=True)


def png_bytes(frame: Image.Image, *, fast: bool = False, stage: Stage = "EXTRACTING_CONTENT") -> bytes:
    """PNG-encoded ``frame``; ``fast`` trades size for time (an image only piped to Tesseract)."""
    out = io.BytesIO()
    try:
        frame.save(out, "PNG", compress_level=1 if fast else 6)
    except _PILLOW_ERRORS as exc:
        raise CorruptDocument(f"cannot encode a page as PNG: {reason(exc)}", stage=stage) from exc
    return out.getvalue()


def dpi_of(image: Image.Image, default: int = 72) -> int:
    """The resolution the image declares (a scanner's 300), else ``default``."""
    dpi = image.info.get("dpi")
    try:
        value = round(float(dpi[0])) if dpi else 0
    except (TypeError, ValueError, IndexError):
        value = 0
    return value if 0 < value < 10_000 else default
