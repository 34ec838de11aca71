"""The readability service: `uvicorn services.readability.app:app`."""

from services.readability.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
