"""Real training steps of one model on the host, with synthetic inputs of its shape.

Time per sample is data-independent (paper Sec. 4.1), so profiling feeds random
tensors of the model's task (models/taskprobe.py): images, or token ids. The labels'
range is the model's own output width (models/workload.py), so a user's model that
ignores `num_classes` profiles too, and one that does not take `input_shape` is one
error line naming both shapes.
"""

from typing import Optional, Tuple

from undercap.artifacts.workload import Workload


class Stepper:
    """Runs real training steps of one model on the host accelerator."""

    def __init__(
        self,
        model_name: str,
        input_shape: Tuple[int, ...],
        num_classes: int,
        torch_device: str,
        seed: int,
        task: Optional[str] = None,
        precision: str = "fp32",
        simulated: bool = False,
    ) -> None:
        import torch

        from undercap.models.registry import model_spec
        from undercap.models.taskprobe import resolve_task, token_vocab
        from undercap.models.workload import output_classes, workload_of
        from undercap.train.loop.precision import grad_scaler, host_precision

        spec = model_spec(model_name)
        torch.manual_seed(seed)
        self.torch = torch
        self.device = torch_device
        self.model = spec.build(num_classes=num_classes, input_shape=input_shape)
        self.task = resolve_task(self.model, input_shape, task or spec.task)
        if not spec.builtin:  # the model's own output width, whatever it was asked for
            num_classes = output_classes(self.model, input_shape, self.task.name)
        self.workload: Workload = workload_of(
            self.model, model_name, input_shape, self.task.name, precision
        )
        # the arithmetic the host steps in. A simulated board's t and P come from its
        # model in `precision`; on a CPU its host steps only exercise the model, in fp32
        # (a 16-bit float is many times slower there and changes no number)
        cpu_stand_in = simulated and not torch_device.startswith("cuda")
        self.precision = (
            "fp32" if cpu_stand_in else host_precision(precision, torch_device, simulated)
        )
        self.scaler = grad_scaler(self.precision, torch_device)
        self.model.to(torch_device).train()
        opt = torch.optim.AdamW if spec.optimizer == "adamw" else torch.optim.Adam
        self.optimizer = opt(self.model.parameters(), lr=1e-4)
        self.input_shape = input_shape
        self.num_classes = num_classes
        self.vocab = token_vocab(self.model) or num_classes
        self._batch: Optional[tuple] = None

    def set_batch_size(self, b: int) -> None:
        from undercap.models.taskprobe import dummy_batch

        gen = self.torch.Generator().manual_seed(b)
        x, y = dummy_batch(self.task, self.input_shape, b, self.vocab, self.num_classes, gen)
        self._batch = (x.to(self.device), y.to(self.device))

    def step(self) -> None:
        from undercap.models.taskprobe import forward
        from undercap.train.loop.precision import autocast, backward_step
        from undercap.train.loop.scoring import make_objective

        x, y = self._batch  # type: ignore[misc]
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.precision, self.device):
            loss = make_objective().loss(forward(self.model, self.task, x, y), y)
        backward_step(loss, self.optimizer, self.scaler)  # fp16 as training steps it

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def is_oom(self, e: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", ())
        return isinstance(e, oom) or "out of memory" in str(e).lower()
