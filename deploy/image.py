"""Can this TF Serving image load these exports? Tag pinning and the TensorFlow version check.

Each version's TensorFlow comes from its graphserve manifest (`tensorflow_version`), else from
`saved_model.pb` (`meta_info_def.tensorflow_version`, written by every TF2 save); the comparison
itself is `graphserve.core.compat.check_tfserving`, the same one `graphserve export` records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from graphserve.core.errors import DeployUsageError
from graphserve.core.results import JsonResult, json_meta
from graphserve.core.versions import version_path
from graphserve.deploy.config import ModelDir

__all__ = ["ImageReport", "VersionCheck", "check_image", "export_tensorflow_version", "image_tag"]


@dataclass(frozen=True)
class VersionCheck(JsonResult):
    model: str
    version: int
    tensorflow_version: str | None  # None: neither manifest nor saved_model.pb says
    compatible: bool | None  # None: cannot tell
    message: str


@dataclass(frozen=True)
class ImageReport(JsonResult):
    image: str
    pinned: bool
    checks: tuple[VersionCheck, ...]
    warnings: tuple[str, ...] = field(metadata=json_meta(skip=True))  # the plan lists them

    @property
    def problems(self) -> bool:
        """True when --strict should refuse: an unpinned tag or a version that may not load."""
        return not self.pinned or any(c.compatible is not True for c in self.checks)


def image_tag(image: str) -> str:
    """The tag of `image` ("latest" when it has none; the digest for name@sha256:...)."""
    last = image.rpartition("/")[2]
    if "@" in last:
        return last.partition("@")[2]
    return last.rpartition(":")[2] if ":" in last else "latest"


def export_tensorflow_version(version_dir: Path) -> str | None:
    """The TensorFlow that wrote `version_dir`, or None when nothing readable records it."""
    from graphserve.core.manifest import read_manifest

    try:
        manifest = read_manifest(version_dir)
    except (OSError, ValueError):
        manifest = None
    if manifest and isinstance(manifest.get("tensorflow_version"), str):
        return str(manifest["tensorflow_version"])
    # Only here is TensorFlow imported (its protos), for SavedModels graphserve did not write.
    from graphserve.core.savedmodel import SavedModelError, read_saved_model

    try:
        saved = read_saved_model(version_dir)
    except SavedModelError:
        return None
    found = {g.meta_info_def.tensorflow_version for g in saved.meta_graphs}
    found.discard("")
    return max(found) if found else None


def check_image(image: str, models: list[ModelDir], *, gpus: int | str) -> ImageReport:
    """Check `image` against every version of `models`; warnings are messages for the user.

    Raises DeployUsageError for an image reference that is empty or holds whitespace.
    """
    from graphserve.core.compat import DEFAULT_TFSERVING_IMAGE, check_tfserving

    if not image or any(c.isspace() for c in image):
        raise DeployUsageError(f"--image {image!r}: expected e.g. {DEFAULT_TFSERVING_IMAGE}")
    tag = image_tag(image)
    pinned = not tag.startswith("latest")
    warnings = []
    if not pinned:
        warnings.append(
            f"image {image} is not pinned (tag {tag}): the release it runs changes under you and "
            f"no TensorFlow version check is possible; pin one, e.g. --image "
            f"{DEFAULT_TFSERVING_IMAGE}"
        )
    if gpus not in (0, "0") and "gpu" not in tag:
        warnings.append(
            f"image {image} is not a GPU build (its tag has no -gpu): the reserved GPUs go unused"
        )
    checks = []
    for model in models:
        for version in model.versions:
            tf_version = export_tensorflow_version(version_path(model.host_path, version))
            if tf_version is None:
                checks.append(
                    VersionCheck(
                        model.name,
                        version,
                        None,
                        None,
                        f"{model.name} version {version}: no manifest or saved_model.pb says "
                        "which TensorFlow wrote it; cannot check it against the image",
                    )
                )
                continue
            result = check_tfserving(tf_version, image)
            checks.append(
                VersionCheck(
                    model.name,
                    version,
                    tf_version,
                    result.compatible,
                    f"{model.name} version {version}: {result.message}",
                )
            )
    if pinned:  # an unpinned tag already has its one warning
        warnings.extend(c.message for c in checks if c.compatible is not True)
    return ImageReport(image, pinned, tuple(checks), tuple(warnings))
