"""The ensemble service: `uvicorn services.ensemble.app:app`."""

from services.ensemble.extractor import ALGORITHM
from services.ensemble.model import default_model
from shared.service import create_service_app

# Loaded here, not first in a worker: a BOILERBENCH_ENSEMBLE_MODEL file that does not load
# stops the service at startup with one line naming the variable (shared.serving), and
# /info names the file loaded.
default_model()
app = create_service_app(ALGORITHM)
