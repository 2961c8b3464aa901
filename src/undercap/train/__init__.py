"""STEP 4: training to the target accuracy on the device (paper Sec. 4.3, 5).

loop.py is the training loop estimation shares; device.py runs it on a device with
the frequency locked, power sampled, the guard (guard.py) holding the limit and
checkpoints (checkpoint.py) that survive a kill; setup.py builds a run so it repeats
the estimate's procedure exactly.
"""

from undercap.train.device import train_on_device

__all__ = ["train_on_device"]
