"""The choices of ``fedbandits serve``'s options, in a module that imports nothing: the command
line's parser reads them on every ``fedbandits`` command, with or without the serve extra."""

from __future__ import annotations

#: what a silo and the server do when an epoch's planned releases are all made (docs/serving.md)
POLICIES = ("stop", "renew")
#: the event log's durability: SQLite's ``synchronous`` setting for each (fedbandits.serve.store)
DURABILITY = {"process": "NORMAL", "fsync": "FULL"}
