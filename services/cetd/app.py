"""The CETD service: `uvicorn services.cetd.app:app`."""

from services.cetd.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
