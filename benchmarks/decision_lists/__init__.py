"""Decision lists: exact paths, Theorem 1 and Theorem 2 against their baselines, in four parts."""
