"""Template-free tuning: sketch generation and the learned cost model that ranks candidates."""
