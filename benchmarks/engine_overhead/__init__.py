"""Engine overhead: the GD and flow engines against hand-written jitted kernels of the same dynamics."""
