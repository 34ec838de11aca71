"""The BTE service: `uvicorn services.bte.app:app`."""

from services.bte.extractor import ALGORITHM
from shared.service import create_service_app

app = create_service_app(ALGORITHM)
