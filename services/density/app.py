"""The density service: `uvicorn services.density.app:app`."""

from services.density.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
