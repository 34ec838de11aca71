"""The trafilatura service: `uvicorn services.trafilatura.app:app`."""

from services.trafilatura.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
