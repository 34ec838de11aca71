"""Settings of one algorithm service, read from the environment (prefix BOILERBENCH_)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BOILERBENCH_", extra="ignore")

    host: str = Field("127.0.0.1", description="Bind address; containers set 0.0.0.0.")
    port: int | None = Field(None, description="Listen port; default: the registry's.")
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1, description="Larger bodies get 413.")
    time_limit_s: float = Field(10.0, gt=0, description="Longer extractions get 504.")
    workers: int = Field(1, ge=1, le=64, description="Extraction worker processes.")
    token: str | None = Field(None, description="If set, every request needs this bearer token.")
    allow_fetch: bool = Field(False, description="May the service fetch URLs (rss feeds)?")
    fetch_allow_list: list[str] = Field(
        default_factory=list, description="Host names the service may fetch from."
    )
    member_urls: dict[str, str] = Field(
        default_factory=dict, description="The ensemble's members reached over HTTP, name -> "
        "base URL (JSON); the others run inside the ensemble's worker.")
    member_time_limit_s: float = Field(
        1.5, gt=0, description="The ensemble waits this long for a member over HTTP (a "
        "later answer counts as missing) and starts no member in its own process after "
        "this long on a page.")

    @field_validator("token")
    @classmethod
    def _empty_token_means_none(cls, value: str | None) -> str | None:
        """BOILERBENCH_TOKEN= (set but empty, as compose files often leave it) disables auth."""
        return value or None
