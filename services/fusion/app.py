"""The fusion service: `uvicorn services.fusion.app:app`."""

from services.fusion.extractor import ALGORITHM
from services.fusion.model import default_model
from shared.service import create_service_app

# Loaded here, not first in a worker: a BOILERBENCH_FUSION_MODEL file that does not load
# stops the service at startup with one line naming the variable (shared.serving), and
# /info names the file loaded.
default_model()
app = create_service_app(ALGORITHM)
