"""The fusion service: `uvicorn services.fusion.app:app`."""

from services.fusion.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
