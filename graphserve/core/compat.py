"""Will TF Serving load it? The TensorFlow an export ran with against the TF Serving image.

A SavedModel written by a newer TensorFlow can use ops or attributes an older model server does
not know, and fails to load there. The deploy step's image is `TFSERVING_IMAGE` (the same
variable docker/compose.yaml reads), else DEFAULT_TFSERVING_IMAGE.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from graphserve.core.results import JsonResult

__all__ = ["DEFAULT_TFSERVING_IMAGE", "TFServingCheck", "check_tfserving", "tfserving_image"]

# The newest TF Serving GPU image release we know to be published. Pinned, never `latest`.
DEFAULT_TFSERVING_IMAGE = "tensorflow/serving:2.19.1-gpu"

_TAG_VERSION = re.compile(r"^(\d+)\.(\d+)")


def tfserving_image() -> str:
    return os.environ.get("TFSERVING_IMAGE") or DEFAULT_TFSERVING_IMAGE


def _minor(version: str) -> tuple[int, int] | None:
    match = _TAG_VERSION.match(version)
    return (int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True)
class TFServingCheck(JsonResult):
    tensorflow_version: str
    image: str
    image_version: str | None  # None: the tag names no release (e.g. latest-gpu)
    compatible: bool | None  # None: cannot tell
    message: str


def check_tfserving(tensorflow_version: str, image: str | None = None) -> TFServingCheck:
    """Compare TensorFlow major.minor with the image tag's; `compatible` False means warn."""
    image = image or tfserving_image()
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"
    exported, served = _minor(tensorflow_version), _minor(tag)
    if served is None or exported is None:
        return TFServingCheck(
            tensorflow_version,
            image,
            None,
            None,
            f"cannot tell which TensorFlow {image} runs: pin TFSERVING_IMAGE to a release tag "
            f"(e.g. {DEFAULT_TFSERVING_IMAGE}) no older than TensorFlow {tensorflow_version}",
        )
    version = ".".join(map(str, served))
    if exported > served:
        return TFServingCheck(
            tensorflow_version,
            image,
            version,
            False,
            f"exported with TensorFlow {tensorflow_version}, newer than {image} (TF Serving "
            f"{version}): ops or attributes added since may fail to load there; deploy with a "
            f"TF Serving image >= {exported[0]}.{exported[1]} (TFSERVING_IMAGE) or export with "
            f"TensorFlow {version}",
        )
    return TFServingCheck(
        tensorflow_version,
        image,
        version,
        True,
        f"TF Serving {version} ({image}) can load a TensorFlow {tensorflow_version} export",
    )
