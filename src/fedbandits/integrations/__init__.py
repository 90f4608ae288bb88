"""Adapters that make fedbandits' online agent usable inside other libraries' tools.

Each adapter is its own module and imports its library only there: ``import fedbandits`` never
imports any of them (``fedbandits.integrations.coba`` needs the ``coba`` extra).
"""
