"""``fedbandits serve``: a silo's durable decision service and the federation's sync schedule.

    from fedbandits.serve.silo import ServingSilo     # the agent behind its SQLite event log
    from fedbandits.serve.http import Service         # its HTTP API (Starlette; uvicorn runs it)
    from fedbandits.serve.coordinator import Coordinator   # the server's wall-clock sync rounds
    from fedbandits.serve.links import HttpLink       # ... reaching the silos' sync API, or
    from fedbandits.federation.serving_server_app import FlowerLink  # ... through Flower (deploy extra;
                                                  # federation.serving_deployment: its processes)

Needs the ``serve`` extra (``pip install 'fedbandits[serve]'``: starlette, uvicorn, httpx, orjson,
cryptography).  This package's ``__init__`` imports nothing, and neither do ``options`` and ``cli``:
every ``fedbandits`` command builds the ``serve`` parser, with or without the extra.
See docs/serving.md.  The package sits beside federation: above the online agent it serves.
"""
