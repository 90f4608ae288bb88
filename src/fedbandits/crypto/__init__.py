"""The cryptography of the federation, below both transports (issue #45): no transport, no protocol
of ours but the cryptographic ones, and no fedbandits module but its own.

* :mod:`~fedbandits.crypto.secure_aggregation` -- the primitives (X25519, HKDF, the mask generator,
  Shamir shares) and the all-present pairwise masking the serving silos run;
* :mod:`~fedbandits.crypto.double_masking` -- the actively secure protocol the Flower deployment
  runs (Bonawitz et al. 2017 with self-masks and signed survivor lists; a release enters one
  masked sum, ever);
* :mod:`~fedbandits.crypto.signing` -- the silos' long-term Ed25519 identities under the signing CA.

Both transports (``federation/``, the Flower deployment; ``serve/``, the HTTP service) import these
modules; none of them imports a transport.
"""
