"""The misbehaving test extractor as a service: `python -m shared.serving
tests.misbehaving_app:app` (settings from the environment, as for every service)."""

from shared.service import create_service_app
from tests.misbehaving_extractor import ALGORITHM

app = create_service_app(ALGORITHM)
