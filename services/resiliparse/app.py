"""The resiliparse service: `uvicorn services.resiliparse.app:app`."""

from services.resiliparse.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
