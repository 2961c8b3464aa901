"""undercap: the fastest way to a target accuracy under a power cap.

Implements "Accelerated Training on Low-Power Edge Devices" (Ahmed et al., TMLR 2025,
arXiv 2502.18323): pick the batch size and GPU frequency that minimise
time-to-accuracy T(b, f) = t(b, f) * N(b) subject to P(b, f) <= P_max.

Importing the package is cheap: torch is only imported by the modules that train.
"""

__version__ = "0.1.0"
