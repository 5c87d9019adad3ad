"""What ``cogworker run -r contrib_flask_worker`` loads: the factory's app, built at import
(``$CONTRIB_FLASK_SETTINGS``, JSON, lets a test change its settings)."""

import json
import os

from contrib_flask_app import create_app

app = create_app(**json.loads(os.environ.get("CONTRIB_FLASK_SETTINGS", "{}")))
