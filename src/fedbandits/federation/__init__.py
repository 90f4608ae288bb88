"""Real cross-silo deployment of Private-FedLinUCB on Flower (``pip install fedbandits[deploy]``).

* :mod:`~fedbandits.federation.spec`: what server and silos agree on (config, hash, constants);
* :mod:`~fedbandits.federation.silo`: a silo's decisions, local randomizer and durable state;
* :mod:`~fedbandits.federation.server`: validation of incoming messages, analyzer, durable state;
* :mod:`~fedbandits.federation.app`: the Flower ServerApp / ClientApp that carry them;
* :mod:`~fedbandits.federation.certs`, :mod:`~fedbandits.federation.deployment`,
  :mod:`~fedbandits.federation.processes`, :mod:`~fedbandits.federation.flower_setup`,
  :mod:`~fedbandits.federation.supervisor`, :mod:`~fedbandits.federation.cli`: certificates,
  the deployments (server side, or a whole federation on loopback), their processes (a silo
  that restarts after a crash keeps trying to rejoin), the files and command lines Flower is
  given, and the ``fedbandits deploy`` command.

Only :mod:`~fedbandits.federation.app` and the deployment modules (deployment, processes,
flower_setup) need Flower; the rest is plain numpy.
See docs/deployment.md.
"""
