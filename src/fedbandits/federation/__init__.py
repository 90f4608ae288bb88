"""Real cross-silo deployment of Private-FedLinUCB on Flower (``pip install fedbandits[deploy]``).

* :mod:`~fedbandits.federation.spec`: what server and silos agree on (config, hash, constants);
* :mod:`~fedbandits.federation.silo`: a silo's decisions, local randomizer and durable state;
* :mod:`~fedbandits.federation.server`: validation of incoming messages, analyzer, durable state;
* :mod:`~fedbandits.federation.app`: the Flower ServerApp / ClientApp that carry them;
* :mod:`~fedbandits.federation.certs`, :mod:`~fedbandits.federation.launcher`,
  :mod:`~fedbandits.federation.supervisor`, :mod:`~fedbandits.federation.cli`: certificates,
  processes (a silo that restarts after a crash keeps trying to rejoin) and the
  ``fedbandits deploy`` command.

Only :mod:`~fedbandits.federation.app` and the launcher need Flower; the rest is plain numpy.
See docs/deployment.md.
"""
