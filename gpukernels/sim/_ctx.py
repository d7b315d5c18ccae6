"""The launch being simulated right now (one at a time per process), shared by the simulator's modules."""

LAUNCH = None  # gpukernels.sim._launch.Launch while a kernel runs, else None
