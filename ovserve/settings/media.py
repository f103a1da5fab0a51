"""Where images in ``image_url`` parts may come from, and how big they may be (deny by default,
like OVMS): the ``media`` part of the server's settings."""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, Field, field_validator

from ovserve.settings.flags import SETTINGS_CONFIG, ExistingDirectory, seconds

ALL_MEDIA_DOMAINS = "all"
_HOSTNAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")


class MediaSettings(BaseModel):
    """Where images in ``image_url`` parts may come from (deny by default, like OVMS)."""

    model_config = SETTINGS_CONFIG

    # Exact host names or IP literals (ports are not part of the match); ["all"] allows any host.
    allowed_media_domains: list[str] = Field(
        default_factory=list,
        description="comma-separated hosts image URLs may be fetched from (exact match; 'all' = any; default: none)",
    )
    # Local files are read only from inside this directory (after resolving '..' and symlinks).
    allowed_local_media_path: ExistingDirectory | None = Field(
        default=None,
        description="directory local image paths and file:// URLs may be read from (default: local files disabled)",
    )
    max_image_mb: float = Field(default=20.0, gt=0, description="largest image (MB)")
    max_images_per_request: int = Field(default=16, ge=1, description="most images one request may carry")
    # Memory is bounded separately (one full-size decode at a time, shrunk at once); this bounds
    # the decode work one request may ask for: a 34 MP PNG takes ~0.4 s of a core to decompress,
    # so 256 MP is a few seconds per request on an edge machine (7 images at the per-image cap,
    # 30 at 8 MP, 123 at 1080p).
    max_image_pixels_per_request: int = Field(
        default=256_000_000,
        ge=1,
        description="decoded pixels all images of one request may have together, checked from their headers",
    )
    connect_timeout_s: float = seconds(5.0, "media_connect_timeout", "image URL connect timeout (s)")
    read_timeout_s: float = seconds(
        10.0, "media_read_timeout", "longest wait for the next bytes of an image download (s)"
    )
    total_timeout_s: float = seconds(30.0, "media_timeout", "longest time to fetch one image, redirects included (s)")

    @field_validator("allowed_media_domains", mode="before")
    @classmethod
    def _split_domains(cls, value: object) -> object:
        if isinstance(value, str):  # the CLI's comma-separated form
            return [item for item in (part.strip() for part in value.split(",")) if item]
        return value

    @field_validator("allowed_media_domains")
    @classmethod
    def _valid_domains(cls, value: list[str]) -> list[str]:
        domains = []
        for entry in value:
            host = entry.strip().lower()
            if host == ALL_MEDIA_DOMAINS:
                return [ALL_MEDIA_DOMAINS]
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            try:
                ipaddress.ip_address(host)
            except ValueError:
                # Host names only: a scheme, port, path or wildcard here would never match.
                if not _HOSTNAME.fullmatch(host):
                    raise ValueError(f"{entry!r} is not a host name or IP address") from None
            domains.append(host)
        return domains

    @property
    def max_image_bytes(self) -> int:
        return int(self.max_image_mb * 1024 * 1024)
