"""Probes: read the node (NVML, psutil, sysfs, the training interpreter) and return shared models.

Each probe is cheap enough to run every sampling interval, except the software probe, which runs
a subprocess and is cached by the sampler.
"""
