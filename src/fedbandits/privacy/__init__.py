"""Privacy mechanisms and accounting: tree aggregation, Gaussian and shuffle protocols.

* :mod:`~fedbandits.privacy.tree` -- index math of the binary-tree mechanism;
* :mod:`~fedbandits.privacy.mechanisms` -- per-silo randomizer, server analyzer, shuffler;
* :mod:`~fedbandits.privacy.vector_sum` -- the shuffle vector-sum protocol (message level and fast form);
* :mod:`~fedbandits.privacy.sensitivity` -- sensitivities from the clipping bounds;
* :mod:`~fedbandits.privacy.accounting` -- closed forms, exact GDP accounting, dp-accounting;
* :mod:`~fedbandits.privacy.shuffle_amplification` -- amplification by shuffling (Lemma F.2);
* :mod:`~fedbandits.privacy.calibration` -- noise calibration of each protocol and its report.
"""
