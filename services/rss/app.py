"""The rss service: `uvicorn services.rss.app:app`."""

from services.rss.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
