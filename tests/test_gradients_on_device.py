"""Partial gradients of an accumulation window go back onto each parameter's own device.

A GPU-written checkpoint is often loaded onto the CPU first (``map_location``), or its tensors
stay where they were saved; the restored ``.grad`` must sit where the parameter is. No GPU
here: the meta device stands in for another device (a tensor there has a device, no data).
"""

from __future__ import annotations

import torch

from tracker_core.adapter import capture_gradients, restore_gradients


def test_gradients_saved_on_the_cpu_are_restored_onto_the_parameters_device() -> None:
    on_cpu = torch.nn.Parameter(torch.zeros(3))
    elsewhere = torch.nn.Parameter(torch.zeros(2, 2, device="meta"))

    restore_gradients([on_cpu, elsewhere], [torch.ones(3), torch.ones(2, 2)])

    assert on_cpu.grad is not None and on_cpu.grad.device.type == "cpu"
    assert elsewhere.grad is not None and elsewhere.grad.device.type == "meta"


def test_restored_gradients_are_copies_not_the_saved_tensors() -> None:
    parameter = torch.nn.Parameter(torch.zeros(3))
    saved = torch.ones(3)

    restore_gradients([parameter], [saved])
    saved.add_(1)

    assert parameter.grad is not None and torch.equal(parameter.grad, torch.ones(3))


def test_captured_gradients_stay_on_their_device() -> None:
    parameter = torch.nn.Parameter(torch.zeros(2, device="meta"))
    parameter.grad = torch.ones(2, device="meta")

    (captured,) = capture_gradients([parameter])

    assert captured is not None and captured.device.type == "meta"
