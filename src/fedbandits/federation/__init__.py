"""Real cross-silo deployment of Private-FedLinUCB on Flower (``pip install fedbandits[deploy]``).

* :mod:`~fedbandits.federation.spec`: what server and silos agree on (config, hash, constants);
* :mod:`~fedbandits.federation.silo`: a silo's decisions, local randomizer and durable state;
* :mod:`~fedbandits.federation.server`: validation of incoming messages, analyzer, durable state;
* :mod:`~fedbandits.federation.server_app`, :mod:`~fedbandits.federation.client_app`: the Flower
  ServerApp and ClientApp that carry them (their messages: :mod:`~fedbandits.federation.wire`);
* :mod:`~fedbandits.federation.certs`, :mod:`~fedbandits.federation.deployment`,
  :mod:`~fedbandits.federation.processes`, :mod:`~fedbandits.federation.flower_setup`,
  :mod:`~fedbandits.federation.supervisor`, :mod:`~fedbandits.cli.deploy`: certificates,
  the deployments (server side, or a whole federation on loopback), their processes (a silo
  that restarts after a crash keeps trying to rejoin), the files and command lines Flower is
  given, and the ``fedbandits deploy`` command.

Only the two apps and the deployment modules (deployment, processes,
flower_setup) need Flower; the rest is plain numpy.
See docs/deployment.md.
"""
