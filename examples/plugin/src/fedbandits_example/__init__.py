"""An example fedbandits plugin (docs/extending.md).

* ``fed-thompson`` (:mod:`.thompson`): federated linear Thompson sampling on FedLinUCB's ridge state,
  batch schedule and protocols;
* ``ldp-rounded`` (:mod:`.rounded`): the built-in ``ldp`` tree protocol whose released messages are
  rounded to a grid (post-processing: ``ldp``'s calibration and guarantee).

Both are registered by the entry points of this package's ``pyproject.toml``; nothing here is
imported by fedbandits until a table is first read.
"""
