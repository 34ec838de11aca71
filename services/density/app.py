"""The density service: `uvicorn services.density.app:app`."""

from services.density.extractor import ALGORITHM
from services.density.model import default_model
from shared.service import create_service_app

# Loaded here, not first in a worker: a BOILERBENCH_DENSITY_MODEL file that does not load
# stops the service at startup with one line naming the variable (shared.serving), and
# /info names the file loaded.
default_model()
app = create_service_app(ALGORITHM)
