"""The names of the synchronisation protocols, in the order ``fedbandits list`` shows them.

Names only: the parameters of an algorithm (``FedLinUCBParams.protocol``) are validated against
this list without importing the registry, which sits above the algorithms and builds each
protocol from its name (:data:`fedbandits.registry.PROTOCOLS`, same names, same order).
"""

PROTOCOL_NAMES = ("none", "ldp", "ldp-prefix", "sdp-amplification", "sdp-vector-sum", "distributed-dp")
