"""The ensemble service: `uvicorn services.ensemble.app:app`."""

from services.ensemble.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
