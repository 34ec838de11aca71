"""Settings of one algorithm service, read from the environment (prefix BOILERBENCH_)."""

from __future__ import annotations

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The default of max_browser_bytes, the most memory a page may make cetd's headless
# browser hold (shared/layout.py): a page's scripts could otherwise fill gigabytes within
# a service's time limit. An idle browser holds about 0.2 GB; a 9 MB page of 300,000
# elements takes it to 1.4 GB.
MAX_BROWSER_BYTES = 2 * 2**30
# The least cap accepted: an idle browser alone holds about 190 MiB, so a lower cap (a
# value meant in MiB, say) would fail every page.
MIN_BROWSER_BYTES = 256 * 2**20


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BOILERBENCH_", extra="ignore")

    host: str = Field("127.0.0.1", description="Bind address; containers set 0.0.0.0.")
    port: int | None = Field(None, description="Listen port; default: the registry's.")
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1, description="Larger bodies get 413.")
    time_limit_s: float = Field(10.0, gt=0, description="Longer extractions get 504.")
    workers: int = Field(1, ge=1, le=64, description="Extraction worker processes.")
    queue_wait_s: float = Field(
        30.0, gt=0, description="Longest wait for a free worker; then 503 busy.")
    max_reply_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Larger replies are refused (422 reply_too_large).")

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
    max_browser_bytes: int = Field(
        MAX_BROWSER_BYTES, ge=MIN_BROWSER_BYTES, description="cetd's measure htd: the most "
        "memory (resident, all its processes) the headless browser may hold on a page; past "
        "it the browser is killed and the page gets 422. Read by the process that runs the "
        "browser (an extraction worker, `boilerbench render`).")

    @field_validator("token")
    @classmethod
    def _empty_token_means_none(cls, value: str | None) -> str | None:
        """BOILERBENCH_TOKEN= (set but empty, as compose files often leave it) disables auth."""
        return value or None


class HttpLimits(BaseSettings):
    """Limits of the HTTP server (shared/serving.py) against slow and oversized clients,
    read from the environment: BOILERBENCH_ for services, BOILERBENCH_API_ for the API
    (`HttpLimits(_env_prefix=...)`)."""

    model_config = SettingsConfigDict(env_prefix="BOILERBENCH_", extra="ignore")

    max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="A request head (line and headers) over this gets 431.")
    request_timeout_s: float = Field(
        30.0, gt=0, description="A request must arrive whole (head and body) within this; "
                                "else its connection is closed (408 while in the head).")
    max_connections: int = Field(
        1000, ge=1, description="Open connections at most; a new one past it closes the "
                                "oldest connection whose request is still incomplete.")
    linger_bytes: int = Field(
        2**30, ge=0, description="After a reply sent while the request's body is still "
                                 "arriving (a 413, a 401 or 404 before the body was read), at "
                                 "most this much of the rest is read and dropped before the "
                                 "connection is closed, so that a client that sends its whole "
                                 "body before it reads gets the reply; past it the connection "
                                 "is cut.")


def invalid_settings(exc: ValidationError, env_prefix: str) -> str:
    """One line naming each variable that is wrong, its value and why (pydantic's own
    report names the field, not the variable an operator set)."""
    return "; ".join(
        f"{env_prefix}{'_'.join(map(str, error['loc'])).upper()}={error['input']!r}: "
        f"{error['msg']}" for error in exc.errors())
