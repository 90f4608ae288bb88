"""``fedbandits serve``: a silo's durable decision service and the federation's sync schedule.

    silo = ServingSilo(config, state_dir, silo=0)        # the agent behind its SQLite event log
    app = Service(silo, token, sync_token).app           # the HTTP API (Starlette; uvicorn runs it)
    Coordinator(config, urls, state_dir, sync_token).run()   # the server's wall-clock sync rounds

Needs the ``serve`` extra (``pip install 'fedbandits[serve]'``: starlette, uvicorn, httpx).
See docs/serving.md.  The package sits beside federation: above the online agent it serves.
"""

from fedbandits.serve.silo import POLICIES, SERVE_PROTOCOLS, ServeError, ServingSilo
from fedbandits.serve.store import Store, StoreError

__all__ = ["POLICIES", "SERVE_PROTOCOLS", "ServeError", "ServingSilo", "Store", "StoreError"]
