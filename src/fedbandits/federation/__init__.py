"""Real cross-silo deployment of Private-FedLinUCB on Flower (``pip install fedbandits[deploy]``).

* :mod:`~fedbandits.federation.spec`: what server and silos agree on (config, hash, constants);
* :mod:`~fedbandits.federation.silo`: a silo's users served by the online agent, and its durable state;
* :mod:`~fedbandits.federation.server`: validation of incoming messages, the round's closing (through
  :class:`~fedbandits.online.rounds.Rounds`), durable state;
* :mod:`~fedbandits.federation.server_app`, :mod:`~fedbandits.federation.client_app`: the Flower
  ServerApp and ClientApp that carry them (their messages: :mod:`~fedbandits.federation.wire`);
* :mod:`~fedbandits.federation.serving_server_app`, :mod:`~fedbandits.federation.serving_client_app`:
  the Flower app that carries the serving silos' sync rounds (``fedbandits serve ... --flower``), and
  :mod:`~fedbandits.federation.serving_deployment` its processes on either side;
* :mod:`~fedbandits.federation.shuffler`, :mod:`~fedbandits.federation.shuffler_client`: the shuffler
  party of ``sdp-amplification`` and its clients;
* :mod:`~fedbandits.federation.certs`, :mod:`~fedbandits.federation.deployment`,
  :mod:`~fedbandits.federation.processes`, :mod:`~fedbandits.federation.flower_setup`,
  :mod:`~fedbandits.federation.supervisor`: certificates, the deployments (server side, or a whole
  federation on loopback), their processes (a silo that restarts after a crash keeps trying to
  rejoin), the files and command lines Flower is given; the ``fedbandits deploy`` command is
  :mod:`fedbandits.cli.deploy`.

Only the Flower apps and the deployment modules (deployment, serving_deployment, processes,
flower_setup) need Flower; the rest is plain numpy.
See docs/deployment.md.
"""
