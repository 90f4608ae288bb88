"""The cryptography of the federation, below both transports (issue #45): no transport, no protocol
of ours but the cryptographic ones, and no fedbandits module but its own.

* :mod:`~fedbandits.crypto.secure_aggregation` -- the primitives (X25519, HKDF, the mask generator,
  Shamir shares, the roster);
* :mod:`~fedbandits.crypto.double_masking` -- the actively secure protocol both transports run
  (Bonawitz et al. 2017 with self-masks and signed survivor lists; a release enters one masked
  sum, ever);
* :mod:`~fedbandits.crypto.secure_round` -- its round on the server's side, written once with no
  transport in it (the Flower ServerApp and the serving coordinator carry its steps);
* :mod:`~fedbandits.crypto.signing` -- the silos' long-term Ed25519 identities under the signing CA.

Both transports (``federation/``, the Flower deployment; ``serve/``, the HTTP service) import these
modules; none of them imports a transport.
"""
