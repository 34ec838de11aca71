"""The jusText service: `uvicorn services.justext.app:app`."""

from services.justext.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
