"""Tests of ``agent/workloads``: the protocol, the dataset checks, and real torchrun runs on loopback."""
