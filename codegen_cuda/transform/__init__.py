"""Device passes: from a lowered GPU schedule to kernels a CUDA printer can emit."""
