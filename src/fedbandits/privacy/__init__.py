"""Privacy mechanisms and accounting: tree aggregation, Gaussian and shuffle protocols."""
