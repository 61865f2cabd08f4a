"""ftwiz's built-in training workloads: the only code of the project that imports torch.

The launcher copies this directory to each node's run dir as the package ``ftwiz_workloads`` and runs::

    python -m torch.distributed.run <torchrun options> -m ftwiz_workloads --spec <rundir>/job.json

so everything here uses relative imports only and needs nothing but torch (and transformers, peft,
bitsandbytes for ``sft``). The stdout line protocol is defined in :mod:`.protocol`; importing this package
or :mod:`.protocol` does not import torch.
"""
