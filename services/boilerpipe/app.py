"""The Boilerpipe service: `uvicorn services.boilerpipe.app:app`."""

from services.boilerpipe.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
